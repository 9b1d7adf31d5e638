//! Store size of a `cycle` thread as it grows: the file and the payloads, per step.

use std::sync::Arc;

use agentflow::Durability;
use serde_json::json;

use crate::support::{Config, Stored, check_cycle, emit, round1, round3, run_on};
use crate::workload_cycles::{Cyc, Limit, cycle};

/// Store size of one `cycle` thread of 500, 1000, 2000 steps, each in its own file.
pub fn bench_size(cfg: &Config, rt: &tokio::runtime::Runtime) {
    let mut sizes = Vec::new();
    for &n in &cfg.size_steps {
        let deps = Arc::new(Limit { n });
        let stored = Stored::new("size", cycle::graph());
        let (run, _) = run_on(rt, &stored.graph, &deps, Cyc::default(), Some(Durability::Sync), "size".into());
        check_cycle(&run.state, n);
        let history = stored.graph.history("size").unwrap();
        let payload: u64 = history.iter().map(|c| c.payload_bytes).sum();
        let snapshots = history.iter().filter(|c| c.has_snapshot).count();
        let file = stored.close();
        emit(json!({
            "bench": "store_size",
            "workload": "cycle",
            "durability": "sync",
            "steps": n,
            "file_bytes": file,
            "payload_bytes": payload,
            "snapshots": snapshots,
            "file_bytes_per_step": round1(file as f64 / n as f64),
            "payload_bytes_per_step": round1(payload as f64 / n as f64),
            "quick": cfg.quick,
        }));
        sizes.push((n, file, payload));
    }
    let (Some(&(n0, f0, p0)), Some(&(n1, f1, p1))) = (sizes.first(), sizes.last()) else { return };
    let per_step = |bytes: u64, n: u64| bytes as f64 / n as f64;
    let file_growth = per_step(f1, n1) / per_step(f0, n0);
    let payload_growth = per_step(p1, n1) / per_step(p0, n0);
    emit(json!({
        "bench": "store_size_growth",
        "workload": "cycle",
        "steps": [n0, n1],
        "file_bytes": [f0, f1],
        "payload_bytes": [p0, p1],
        "file_per_step_growth": round3(file_growth),
        "payload_per_step_growth": round3(payload_growth),
        "linear_if": "bytes per step at the largest size <= 1.3x those at the smallest (quadratic: ~4x)",
        "target": "linear, < 1.5 MB at 2000 steps",
        "met": file_growth <= 1.3 && payload_growth <= 1.3 && (n1 != 2000 || f1 < 1_500_000),
        "quick": cfg.quick,
    }));
}
