//! Steps/s of the cycle workloads (`cycle_flat`, `cycle`) with a store, in every durability mode.

use std::sync::Arc;
use std::time::Duration;

use agentflow::Durability;
use agentflow::prelude::*;
use serde_json::json;

use crate::floor::RawRedb;
use crate::support::{
    Config, MODES, Stored, emit, median, mode_name, round1, round3, run_on, sample, sample_pairs, thread_id, with_cpu,
};
use crate::workload_cycles::Limit;

/// Steps/s of one cycle workload in every durability mode. In `Sync` mode
/// each sample is paired with raw redb commits taken right before it.
pub fn bench_cycles<S: State + Default>(
    cfg: &Config,
    rt: &tokio::runtime::Runtime,
    raw: &mut RawRedb,
    name: &str,
    graph: CompiledGraph<S, Limit>,
    check: impl Fn(&S, u64),
) {
    // Without a thread: the executor's own cost per step, for reference.
    let n = cfg.eventual_steps;
    let deps = Arc::new(Limit { n });
    let baseline = sample(cfg.samples, || {
        let (run, took) = run_on(rt, &graph.app(), &deps, S::default(), None, String::new());
        check(&run.state, n);
        took
    }) / n as f64;
    for mode in MODES {
        let stored = Stored::new(name, graph.clone());
        let n = if mode == Durability::Sync { cfg.sync_steps } else { cfg.eventual_steps };
        let deps = Arc::new(Limit { n });
        let run_rate = || {
            let (run, took) = run_on(rt, &stored.graph, &deps, S::default(), Some(mode), thread_id(name));
            assert_eq!(u64::from(run.steps), n);
            check(&run.state, n);
            n as f64 / took.as_secs_f64()
        };
        let mut line = json!({
            "bench": name,
            "store": "redb_file",
            "durability": mode_name(Some(mode)),
            "runtime": "multi_thread",
            "steps": n,
            "samples": cfg.samples,
            "no_store_us_per_step": round3(baseline * 1e6),
            "quick": cfg.quick,
        });
        let rate = if mode == Durability::Sync {
            // CPU time of the whole process per step and per raw commit, pair by pair: on a
            // machine shared with other work the wall-clock ratio drifts with the load, this
            // one much less. Reported beside the target, which stays on wall-clock rates.
            let (mut run_cpu, mut raw_cpu) = (Vec::new(), Vec::new());
            // Several pairs even in quick mode: one pair's ratio swings with the disk.
            let pairs = cfg.ratio_pairs;
            line["samples"] = json!(pairs);
            let (rate, raw_rate, ratio) = sample_pairs(
                pairs,
                || with_cpu(&mut run_cpu, run_rate),
                || with_cpu(&mut raw_cpu, || raw.rate(cfg.raw_ops)),
            );
            line["raw_redb_commits_per_s"] = json!(round1(raw_rate));
            line["vs_redb_raw"] = json!(round3(ratio));
            line["target"] = json!(">= 0.95x raw redb commits/s");
            line["met"] = json!(ratio >= 0.95);
            // The first pair is the warm-up.
            if run_cpu.len() == raw_cpu.len() && run_cpu.len() > 1 {
                let per_step: Vec<f64> = run_cpu[1..].iter().map(|d| d.as_secs_f64() * 1e6 / n as f64).collect();
                let per_raw: Vec<f64> =
                    raw_cpu[1..].iter().map(|d| d.as_secs_f64() * 1e6 / cfg.raw_ops as f64).collect();
                let ratios = per_raw.iter().zip(&per_step).map(|(r, s)| r / s).collect();
                line["cpu_us_per_step"] = json!(round3(median(per_step)));
                line["raw_cpu_us_per_commit"] = json!(round3(median(per_raw)));
                line["cpu_vs_redb_raw"] = json!(round3(median(ratios)));
            }
            rate
        } else {
            1.0 / sample(cfg.samples, || Duration::from_secs_f64(1.0 / run_rate()))
        };
        line["steps_per_s"] = json!(round1(rate));
        line["us_per_step"] = json!(round3(1e6 / rate));
        stored.close();
        emit(line);
    }
}
