//! What every group uses: the figures' sizes (quick or full) and the groups the command line
//! selects, medians and paired samples, the process's CPU time, store files under the temp
//! dir, and one run spawned onto the runtime.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use agentflow::prelude::*;
use agentflow::{Durability, RedbStore, Store};

use crate::workload_cycles::{Cyc, Flat};

pub struct Config {
    pub quick: bool,
    /// Samples per figure (median reported), after one warm-up.
    pub samples: usize,
    /// Pairs (a `Sync` run, raw redb commits) behind each `vs_redb_raw` ratio.
    pub ratio_pairs: usize,
    /// Steps per run in `Sync` mode and in `Async`/`Exit` mode.
    pub sync_steps: u64,
    pub eventual_steps: u64,
    /// Fan-out runs per sample.
    pub fan_runs: usize,
    /// Steps of each of the 16 concurrent runs.
    pub concurrent_steps: u64,
    /// Raw redb commits and disk writes per sample.
    pub raw_ops: usize,
    /// Steps of the thread the reads run against, and how many reads.
    pub read_steps: u64,
    pub state_reads: usize,
    pub history_reads: usize,
    pub size_steps: Vec<u64>,
    /// Positional arguments: run only the groups whose name contains one.
    pub filters: Vec<String>,
}

impl Config {
    pub fn from_env() -> Self {
        let args: Vec<String> = std::env::args().skip(1).collect();
        let quick = args.iter().any(|a| a == "--quick")
            || std::env::var("AGENTFLOW_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0")
            // Run as a test (`cargo test --benches`): cargo passes no `--bench`.
            || !args.iter().any(|a| a == "--bench");
        let filters: Vec<String> = args.iter().filter(|a| !a.starts_with('-')).cloned().collect();
        let pairs = |default: usize| {
            std::env::var("AGENTFLOW_BENCH_PAIRS")
                .ok()
                .and_then(|v| v.parse().ok())
                .filter(|&n| n > 0)
                .unwrap_or(default)
        };
        if quick {
            Config {
                quick,
                samples: 1,
                ratio_pairs: pairs(5),
                sync_steps: 300,
                eventual_steps: 600,
                fan_runs: 20,
                concurrent_steps: 60,
                raw_ops: 150,
                read_steps: 3000,
                state_reads: 100,
                history_reads: 5,
                size_steps: vec![500, 1000, 2000],
                filters,
            }
        } else {
            Config {
                quick,
                samples: 5,
                ratio_pairs: pairs(11),
                sync_steps: 600,
                eventual_steps: 3000,
                fan_runs: 100,
                concurrent_steps: 300,
                raw_ops: 600,
                read_steps: 3000,
                state_reads: 1000,
                history_reads: 50,
                size_steps: vec![500, 1000, 2000],
                filters,
            }
        }
    }

    pub fn selected(&self, group: &str) -> bool {
        self.filters.is_empty() || self.filters.iter().any(|f| group.contains(f.as_str()))
    }
}

pub fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    let mid = xs.len() / 2;
    if xs.len() % 2 == 1 { xs[mid] } else { (xs[mid - 1] + xs[mid]) / 2.0 }
}

pub fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

pub fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

pub fn emit(value: serde_json::Value) {
    println!("{value}");
}

/// Median over `samples` of `f()` (seconds), after one warm-up call.
pub fn sample(samples: usize, mut f: impl FnMut() -> Duration) -> f64 {
    f();
    median((0..samples).map(|_| f().as_secs_f64()).collect())
}

/// `samples` pairs `(a(), b())` taken back to back after one warm-up pair,
/// so a ratio of the two holds even when the disk's speed drifts; returns
/// the medians of `a`, of `b` and of `a / b`. Every other pair runs `b` first,
/// so neither side always follows the other (and whatever the other leaves
/// behind: a cold cache, a disk still writing back).
pub fn sample_pairs(samples: usize, mut a: impl FnMut() -> f64, mut b: impl FnMut() -> f64) -> (f64, f64, f64) {
    let (_, _) = (a(), b());
    let pairs: Vec<(f64, f64)> = (0..samples)
        .map(|i| {
            if i % 2 == 0 {
                (a(), b())
            } else {
                let second = b();
                (a(), second)
            }
        })
        .collect();
    (
        median(pairs.iter().map(|p| p.0).collect()),
        median(pairs.iter().map(|p| p.1).collect()),
        median(pairs.iter().map(|p| p.0 / p.1).collect()),
    )
}

/// CPU time used so far by every live thread of this process (Linux: the sum of
/// `/proc/self/task/*/schedstat`); `None` where that is not available.
fn process_cpu() -> Option<Duration> {
    let mut total = 0u64;
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let Ok(stat) = std::fs::read_to_string(task.ok()?.path().join("schedstat")) else { continue };
        total += stat.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(Duration::from_nanos(total))
}

/// Runs `f` and adds the process CPU time it took to `into` (nothing when unknown).
pub fn with_cpu<T>(into: &mut Vec<Duration>, f: impl FnOnce() -> T) -> T {
    let before = process_cpu();
    let out = f();
    if let (Some(before), Some(after)) = (before, process_cpu()) {
        into.push(after.saturating_sub(before));
    }
    out
}

/// Median of `reps` timed calls of `f` (seconds), after one warm-up call.
pub fn latency(reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    median(
        (0..reps)
            .map(|_| {
                let began = Instant::now();
                f();
                began.elapsed().as_secs_f64()
            })
            .collect(),
    )
}

/// A file under the system temp dir, removed when dropped.
pub struct TempPath(pub PathBuf);

impl TempPath {
    pub fn new(tag: &str) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        TempPath(std::env::temp_dir().join(format!("agentflow-bench-{tag}-{}-{n}.redb", std::process::id())))
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A store file of its own, and a graph attached to it.
pub struct Stored<S: State, D> {
    file: TempPath,
    pub store: Arc<RedbStore>,
    pub graph: App<S, D>,
}

impl<S: State, D> Stored<S, D> {
    pub fn new(tag: &str, graph: CompiledGraph<S, D>) -> Self {
        let file = TempPath::new(tag);
        let store = Arc::new(RedbStore::open(&file.0).expect("open the store file"));
        let graph = graph.app().store(Arc::clone(&store) as Arc<dyn Store>);
        Stored { file, store, graph }
    }

    /// Closes the store and returns the file's size; the file is then removed.
    pub fn close(self) -> u64 {
        let Stored { file, store, graph } = self;
        drop(graph);
        let store = Arc::try_unwrap(store).expect("no run holds the store any more");
        store.close().expect("close the store");
        std::fs::metadata(&file.0).expect("the store file").len()
    }
}

pub fn thread_id(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("{prefix}-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("tokio runtime")
}

pub fn mode_name(mode: Option<Durability>) -> &'static str {
    match mode {
        None => "none",
        Some(Durability::Sync) => "sync",
        Some(Durability::Async) => "async",
        Some(Durability::Exit) => "exit",
        Some(_) => "other",
    }
}

/// One run of `graph` from `input`, as thread `thread` in `mode` (without a
/// thread when `mode` is `None`), spawned onto `rt`; returns the run and its
/// wall time.
pub fn run_on<S: State, D: Send + Sync + 'static>(
    rt: &tokio::runtime::Runtime,
    graph: &App<S, D>,
    deps: &Arc<D>,
    input: S,
    mode: Option<Durability>,
    thread: String,
) -> (agentflow::Run<S>, Duration) {
    let (graph, deps) = (graph.clone(), Arc::clone(deps));
    rt.block_on(async move {
        tokio::spawn(async move {
            let began = Instant::now();
            let runner = graph.runner(&*deps);
            let run = match mode {
                Some(mode) => runner.thread(thread).durability(mode).run(input).await,
                None => runner.run(input).await,
            }
            .expect("run");
            assert!(run.outcome.is_completed(), "{}", run.outcome);
            (run, began.elapsed())
        })
        .await
        .expect("bench task")
    })
}

pub const MODES: [Durability; 3] = [Durability::Sync, Durability::Async, Durability::Exit];

pub fn check_flat(s: &Flat, n: u64) {
    assert_eq!(s.counter, n);
}

pub fn check_cycle(s: &Cyc, n: u64) {
    assert_eq!(s.log.len() as u64, n);
    assert_eq!(s.log[..3], ["a", "b", "c"]);
}
