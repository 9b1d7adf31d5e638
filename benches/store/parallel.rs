//! Runs side by side: a fan-out of 8 branches in each durability mode, and 16 `cycle_flat` runs
//! at once on distinct threads (group commit).

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentflow::Durability;
use agentflow::prelude::*;
use serde_json::json;

use crate::floor::RawRedb;
use crate::support::{
    Config, MODES, Stored, check_flat, emit, mode_name, round1, round3, run_on, sample, sample_pairs, thread_id,
};
use crate::workload_cycles::{Flat, Limit, cycle_flat};
use crate::workload_fanout::{FAN_NODES, Fan, fanout};

const FAN_STEPS: u32 = 4;
const CONCURRENT: usize = 16;

pub fn bench_fanout(cfg: &Config, rt: &tokio::runtime::Runtime, raw: &mut RawRedb) {
    let runs = cfg.fan_runs;
    let unit = Arc::new(());
    let one = |graph: &App<Fan, ()>, mode| {
        let (run, took) = run_on(rt, graph, &unit, Fan::default(), mode, thread_id("fanout"));
        assert_eq!(run.steps, FAN_STEPS);
        assert_eq!(run.state.log.len(), FAN_NODES);
        assert_eq!(run.state.log[2], "b0");
        black_box(run);
        took
    };
    let graph = fanout::graph().app();
    let baseline = sample(cfg.samples, || (0..runs).map(|_| one(&graph, None)).sum()) / runs as f64;
    for mode in MODES {
        let stored = Stored::new("fanout", fanout::graph());
        let mut ms_per_run =
            || (0..runs).map(|_| one(&stored.graph, Some(mode))).sum::<Duration>().as_secs_f64() * 1e3 / runs as f64;
        let mut line = json!({
            "bench": "fanout",
            "store": "redb_file",
            "durability": mode_name(Some(mode)),
            "runtime": "multi_thread",
            "branches": 8,
            "nodes_per_run": FAN_NODES,
            "steps_per_run": FAN_STEPS,
            "runs": runs,
            "samples": cfg.samples,
            "no_store_ms_per_run": round3(baseline * 1e3),
            "quick": cfg.quick,
        });
        let ms = if mode == Durability::Sync {
            // How many raw redb commits (each one fsync) fit in the time of one run.
            let (ms, raw_rate, commits) =
                sample_pairs(cfg.samples, &mut ms_per_run, || 1e3 / raw.rate(cfg.raw_ops / 2));
            line["raw_redb_commits_per_s"] = json!(round1(1e3 / raw_rate));
            line["raw_redb_commits_per_run"] = json!(round1(commits));
            line["target"] = json!("< 2 ms per run");
            line["met"] = json!(ms < 2.0);
            ms
        } else {
            sample(cfg.samples, || Duration::from_secs_f64(ms_per_run()))
        };
        line["ms_per_run"] = json!(round3(ms));
        stored.close();
        emit(line);
    }
}

/// 16 `cycle_flat` runs at once on distinct threads, `Sync`: aggregate steps/s,
/// each sample paired with one run alone on the same store.
pub fn bench_concurrent(cfg: &Config, rt: &tokio::runtime::Runtime) {
    let n = cfg.concurrent_steps;
    let deps = Arc::new(Limit { n });
    let stored = Stored::new("concurrent", cycle_flat::graph());
    let single = || {
        let (run, took) = run_on(rt, &stored.graph, &deps, Flat::default(), Some(Durability::Sync), thread_id("one"));
        check_flat(&run.state, n);
        n as f64 / took.as_secs_f64()
    };
    let all = || {
        let (graph, deps) = (stored.graph.clone(), Arc::clone(&deps));
        let took = rt.block_on(async move {
            let began = Instant::now();
            let tasks: Vec<_> = (0..CONCURRENT)
                .map(|_| {
                    let (graph, deps, id) = (graph.clone(), Arc::clone(&deps), thread_id("many"));
                    tokio::spawn(async move {
                        let run =
                            graph.runner(&*deps).thread(id).durability(Durability::Sync).run(Flat::default()).await;
                        let run = run.expect("run");
                        assert!(run.outcome.is_completed(), "{}", run.outcome);
                        check_flat(&run.state, deps.n);
                    })
                })
                .collect();
            for task in tasks {
                task.await.expect("concurrent run");
            }
            began.elapsed()
        });
        (CONCURRENT as u64 * n) as f64 / took.as_secs_f64()
    };
    let (rate, single_rate, speedup) = sample_pairs(cfg.samples, all, single);
    stored.close();
    emit(json!({
        "bench": "concurrent_threads",
        "workload": "cycle_flat",
        "store": "redb_file",
        "durability": "sync",
        "runtime": "multi_thread",
        "threads": CONCURRENT,
        "steps_per_thread": n,
        "samples": cfg.samples,
        "single_steps_per_s": round1(single_rate),
        "aggregate_steps_per_s": round1(rate),
        "speedup": round3(speedup),
        "target": ">= 3x single-thread steps/s",
        "met": speedup >= 3.0,
        "quick": cfg.quick,
    }));
}
