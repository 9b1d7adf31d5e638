//! Executor overhead benchmarks. One JSON line per figure on stdout.
//!
//! ```text
//! cargo bench --bench engine              # full: 21 samples, median (and min)
//! cargo bench --bench engine -- --quick   # CI smoke check, a few seconds
//! cargo bench --bench engine -- stream    # only the streaming figure
//! cargo bench --bench engine -- cycle_flat  # only the per-node cost of a plain cycle
//! cargo bench --bench engine -- cycle_flat_otel  # only that cost with OpenTelemetry export
//! AGENTFLOW_BENCH_QUICK=1 cargo bench --bench engine
//! ```
//!
//! Workloads:
//! - `cycle_flat`: `a -> b -> c -> a`, each node adds 1 to a `#[reduce(add)]`
//!   counter, the run routes to `END` after N node executions (N = 300, 3000,
//!   30000 to show the per-node cost does not grow with the number of steps);
//! - `cycle`: the same plus a `#[reduce(append)] log: Vec<String>` every node
//!   appends one short string to;
//! - `fanout`: `start -> split -> 8 parallel branches -> join -> END`, each
//!   node appending to a reducer list; 300 separate runs per sample.
//! - `map_reduce`: one sender, N = 1,000 payloads to one worker
//!   (`goto!(each(work, items))`, default `parallel` of 8), each instance
//!   appending one short string to a reducer list, then a join to END; µs per
//!   instance beside a hand-written `join_all` doing the same work
//!   [target < 2 µs per instance]. Then with `Durability::Sync` on a redb
//!   file: ms per run [target < 10 ms] and µs per instance, and durable
//!   commits per run for N = 10 and N = 1,000, counted by a `Store` wrapper:
//!   the steps' own, and the instances' (each finished instance's write is
//!   committed before its slot is reused, those that finish together in one
//!   commit) [at most ceil(N / parallel)].
//! - `stream`: the `cycle_flat` run (N = 3,000) read as a stream of every
//!   mode (`Runner::stream`, five items per node: the step and node events,
//!   the node's update, the state) by a reader that only counts the items,
//!   beside the same run without a stream: µs of streaming per item
//!   [target < 1 µs per item].
//! - `cycle_flat_otel` (run last: it installs the global `tracing` subscriber): the
//!   `cycle_flat` runs with `agentflow::otel`'s layer installed, every run's `invoke_agent`,
//!   step and node spans batched and exported over OTLP/HTTP to a local receiver that
//!   answers and discards, beside the same runs just before with no subscriber: µs per node
//!   [target < 2 µs per node]; the `cycle_flat_otel_export` line counts the spans the receiver
//!   got against the spans the runs made (a full export queue drops spans silently, which
//!   would understate the cost). Every other figure is taken with the `otel` feature compiled
//!   in and no subscriber.
//!
//! Each workload is also done by a hand-written loop making the same
//! `State::apply` calls on the same state without the executor; `ratio` is
//! executor time / hand-written time. Runs use a tokio `current_thread`
//! runtime and a `multi_thread` one (the run spawned onto a worker). No
//! timing is asserted; only the results of the work are.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentflow::prelude::*;
use serde_json::json;

// ---------------------------------------------------------------------------
// Workloads.

#[path = "workloads/cycles.rs"]
mod workload_cycles;
use workload_cycles::{Cyc, Flat, Limit, cycle, cycle_flat, step_of};

fn hand_flat(n: u64) -> Flat {
    let mut s = Flat::default();
    loop {
        let end = s.counter + 1 >= n;
        s.apply(black_box(Flat::update().counter(1)));
        if black_box(end) {
            return s;
        }
    }
}

fn hand_cycle(n: u64) -> Cyc {
    let mut s = Cyc::default();
    for node in ["a", "b", "c"].into_iter().cycle() {
        let end = s.counter + 1 >= n;
        s.apply(black_box(step_of(node)));
        if black_box(end) {
            break;
        }
    }
    s
}

#[path = "workloads/fanout.rs"]
mod workload_fanout;
use workload_fanout::{FAN_NODES, Fan, fanout};

fn hand_fanout() -> Fan {
    let mut s = Fan::default();
    s.apply(black_box(Fan::update().log(vec!["start".to_string()])));
    s.apply(black_box(Fan::update().log(vec!["split".to_string()])));
    for b in ["b0", "b1", "b2", "b3", "b4", "b5", "b6", "b7"] {
        s.apply(black_box(Fan::update().log(vec![b.to_string()])));
    }
    s.apply(black_box(Fan::update().log(vec!["join".to_string()])));
    s
}

#[path = "workloads/map_reduce.rs"]
mod workload_map_reduce;
use workload_map_reduce::{Mapped, map_reduce};

// Only its counting `Store` wrapper is used here.
#[allow(dead_code)]
#[path = "workloads/approved.rs"]
mod workload_approved;

#[path = "../tests/support/otlp.rs"]
#[allow(dead_code, reason = "the benchmark uses the discarding receiver only")]
mod otlp;

// ---------------------------------------------------------------------------
// Measurement.

#[derive(Clone, Copy, PartialEq)]
enum Flavor {
    CurrentThread,
    MultiThread,
}

impl Flavor {
    fn name(self) -> &'static str {
        match self {
            Flavor::CurrentThread => "current_thread",
            Flavor::MultiThread => "multi_thread",
        }
    }

    fn runtime(self) -> tokio::runtime::Runtime {
        match self {
            Flavor::CurrentThread => tokio::runtime::Builder::new_current_thread().enable_all().build(),
            Flavor::MultiThread => tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build(),
        }
        .expect("tokio runtime")
    }
}

struct Config {
    quick: bool,
    samples: usize,
    cycle_sizes: Vec<u64>,
    fan_runs: usize,
}

impl Config {
    fn from_env() -> Self {
        let args: Vec<String> = std::env::args().skip(1).collect();
        let quick = args.iter().any(|a| a == "--quick")
            || std::env::var("AGENTFLOW_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0")
            // Run as a test (`cargo test --benches`): cargo passes no `--bench`.
            || !args.iter().any(|a| a == "--bench");
        if quick {
            Config { quick, samples: 3, cycle_sizes: vec![300, 3000], fan_runs: 30 }
        } else {
            Config { quick, samples: 21, cycle_sizes: vec![300, 3000, 30000], fan_runs: 300 }
        }
    }
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    let mid = xs.len() / 2;
    if xs.len() % 2 == 1 { xs[mid] } else { (xs[mid - 1] + xs[mid]) / 2.0 }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Microsecond figures keep a tenth of a nanosecond.
fn round_us(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

/// The median and the minimum of the samples, in seconds. On a loaded
/// machine the minimum is the steadier figure for long runs.
struct Stat {
    median: f64,
    min: f64,
}

/// `samples` timings of `f()`, after one warm-up call.
fn sample(samples: usize, mut f: impl FnMut() -> Duration) -> Stat {
    f();
    let xs: Vec<f64> = (0..samples).map(|_| f().as_secs_f64()).collect();
    let min = xs.iter().copied().fold(f64::INFINITY, f64::min);
    Stat { median: median(xs), min }
}

/// Runs `work` `reps` times inside one task of `rt` (spawned onto a worker
/// for multi_thread) and returns the wall time.
fn time_on<F, Fut>(rt: &tokio::runtime::Runtime, flavor: Flavor, reps: usize, work: F) -> Duration
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let job = async move {
        let began = Instant::now();
        for _ in 0..reps {
            work().await;
        }
        began.elapsed()
    };
    match flavor {
        Flavor::CurrentThread => rt.block_on(job),
        Flavor::MultiThread => rt.block_on(async { tokio::spawn(job).await }).expect("bench task"),
    }
}

fn time_hand(reps: usize, mut work: impl FnMut()) -> Duration {
    let began = Instant::now();
    for _ in 0..reps {
        work();
    }
    began.elapsed()
}

fn emit(value: serde_json::Value) {
    println!("{value}");
}

fn bench_cycle_flat(cfg: &Config, flavor: Flavor) {
    let rt = flavor.runtime();
    let graph = cycle_flat::graph();
    let mut per_size = Vec::new();
    for &n in &cfg.cycle_sizes {
        let deps = Arc::new(Limit { n });
        let exec = sample(cfg.samples, || {
            let (graph, deps) = (graph.clone(), Arc::clone(&deps));
            time_on(&rt, flavor, 1, move || {
                let (graph, deps) = (graph.clone(), Arc::clone(&deps));
                async move {
                    let run = graph.run(Flat::default(), &deps).await.expect("config");
                    assert!(run.outcome.is_completed(), "{}", run.outcome);
                    assert_eq!(run.state.counter, deps.n);
                    assert_eq!(u64::from(run.steps), deps.n);
                    black_box(run);
                }
            })
        });
        let hand = sample(cfg.samples, || {
            time_hand(1, || {
                let s = hand_flat(black_box(n));
                assert_eq!(s.counter, n);
                black_box(s);
            })
        });
        let us = exec.median * 1e6 / n as f64;
        let us_min = exec.min * 1e6 / n as f64;
        let hand_us = hand.median * 1e6 / n as f64;
        per_size.push((n, us, us_min));
        emit(json!({
            "bench": "cycle_flat",
            "runtime": flavor.name(),
            "nodes": n,
            "steps": n,
            "samples": cfg.samples,
            "us_per_node": round_us(us),
            "us_per_node_min": round_us(us_min),
            "hand_us_per_node": round_us(hand_us),
            "ratio": round3(us / hand_us),
            "quick": cfg.quick,
        }));
    }
    if let (Some(first), Some(last)) = (per_size.first(), per_size.last()) {
        let mut fig = serde_json::Map::new();
        fig.insert("bench".into(), json!("cycle_flat_scaling"));
        fig.insert("runtime".into(), json!(flavor.name()));
        for (n, us, us_min) in &per_size {
            fig.insert(format!("us_per_node_{n}"), json!(round_us(*us)));
            fig.insert(format!("us_per_node_min_{n}"), json!(round_us(*us_min)));
        }
        fig.insert(format!("growth_{}_vs_{}", last.0, first.0), json!(round3(last.1 / first.1)));
        fig.insert(format!("growth_min_{}_vs_{}", last.0, first.0), json!(round3(last.2 / first.2)));
        fig.insert("quick".into(), json!(cfg.quick));
        emit(serde_json::Value::Object(fig));
    }
}

fn bench_cycle(cfg: &Config, flavor: Flavor) {
    let rt = flavor.runtime();
    let graph = cycle::graph();
    let n = 3000;
    let deps = Arc::new(Limit { n });
    let exec = sample(cfg.samples, || {
        let (graph, deps) = (graph.clone(), Arc::clone(&deps));
        time_on(&rt, flavor, 1, move || {
            let (graph, deps) = (graph.clone(), Arc::clone(&deps));
            async move {
                let run = graph.run(Cyc::default(), &deps).await.expect("config");
                assert!(run.outcome.is_completed(), "{}", run.outcome);
                assert_eq!(run.state.log.len() as u64, deps.n);
                assert_eq!(run.state.log[..3], ["a", "b", "c"]);
                black_box(run);
            }
        })
    });
    let hand = sample(cfg.samples, || {
        time_hand(1, || {
            let s = hand_cycle(black_box(n));
            assert_eq!(s.log.len() as u64, n);
            black_box(s);
        })
    });
    let us = exec.median * 1e6 / n as f64;
    let hand_us = hand.median * 1e6 / n as f64;
    emit(json!({
        "bench": "cycle",
        "runtime": flavor.name(),
        "nodes": n,
        "steps": n,
        "samples": cfg.samples,
        "us_per_node": round_us(us),
        "us_per_node_min": round_us(exec.min * 1e6 / n as f64),
        "hand_us_per_node": round_us(hand_us),
        "ratio": round3(us / hand_us),
        "quick": cfg.quick,
    }));
}

fn bench_fanout(cfg: &Config, flavor: Flavor) {
    let rt = flavor.runtime();
    let graph = fanout::graph();
    let runs = cfg.fan_runs;
    let exec = sample(cfg.samples, || {
        let graph = graph.clone();
        time_on(&rt, flavor, runs, move || {
            let graph = graph.clone();
            async move {
                let run = graph.run(Fan::default(), &()).await.expect("config");
                assert!(run.outcome.is_completed(), "{}", run.outcome);
                assert_eq!(run.steps, 4);
                assert_eq!(run.state.log.len(), FAN_NODES);
                assert_eq!(run.state.log[2], "b0");
                black_box(run);
            }
        })
    });
    let hand = sample(cfg.samples, || {
        time_hand(runs, || {
            let s = hand_fanout();
            assert_eq!(s.log.len(), FAN_NODES);
            black_box(s);
        })
    });
    let ms = exec.median * 1e3 / runs as f64;
    let hand_ms = hand.median * 1e3 / runs as f64;
    emit(json!({
        "bench": "fanout",
        "runtime": flavor.name(),
        "branches": 8,
        "nodes_per_run": FAN_NODES,
        "runs": runs,
        "samples": cfg.samples,
        "ms_per_run": (ms * 1e5).round() / 1e5,
        "us_per_run": round3(ms * 1e3),
        "us_per_run_min": round3(exec.min * 1e6 / runs as f64),
        "us_per_node": round_us(ms * 1e3 / FAN_NODES as f64),
        "hand_ms_per_run": (hand_ms * 1e7).round() / 1e7,
        "ratio": round3(ms / hand_ms),
        "quick": cfg.quick,
    }));
}

const MAP_N: usize = 1000;

fn check_mapped(run: &agentflow::Run<Mapped>, n: usize) {
    assert!(run.outcome.is_completed(), "{}", run.outcome);
    assert_eq!(run.steps, 3);
    assert_eq!(run.state.log.len(), n);
    assert_eq!(run.state.log[n - 1], format!("t{}", n - 1));
}

fn bench_map_reduce(cfg: &Config, flavor: Flavor) {
    let rt = flavor.runtime();
    let graph = map_reduce::graph();
    let runs = if cfg.quick { 3 } else { 30 };
    let input = Arc::new(workload_map_reduce::input(MAP_N));
    let exec = sample(cfg.samples, || {
        let (graph, input) = (graph.clone(), Arc::clone(&input));
        time_on(&rt, flavor, runs, move || {
            let (graph, input) = (graph.clone(), Arc::clone(&input));
            async move {
                let run = graph.run((*input).clone(), &()).await.expect("config");
                check_mapped(&run, MAP_N);
                black_box(run);
            }
        })
    });
    let hand = sample(cfg.samples, || {
        let input = Arc::clone(&input);
        time_on(&rt, flavor, runs, move || {
            let input = Arc::clone(&input);
            async move {
                let s = workload_map_reduce::hand(&input).await;
                assert_eq!(s.log.len(), MAP_N);
                black_box(s);
            }
        })
    });
    let per = (runs * MAP_N) as f64;
    let us = exec.median * 1e6 / per;
    let hand_us = hand.median * 1e6 / per;
    emit(json!({
        "bench": "map_reduce",
        "runtime": flavor.name(),
        "instances": MAP_N,
        "parallel": agentflow::DEFAULT_PARALLEL,
        "runs": runs,
        "samples": cfg.samples,
        "us_per_instance": round_us(us),
        "us_per_instance_min": round_us(exec.min * 1e6 / per),
        "hand_join_all_us_per_instance": round_us(hand_us),
        "ratio": round3(us / hand_us),
        "target": "< 2 us per instance",
        "met": us < 2.0,
        "quick": cfg.quick,
    }));
}

/// `Durability::Sync` on a redb file: ms per run, and the durable commits of
/// one run for a few payload counts (they must not grow with N).
fn bench_map_reduce_durable(cfg: &Config) {
    use agentflow::{Durability, RedbStore, Store};
    use workload_approved::{CountingStore, Counts};

    let rt = Flavor::MultiThread.runtime();
    let path = std::env::temp_dir().join(format!("agentflow-bench-map-{}.redb", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let store = Arc::new(RedbStore::open(&path).expect("open the store file"));
    let app = map_reduce::graph().app().store(Arc::clone(&store) as Arc<dyn Store>);
    let input = workload_map_reduce::input(MAP_N);
    let mut next = 0u64;
    let mut one = || {
        next += 1;
        let (app, input, id) = (app.clone(), input.clone(), format!("map-{next}"));
        rt.block_on(async move {
            tokio::spawn(async move {
                let began = Instant::now();
                let run = app.runner(&()).thread(id).durability(Durability::Sync).run(input).await.expect("run");
                let took = began.elapsed();
                check_mapped(&run, MAP_N);
                took
            })
            .await
            .expect("bench task")
        })
    };
    let runs = if cfg.quick { 3 } else { 10 };
    let ms = sample(cfg.samples, || (0..runs).map(|_| one()).sum::<Duration>() / runs as u32);
    drop(app);
    if let Ok(store) = Arc::try_unwrap(store) {
        let _ = store.close();
    }
    let _ = std::fs::remove_file(&path);
    // Each durable write transaction of one run, and the step commits among them.
    let commits = |n: usize| {
        let counts = Arc::new(Counts::default());
        let store = CountingStore { inner: RedbStore::in_memory().expect("store"), counts: Arc::clone(&counts) };
        let app = map_reduce::graph().app().store(Arc::new(store) as Arc<dyn Store>);
        let run = rt.block_on(async move {
            app.runner(&()).thread("count").durability(Durability::Sync).run(workload_map_reduce::input(n)).await
        });
        check_mapped(&run.expect("run"), n);
        (counts.total(), counts.step_commits.load(std::sync::atomic::Ordering::SeqCst))
    };
    let ((small, _), (large, steps)) = (commits(10), commits(MAP_N));
    // Each finished instance's write is committed before its slot is reused, those that finish
    // together in one commit: at most one commit per `parallel` (8) instances.
    let bound = MAP_N.div_ceil(8) as u64;
    emit(json!({
        "bench": "map_reduce",
        "store": "redb_file",
        "durability": "sync",
        "runtime": "multi_thread",
        "instances": MAP_N,
        "runs": runs,
        "samples": cfg.samples,
        "ms_per_run": round3(ms.median * 1e3),
        "ms_per_run_min": round3(ms.min * 1e3),
        "target": "< 10 ms per run",
        "met": ms.median * 1e3 < 10.0,
        "us_per_instance": round3(ms.median * 1e6 / MAP_N as f64),
        "durable_commits_per_run_n10": small,
        "durable_commits_per_run_n1000": large,
        "step_commits_per_run_n1000": steps,
        "instance_commits_per_run_n1000": large - steps,
        "instance_commit_bound_n1000": bound,
        "instance_commits_within_bound": large - steps <= bound,
        "quick": cfg.quick,
    }));
}

/// The `cycle_flat` run read as a stream of every mode, beside the same run
/// without one: what streaming costs per item.
fn bench_stream(cfg: &Config, flavor: Flavor) {
    use agentflow::{StreamMode, StreamPart};

    let rt = flavor.runtime();
    let graph = cycle_flat::graph();
    let n = 3000;
    let deps = Arc::new(Limit { n });
    let items = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let plain = sample(cfg.samples, || {
        let (graph, deps) = (graph.clone(), Arc::clone(&deps));
        time_on(&rt, flavor, 1, move || {
            let (graph, deps) = (graph.clone(), Arc::clone(&deps));
            async move {
                let run = graph.run(Flat::default(), &deps).await.expect("config");
                assert_eq!(run.state.counter, deps.n);
                black_box(run);
            }
        })
    });
    let streamed = sample(cfg.samples, || {
        let (graph, deps, items) = (graph.clone(), Arc::clone(&deps), Arc::clone(&items));
        time_on(&rt, flavor, 1, move || {
            let (app, deps, items) = (graph.app(), Arc::clone(&deps), Arc::clone(&items));
            async move {
                let mut stream = app.runner(&deps).stream_modes(StreamMode::ALL).stream(Flat::default());
                let mut count = 0;
                while let Some(item) = stream.next().await {
                    count += 1;
                    if let StreamPart::Done(run) = item.part {
                        assert_eq!(run.expect("config").state.counter, deps.n);
                    } else {
                        black_box(item);
                    }
                }
                items.store(count, std::sync::atomic::Ordering::Relaxed);
            }
        })
    });
    let per_run = items.load(std::sync::atomic::Ordering::Relaxed);
    // Five per node, plus the end event and `Done`.
    assert_eq!(per_run as u64, 5 * n + 2);
    let us = (streamed.median - plain.median) * 1e6 / per_run as f64;
    emit(json!({
        "bench": "stream",
        "runtime": flavor.name(),
        "nodes": n,
        "modes": "all",
        "items_per_run": per_run,
        "samples": cfg.samples,
        "us_per_item": round_us(us),
        "us_per_item_min": round_us((streamed.min - plain.min) * 1e6 / per_run as f64),
        "run_without_stream_us_per_node": round_us(plain.median * 1e6 / n as f64),
        "target": "< 1 us per item",
        "met": us < 1.0,
        "quick": cfg.quick,
    }));
}

/// `n` nodes of `cycle_flat` on `flavor`: seconds per sample.
fn time_cycle_flat(cfg: &Config, flavor: Flavor, n: u64) -> Stat {
    let (rt, graph, deps) = (flavor.runtime(), cycle_flat::graph(), Arc::new(Limit { n }));
    sample(cfg.samples, || {
        let (graph, deps) = (graph.clone(), Arc::clone(&deps));
        time_on(&rt, flavor, 1, move || {
            let (graph, deps) = (graph.clone(), Arc::clone(&deps));
            async move {
                let run = graph.run(Flat::default(), &deps).await.expect("config");
                assert_eq!(run.state.counter, deps.n);
                black_box(run);
            }
        })
    })
}

/// The receiver's socket, bound before any thread starts, and the exporter's variables set to
/// it: `agentflow::otel::Otel` takes its endpoint and batching from the environment only.
///
/// # Safety
///
/// No other thread of this process may run (none may read or write the environment): call it
/// first in `main`, before any runtime, receiver or other thread is started.
unsafe fn prepare_otel_export(cfg: &Config) -> std::net::TcpListener {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    let endpoint = format!("http://{}", listener.local_addr().expect("an address"));
    // A run's spans (two per node) fit the queue: none is dropped before it is exported (the
    // bench prints the spans received beside the spans made, so a drop would show).
    let queue = (cfg.cycle_sizes.iter().max().copied().unwrap_or(0) * 4).max(2048);
    // SAFETY: the caller guarantees that this thread is the only one.
    unsafe {
        std::env::set_var("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint);
        std::env::set_var("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf");
        std::env::set_var("OTEL_BSP_MAX_QUEUE_SIZE", queue.to_string());
        std::env::set_var("OTEL_BSP_SCHEDULE_DELAY", "100");
        std::env::remove_var("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT");
    }
    listener
}

/// `cycle_flat` with the OpenTelemetry layer installed and its spans exported (OTLP/HTTP,
/// batched) to a receiver in this process (on `listener`, see [`prepare_otel_export`]) that
/// counts and discards them, beside the same runs with no subscriber. Installs the global
/// subscriber: call it last.
fn bench_cycle_flat_otel(cfg: &Config, listener: std::net::TcpListener) {
    let flavors = [Flavor::CurrentThread, Flavor::MultiThread];
    let mut plain = Vec::new();
    for flavor in flavors {
        for &n in &cfg.cycle_sizes {
            plain.push(time_cycle_flat(cfg, flavor, n));
        }
    }
    let receiver = otlp::OtlpReceiver::discarding_on(listener);
    let guard = agentflow::otel::Otel::from_env().service_name("engine-bench").init().expect("install the OTel layer");
    let mut timed = Vec::new();
    for flavor in flavors {
        for &n in &cfg.cycle_sizes {
            timed.push((flavor, n, time_cycle_flat(cfg, flavor, n)));
        }
    }
    guard.shutdown().expect("the exporter flushes and shuts down");
    // Each run (`sample`: one warm-up, then `samples`) makes an `invoke_agent` span and, per
    // node, a `step` and a `node` span.
    let runs = (cfg.samples + 1) as u64 * flavors.len() as u64;
    let made: u64 = cfg.cycle_sizes.iter().map(|n| runs * (2 * n + 1)).sum();
    for ((flavor, n, otel), plain) in timed.into_iter().zip(plain) {
        let (us, us_min) = (otel.median * 1e6 / n as f64, otel.min * 1e6 / n as f64);
        let plain_us = plain.median * 1e6 / n as f64;
        emit(json!({
            "bench": "cycle_flat_otel",
            "runtime": flavor.name(),
            "nodes": n,
            "samples": cfg.samples,
            "us_per_node": round_us(us),
            "us_per_node_min": round_us(us_min),
            "no_subscriber_us_per_node": round_us(plain_us),
            "otel_us_per_node": round_us(us - plain_us),
            "quick": cfg.quick,
        }));
    }
    emit(json!({
        "bench": "cycle_flat_otel_export",
        "export_requests": receiver.requests(),
        "export_bytes": receiver.bytes(),
        "refused": receiver.refused(),
        "spans_expected": made,
        "spans_received": receiver.span_count(),
        "spans_dropped": made.saturating_sub(receiver.span_count()),
        "quick": cfg.quick,
    }));
}

fn main() {
    let cfg = Config::from_env();
    let began = Instant::now();
    let only_map = std::env::args().any(|a| a == "map_reduce");
    let only_stream = std::env::args().any(|a| a == "stream");
    let only_cycle_flat = std::env::args().any(|a| a == "cycle_flat");
    let only_otel = std::env::args().any(|a| a == "cycle_flat_otel");
    let mut otel = (only_otel || !(only_map || only_stream || only_cycle_flat)).then(|| {
        // SAFETY: nothing has started a thread yet (`harness = false`: `main` is this process's
        // only thread until the first runtime below).
        unsafe { prepare_otel_export(&cfg) }
    });
    if only_otel && let Some(listener) = otel.take() {
        bench_cycle_flat_otel(&cfg, listener);
        eprintln!("engine bench (cycle_flat_otel only) done in {:.1} s", began.elapsed().as_secs_f64());
        return;
    }
    if only_cycle_flat {
        for flavor in [Flavor::CurrentThread, Flavor::MultiThread] {
            bench_cycle_flat(&cfg, flavor);
        }
        eprintln!("engine bench (cycle_flat only) done in {:.1} s", began.elapsed().as_secs_f64());
        return;
    }
    for flavor in [Flavor::CurrentThread, Flavor::MultiThread] {
        if only_stream {
            bench_stream(&cfg, flavor);
            continue;
        }
        if !only_map {
            bench_cycle_flat(&cfg, flavor);
            bench_cycle(&cfg, flavor);
            bench_fanout(&cfg, flavor);
            bench_stream(&cfg, flavor);
        }
        bench_map_reduce(&cfg, flavor);
    }
    if only_stream {
        eprintln!("engine bench (stream only) done in {:.1} s", began.elapsed().as_secs_f64());
        return;
    }
    bench_map_reduce_durable(&cfg);
    if let Some(listener) = otel {
        bench_cycle_flat_otel(&cfg, listener);
    }
    eprintln!(
        "engine bench ({}) done in {:.1} s",
        if cfg.quick { "quick" } else { "full" },
        began.elapsed().as_secs_f64()
    );
}
