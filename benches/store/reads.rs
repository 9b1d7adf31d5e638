//! Read latencies after a 3000-step thread: `graph.state` (and its parts) and `graph.history`.

use std::hint::black_box;
use std::sync::Arc;

use agentflow::{Durability, Store};
use serde_json::json;

use crate::support::{Config, Stored, check_cycle, check_flat, emit, latency, round3, run_on};
use crate::workload_cycles::{Cyc, Flat, Limit, cycle, cycle_flat};

/// Read latencies on a 3000-step `cycle` thread, with the parts of `state`
/// and the cost of copying that state in memory.
pub fn bench_reads(cfg: &Config, rt: &tokio::runtime::Runtime) {
    let n = cfg.read_steps;
    let deps = Arc::new(Limit { n });
    let stored = Stored::new("reads", cycle::graph());
    // The stored history does not depend on the durability mode; Exit is the quickest to write.
    let (run, _) = run_on(rt, &stored.graph, &deps, Cyc::default(), Some(Durability::Exit), "reads".into());
    check_cycle(&run.state, n);
    let graph = &stored.graph;
    let store: &dyn Store = &*stored.store;
    let state = latency(cfg.state_reads, || {
        let snap = graph.state("reads").unwrap().expect("thread");
        assert_eq!(snap.state.log.len() as u64, n);
        black_box(snap);
    });
    // Its parts: the latest checkpoint (with its payload), the chain from
    // it back to a snapshot, and decoding the snapshot.
    let latest = latency(cfg.state_reads, || {
        black_box(store.latest_checkpoint("reads").unwrap().expect("checkpoint"));
    });
    let chain = store.state_chain("reads", n).unwrap().expect("chain");
    assert!(chain.steps.is_empty(), "the last checkpoint of a finished run is a snapshot");
    let chain_s = latency(cfg.state_reads, || {
        black_box(store.state_chain("reads", n).unwrap().expect("chain"));
    });
    let decode = latency(cfg.state_reads, || {
        black_box(serde_json::from_slice::<Cyc>(&chain.snapshot).unwrap());
    });
    // The floor for any read that returns this state owned: copying it in
    // memory (one allocation per log entry, as decoding needs too).
    let clone_s = latency(cfg.state_reads, || {
        black_box(run.state.clone());
    });
    let thread_s = latency(cfg.state_reads, || {
        black_box(store.thread("reads").unwrap().expect("thread"));
    });

    let history = graph.history("reads").unwrap();
    assert_eq!(history.len() as u64, n + 1);
    let history_s = latency(cfg.history_reads, || {
        black_box(graph.history("reads").unwrap());
    });
    // The checkpoint with the longest chain of deltas: the one right before
    // the last snapshot that is not the final checkpoint.
    let snapshots: Vec<u64> = history.iter().filter(|c| c.has_snapshot).map(|c| c.seq).collect();
    let worst = snapshots.iter().rev().nth(1).map_or(n, |s| s - 1);
    let deltas = worst - snapshots.iter().copied().filter(|s| *s <= worst).max().unwrap_or(0);
    let state_at = latency(cfg.state_reads / 4, || {
        black_box(graph.state_at("reads", worst).unwrap().expect("checkpoint"));
    });
    stored.close();
    emit(json!({
        "bench": "read_state",
        "workload": "cycle",
        "thread_steps": n,
        "state_bytes": chain.snapshot.len(),
        "reads": cfg.state_reads,
        "ms": round3(state * 1e3),
        "target": "< 0.1 ms",
        "met": state < 1e-4,
        "parts_ms": {
            "latest_checkpoint": round3(latest * 1e3),
            "state_chain": round3(chain_s * 1e3),
            "decode_snapshot": round3(decode * 1e3),
        },
        "owned_copy_ms": round3(clone_s * 1e3),
        "vs_owned_copy": round3(state / clone_s),
        "thread_record_ms": round3(thread_s * 1e3),
        "state_at_longest_chain_ms": round3(state_at * 1e3),
        "longest_chain_seq": worst,
        "longest_chain_deltas": deltas,
        "quick": cfg.quick,
    }));
    emit(json!({
        "bench": "read_history",
        "workload": "cycle",
        "thread_steps": n,
        "checkpoints": history.len(),
        "reads": cfg.history_reads,
        "ms": round3(history_s * 1e3),
        "us_per_checkpoint": round3(history_s * 1e6 / history.len() as f64),
        "target": "< 20 ms",
        "met": history_s < 0.02,
        "quick": cfg.quick,
    }));
}

/// `graph.state` on a 3000-step `cycle_flat` thread: a state that does not
/// grow with the steps, so the figure is the read path's own cost.
pub fn bench_reads_flat(cfg: &Config, rt: &tokio::runtime::Runtime) {
    let n = cfg.read_steps;
    let deps = Arc::new(Limit { n });
    let stored = Stored::new("reads-flat", cycle_flat::graph());
    let (run, _) = run_on(rt, &stored.graph, &deps, Flat::default(), Some(Durability::Exit), "reads".into());
    check_flat(&run.state, n);
    let graph = &stored.graph;
    let state = latency(cfg.state_reads, || {
        let snap = graph.state("reads").unwrap().expect("thread");
        assert_eq!(snap.state.counter, n);
        black_box(snap);
    });
    let history = graph.history("reads").unwrap();
    assert_eq!(history.len() as u64, n + 1);
    stored.close();
    emit(json!({
        "bench": "read_state",
        "workload": "cycle_flat",
        "thread_steps": n,
        "reads": cfg.state_reads,
        "ms": round3(state * 1e3),
        "target": "< 0.1 ms",
        "met": state < 1e-4,
        "quick": cfg.quick,
    }));
}
