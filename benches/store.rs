//! Persistence benchmarks: the executor with a `RedbStore` file. One JSON line
//! per figure on stdout; no timing is asserted, only the results of the work.
//!
//! ```text
//! cargo bench --bench store              # full
//! cargo bench --bench store -- --quick   # CI smoke check, < 20 s
//! AGENTFLOW_BENCH_QUICK=1 cargo bench --bench store
//! AGENTFLOW_BENCH_PAIRS=41 cargo bench --bench store -- cycle sync_breakdown
//! ```
//!
//! The workloads of `benches/engine.rs` (`cycle_flat`, `cycle`, `fanout`) run
//! as threads (`.thread(id)`) on a store file under the system temp dir, in
//! each durability mode. To make ratios meaningful on a noisy or unknown
//! machine, the same run also measures the floor under a `Sync` step:
//! - `disk`: 4 KiB write + `fdatasync` (`File::sync_data`) on a preallocated
//!   file, and the same appending to the file;
//! - `redb_raw`: one ~200-byte insert per redb write transaction with
//!   `redb::Durability::Immediate` (redb's defaults otherwise: one fsync per
//!   commit).
//!
//! Figures, with the targets of the persistence issue (printed as `target`
//! and `met`, never asserted):
//! - `Sync` steps/s of `cycle_flat` and `cycle` vs raw redb commits/s [>= 0.95x],
//!   the median of 11 pairs (5 with `--quick`), every other pair raw side first;
//!   beside it, the process CPU time per step and per raw commit and their
//!   ratio (`cpu_vs_redb_raw`, Linux only), which a shared machine's load
//!   moves much less than the wall-clock one. With `TMPDIR` on a tmpfs
//!   (`TMPDIR=/dev/shm`) an fsync costs nothing and the ratio shows the CPU
//!   cost of a step alone;
//! - `fanout` (8 branches) in `Sync` mode, ms per run [< 2 ms];
//! - 16 concurrent runs on distinct threads in `Sync` mode: aggregate steps/s
//!   vs one run alone [>= 3x] (group commit);
//! - after a 3000-step thread: `graph.state` [< 0.1 ms] on `cycle_flat` and
//!   on `cycle` (whose 3000-entry log is also copied once in memory, the
//!   floor for any read that returns it owned), and `graph.history` of the
//!   `cycle` thread [< 20 ms];
//! - store size of a `cycle` thread after 500, 1000, 2000 steps [linear,
//!   < 1.5 MB at 2000]: file size after `close()` and the sum of `payload_bytes`.
//!
//! - durable commits per approved tool call (`approved_call`): counted by a
//!   `Store` wrapper from just after the approver's decision to the end of
//!   the resumed run, step commits apart from the gateway's own writes.
//!
//! - where a `Sync` step's time goes (`sync_breakdown`), wall-clock and CPU
//!   per operation, each measured back to back in every round: the raw redb
//!   commit above; the same with the checkpoint table's key type, a
//!   300-byte row and a thread number of its own each round, as each
//!   executor run has (`raw_checkpoint_shape`: what the data's shape costs
//!   redb);
//!   `Store::commit_step` called directly with a step's checkpoint, a
//!   thread of its own each round taken under a lease and let go
//!   (`store_commit`: the store's own work on top); the same from a task
//!   spawned on the runtime, through `block_in_place` as the executor calls it
//!   (`store_commit_in_task`: what running there costs); and the executor's
//!   `Sync` step of `cycle_flat` (`executor_step`: the executor's work on top).
//!   As many rounds as a `vs_redb_raw` figure has pairs; beside each layer's
//!   medians, `<layer>_vs_redb_raw` is the median over the rounds of that
//!   layer's operations/s over raw commits/s, so the same target reads layer
//!   by layer, and `<layer>_vs_redb_raw_by_third` the same median in the
//!   first, middle and last third of the rounds (every file grows with each
//!   round: a ratio that moves with their size shows there).
//!   `AGENTFLOW_BENCH_LAYERS=executor_step` (a comma-separated
//!   list of layer names) runs only those layers, to profile one alone;
//!   `AGENTFLOW_BENCH_LAYERS=` (set, empty) runs none, for the baseline a
//!   profile subtracts. A ratio is printed only for a layer that ran beside
//!   `redb_raw`.
//!
//! `AGENTFLOW_BENCH_PAIRS=N` sets the pairs (and breakdown rounds) to `N`:
//! one run's median moves less with more of them.
//!
//! Every run uses a tokio `multi_thread` runtime with 2 workers, the run
//! spawned onto a worker. A `Sync` step is committed on the run's own thread
//! (`block_in_place`) when the store is idle, and otherwise by the store's
//! writer thread, shared with the commits queued beside it.

use std::fs::File;
use std::hint::black_box;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use agentflow::prelude::*;
use agentflow::{Durability, RedbStore, Store};
use serde_json::json;

// ---------------------------------------------------------------------------
// Workloads (as in benches/engine.rs).

#[path = "workloads/cycles.rs"]
mod workload_cycles;
use workload_cycles::{Cyc, Flat, Limit, cycle, cycle_flat};

#[path = "workloads/approved.rs"]
mod workload_approved;

#[path = "workloads/fanout.rs"]
mod workload_fanout;
use workload_fanout::{FAN_NODES, Fan, fanout};

const FAN_STEPS: u32 = 4;
const CONCURRENT: usize = 16;

// ---------------------------------------------------------------------------
// Configuration and helpers.

struct Config {
    quick: bool,
    /// Samples per figure (median reported), after one warm-up.
    samples: usize,
    /// Pairs (a `Sync` run, raw redb commits) behind each `vs_redb_raw` ratio.
    ratio_pairs: usize,
    /// Steps per run in `Sync` mode and in `Async`/`Exit` mode.
    sync_steps: u64,
    eventual_steps: u64,
    /// Fan-out runs per sample.
    fan_runs: usize,
    /// Steps of each of the 16 concurrent runs.
    concurrent_steps: u64,
    /// Raw redb commits and disk writes per sample.
    raw_ops: usize,
    /// Steps of the thread the reads run against, and how many reads.
    read_steps: u64,
    state_reads: usize,
    history_reads: usize,
    size_steps: Vec<u64>,
    /// Positional arguments: run only the groups whose name contains one.
    filters: Vec<String>,
}

impl Config {
    fn from_env() -> Self {
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

    fn selected(&self, group: &str) -> bool {
        self.filters.is_empty() || self.filters.iter().any(|f| group.contains(f.as_str()))
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

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

fn emit(value: serde_json::Value) {
    println!("{value}");
}

/// Median over `samples` of `f()` (seconds), after one warm-up call.
fn sample(samples: usize, mut f: impl FnMut() -> Duration) -> f64 {
    f();
    median((0..samples).map(|_| f().as_secs_f64()).collect())
}

/// `samples` pairs `(a(), b())` taken back to back after one warm-up pair,
/// so a ratio of the two holds even when the disk's speed drifts; returns
/// the medians of `a`, of `b` and of `a / b`. Every other pair runs `b` first,
/// so neither side always follows the other (and whatever the other leaves
/// behind: a cold cache, a disk still writing back).
fn sample_pairs(samples: usize, mut a: impl FnMut() -> f64, mut b: impl FnMut() -> f64) -> (f64, f64, f64) {
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
fn with_cpu<T>(into: &mut Vec<Duration>, f: impl FnOnce() -> T) -> T {
    let before = process_cpu();
    let out = f();
    if let (Some(before), Some(after)) = (before, process_cpu()) {
        into.push(after.saturating_sub(before));
    }
    out
}

/// Median of `reps` timed calls of `f` (seconds), after one warm-up call.
fn latency(reps: usize, mut f: impl FnMut()) -> f64 {
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
struct TempPath(PathBuf);

impl TempPath {
    fn new(tag: &str) -> Self {
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
struct Stored<S: State, D> {
    file: TempPath,
    store: Arc<RedbStore>,
    graph: App<S, D>,
}

impl<S: State, D> Stored<S, D> {
    fn new(tag: &str, graph: CompiledGraph<S, D>) -> Self {
        let file = TempPath::new(tag);
        let store = Arc::new(RedbStore::open(&file.0).expect("open the store file"));
        let graph = graph.app().store(Arc::clone(&store) as Arc<dyn Store>);
        Stored { file, store, graph }
    }

    /// Closes the store and returns the file's size; the file is then removed.
    fn close(self) -> u64 {
        let Stored { file, store, graph } = self;
        drop(graph);
        let store = Arc::try_unwrap(store).expect("no run holds the store any more");
        store.close().expect("close the store");
        std::fs::metadata(&file.0).expect("the store file").len()
    }
}

fn thread_id(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("{prefix}-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("tokio runtime")
}

fn mode_name(mode: Option<Durability>) -> &'static str {
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
fn run_on<S: State, D: Send + Sync + 'static>(
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

// ---------------------------------------------------------------------------
// The floor: the disk and raw redb.

/// 4 KiB writes + fdatasync per second: overwriting a preallocated file, and appending.
fn bench_disk(cfg: &Config) {
    let file = TempPath::new("disk");
    let block = [0xA5u8; 4096];
    let region = 256u64;
    let overwrite = sample(cfg.samples, || {
        let mut f = File::create(&file.0).expect("disk probe file");
        for _ in 0..region {
            f.write_all(&block).unwrap();
        }
        f.sync_all().unwrap();
        let began = Instant::now();
        for i in 0..cfg.raw_ops as u64 {
            f.write_all_at(&block, (i % region) * 4096).unwrap();
            f.sync_data().unwrap();
        }
        began.elapsed()
    });
    let append = sample(cfg.samples, || {
        let mut f = File::create(&file.0).expect("disk probe file");
        f.sync_all().unwrap();
        let began = Instant::now();
        for _ in 0..cfg.raw_ops {
            f.write_all(&block).unwrap();
            f.sync_data().unwrap();
        }
        began.elapsed()
    });
    emit(json!({
        "bench": "disk",
        "op": "4KiB write + fdatasync",
        "dir": std::env::temp_dir(),
        "writes": cfg.raw_ops,
        "samples": cfg.samples,
        "writes_per_s": round1(cfg.raw_ops as f64 / overwrite),
        "us_per_write": round1(overwrite * 1e6 / cfg.raw_ops as f64),
        "append_writes_per_s": round1(cfg.raw_ops as f64 / append),
        "append_us_per_write": round1(append * 1e6 / cfg.raw_ops as f64),
        "quick": cfg.quick,
    }));
}

/// A plain redb file: one ~200-byte insert per write transaction, `Durability::Immediate`.
struct RawRedb {
    db: redb::Database,
    key: u64,
    _file: TempPath,
}

impl RawRedb {
    const TABLE: redb::TableDefinition<'static, u64, &'static [u8]> = redb::TableDefinition::new("raw");

    fn new() -> Self {
        let file = TempPath::new("redb-raw");
        let db = redb::Database::create(&file.0).expect("raw redb file");
        RawRedb { db, key: 0, _file: file }
    }

    /// Commits/s over `n` commits.
    fn rate(&mut self, n: usize) -> f64 {
        let value = [0x5Au8; 200];
        let began = Instant::now();
        for _ in 0..n {
            let mut txn = self.db.begin_write().unwrap();
            txn.set_durability(redb::Durability::Immediate).unwrap();
            {
                let mut table = txn.open_table(Self::TABLE).unwrap();
                table.insert(self.key, value.as_slice()).unwrap();
            }
            txn.commit().unwrap();
            self.key += 1;
        }
        n as f64 / began.elapsed().as_secs_f64()
    }
}

fn bench_redb_raw(cfg: &Config, raw: &mut RawRedb) {
    let rate = 1.0 / sample(cfg.samples, || Duration::from_secs_f64(1.0 / raw.rate(cfg.raw_ops)));
    emit(json!({
        "bench": "redb_raw",
        "op": "200 B insert + commit (Durability::Immediate)",
        "commits": cfg.raw_ops,
        "samples": cfg.samples,
        "commits_per_s": round1(rate),
        "us_per_commit": round1(1e6 / rate),
        "quick": cfg.quick,
    }));
}

// ---------------------------------------------------------------------------
// Executor with the store.

const MODES: [Durability; 3] = [Durability::Sync, Durability::Async, Durability::Exit];

/// Steps/s of one cycle workload in every durability mode. In `Sync` mode
/// each sample is paired with raw redb commits taken right before it.
fn bench_cycles<S: State + Default>(
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

/// Raw redb commits shaped like a step's checkpoint row: a `(thread number, seq)` key and 300
/// bytes, each round under a thread number of its own, as each executor run is a thread of its
/// own.
struct ShapedRedb {
    db: redb::Database,
    rounds: u64,
    _file: TempPath,
}

impl ShapedRedb {
    const TABLE: redb::TableDefinition<'static, (u64, u64), &'static [u8]> = redb::TableDefinition::new("checkpoints");

    fn new() -> Self {
        let file = TempPath::new("redb-shaped");
        let db = redb::Database::create(&file.0).expect("shaped redb file");
        ShapedRedb { db, rounds: 0, _file: file }
    }

    fn run(&mut self, n: usize) {
        let value = [0x5Au8; 300];
        let thread = self.rounds;
        self.rounds += 1;
        for seq in 0..n as u64 {
            let mut txn = self.db.begin_write().unwrap();
            txn.set_durability(redb::Durability::Immediate).unwrap();
            {
                let mut table = txn.open_table(Self::TABLE).unwrap();
                table.insert((thread, seq), value.as_slice()).unwrap();
            }
            txn.commit().unwrap();
        }
    }
}

/// `Store::commit_step` called directly, with the checkpoint a `cycle_flat` step commits.
/// Each round commits a thread of its own (under its lease), as each executor run does.
struct DirectCommits {
    store: RedbStore,
    tag: &'static str,
    rounds: u64,
    _file: TempPath,
}

impl DirectCommits {
    const HOLDER: &'static str = "bench-holder";

    fn new(tag: &'static str) -> Self {
        let file = TempPath::new(tag);
        let store = RedbStore::open(&file.0).expect("open the store file");
        DirectCommits { store, tag, rounds: 0, _file: file }
    }

    fn run(&mut self, n: usize) {
        use agentflow_store::{Checkpoint, CheckpointMetadata, CheckpointSource, StepCommit, ThreadRecord};
        let thread = format!("{}-{}", self.tag, self.rounds);
        self.rounds += 1;
        self.store.acquire_lease(&thread, Self::HOLDER, 3_600_000, 1).expect("lease");
        // What the executor stores with every step of `cycle_flat`: the thread's budget, with no
        // limits set and nothing used (stored compact).
        let extra = json!({ "__budget__": {} });
        for seq in 1..=n as u64 {
            let record = ThreadRecord::new(&thread, "", "0123456789abcdef", 1, 1);
            let mut commit = StepCommit::new(record)
                .fenced_by(Self::HOLDER, 2)
                .with_durability(agentflow_store::Durability::Immediate);
            commit.checkpoint = Some(Checkpoint {
                thread: thread.clone(),
                seq,
                parent: (seq > 1).then(|| seq - 1),
                cursor: vec!["b".to_string()],
                snapshot: (seq == 1).then(|| br#"{"counter":0}"#.to_vec()),
                delta: vec![br#"{"update":{"counter":1},"next":["b"]}"#.to_vec()],
                metadata: CheckpointMetadata {
                    extra: extra.clone(),
                    ..CheckpointMetadata::new(seq, CheckpointSource::Loop, vec!["a".to_string()])
                },
                created_at: 3,
            });
            self.store.commit_step(commit).expect("commit");
        }
        self.store.release_lease(&thread, Self::HOLDER).expect("release the lease");
    }
}

/// Wall-clock and CPU microseconds per operation of each layer under a `Sync` step, the five
/// measured back to back in every round (medians over the rounds after the first), and each
/// layer's rate against the raw commit's.
fn bench_sync_breakdown(cfg: &Config, rt: &tokio::runtime::Runtime, raw: &mut RawRedb) {
    let n = cfg.sync_steps as usize;
    let graph = cycle_flat::graph();
    let stored = Stored::new("breakdown", graph);
    let deps = Arc::new(Limit { n: n as u64 });
    let (mut shaped, mut direct) = (ShapedRedb::new(), DirectCommits::new("direct"));
    const LAYERS: [&str; 5] =
        ["redb_raw", "raw_checkpoint_shape", "store_commit", "store_commit_in_task", "executor_step"];
    let mut wall: [Vec<f64>; 5] = Default::default();
    let mut cpu: [Vec<Duration>; 5] = Default::default();
    let mut in_task = Some(DirectCommits::new("in-task"));
    // `AGENTFLOW_BENCH_LAYERS=a,b` runs only those layers (to profile one alone); set but empty,
    // none of them (the setup alone: a profile's baseline to subtract).
    let profiled: Option<Vec<String>> = std::env::var("AGENTFLOW_BENCH_LAYERS")
        .ok()
        .map(|v| v.split(',').map(str::trim).filter(|l| !l.is_empty()).map(str::to_string).collect());
    if let Some(unknown) = profiled.iter().flatten().find(|p| !LAYERS.contains(&p.as_str())) {
        eprintln!("AGENTFLOW_BENCH_LAYERS: no layer `{unknown}` (the layers: {})", LAYERS.join(", "));
        std::process::exit(2);
    }
    // As many rounds as a `vs_redb_raw` figure has pairs: each layer's ratio to the raw commit
    // is the median of its per-round ratios, like those.
    for round in 0..=cfg.ratio_pairs {
        for (layer, name) in LAYERS.iter().enumerate() {
            if profiled.as_ref().is_some_and(|layers| !layers.iter().any(|p| p == name)) {
                continue;
            }
            let mut took = Vec::new();
            let began = Instant::now();
            with_cpu(&mut took, || match *name {
                "redb_raw" => {
                    raw.rate(n);
                }
                "raw_checkpoint_shape" => shaped.run(n),
                "store_commit" => direct.run(n),
                "store_commit_in_task" => {
                    let mut commits = in_task.take().expect("the commits come back from their task");
                    commits = rt.block_on(async move {
                        tokio::spawn(async move {
                            tokio::task::block_in_place(|| commits.run(n));
                            commits
                        })
                        .await
                        .expect("bench task")
                    });
                    in_task = Some(commits);
                }
                _ => {
                    let (run, _) = run_on(
                        rt,
                        &stored.graph,
                        &deps,
                        Flat::default(),
                        Some(Durability::Sync),
                        thread_id("breakdown"),
                    );
                    check_flat(&run.state, n as u64);
                }
            });
            if round > 0 {
                wall[layer].push(began.elapsed().as_secs_f64() * 1e6 / n as f64);
                cpu[layer].extend(took.iter().map(|d| *d / n as u32));
            }
        }
    }
    let mut line = json!({ "bench": "sync_breakdown", "ops": n, "samples": cfg.ratio_pairs, "quick": cfg.quick });
    for (layer, name) in LAYERS.iter().enumerate().skip(1) {
        // This layer's operations per second over raw commits per second, round by round.
        let ratios: Vec<f64> = wall[0].iter().zip(&wall[layer]).map(|(raw, op)| raw / op).collect();
        if !ratios.is_empty() {
            // The same in the first, middle and last third of the rounds: the files grow with
            // every round, and a ratio that moves with their size shows here.
            if ratios.len() >= 3 {
                let third = ratios.len() / 3;
                let parts = [&ratios[..third], &ratios[third..ratios.len() - third], &ratios[ratios.len() - third..]];
                line[format!("{name}_vs_redb_raw_by_third")] = json!(parts.map(|part| round3(median(part.to_vec()))));
            }
            line[format!("{name}_vs_redb_raw")] = json!(round3(median(ratios)));
        }
    }
    for (layer, name) in LAYERS.iter().enumerate() {
        if wall[layer].is_empty() {
            continue;
        }
        line[format!("{name}_us")] = json!(round1(median(std::mem::take(&mut wall[layer]))));
        if !cpu[layer].is_empty() {
            let per_op = cpu[layer].iter().map(|d| d.as_secs_f64() * 1e6).collect();
            line[format!("{name}_cpu_us")] = json!(round1(median(per_op)));
        }
    }
    drop(direct);
    stored.close();
    emit(line);
}

fn check_flat(s: &Flat, n: u64) {
    assert_eq!(s.counter, n);
}

fn check_cycle(s: &Cyc, n: u64) {
    assert_eq!(s.log.len() as u64, n);
    assert_eq!(s.log[..3], ["a", "b", "c"]);
}

fn bench_fanout(cfg: &Config, rt: &tokio::runtime::Runtime, raw: &mut RawRedb) {
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
fn bench_concurrent(cfg: &Config, rt: &tokio::runtime::Runtime) {
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

/// Read latencies on a 3000-step `cycle` thread, with the parts of `state`
/// and the cost of copying that state in memory.
fn bench_reads(cfg: &Config, rt: &tokio::runtime::Runtime) {
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
fn bench_reads_flat(cfg: &Config, rt: &tokio::runtime::Runtime) {
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

/// Store size of one `cycle` thread of 500, 1000, 2000 steps, each in its own file.
fn bench_size(cfg: &Config, rt: &tokio::runtime::Runtime) {
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

/// Durable commits per approved tool call (a count, not a timing): from just
/// after the approver's decision to the end of the resumed run, with how many of them
/// are step commits (the rest are the gateway's approval transitions, effect
/// journal and audit writes).
fn bench_approved(cfg: &Config, rt: &tokio::runtime::Runtime) {
    let (all, steps) = rt.block_on(workload_approved::commits_per_approved_call(&thread_id("approved")));
    emit(json!({
        "bench": "approved_call",
        "op": "approve, resume, the tool runs once, the run completes",
        "durable_commits_per_approved_call": all,
        "of_which_step_commits": steps,
        "gateway_commits": all - steps,
        "quick": cfg.quick,
    }));
}

fn main() {
    let cfg = Config::from_env();
    let began = Instant::now();
    let rt = runtime();
    let mut raw = RawRedb::new();
    bench_disk(&cfg);
    bench_redb_raw(&cfg, &mut raw);
    if cfg.selected("cycle_flat") {
        bench_cycles(&cfg, &rt, &mut raw, "cycle_flat", cycle_flat::graph(), check_flat);
    }
    if cfg.selected("cycle") {
        bench_cycles(&cfg, &rt, &mut raw, "cycle", cycle::graph(), check_cycle);
    }
    if cfg.selected("sync_breakdown") {
        bench_sync_breakdown(&cfg, &rt, &mut raw);
    }
    if cfg.selected("fanout") {
        bench_fanout(&cfg, &rt, &mut raw);
    }
    if cfg.selected("concurrent") {
        bench_concurrent(&cfg, &rt);
    }
    if cfg.selected("read") {
        bench_reads_flat(&cfg, &rt);
        bench_reads(&cfg, &rt);
    }
    if cfg.selected("size") {
        bench_size(&cfg, &rt);
    }
    if cfg.selected("approved") {
        bench_approved(&cfg, &rt);
    }
    eprintln!(
        "store bench ({}) done in {:.1} s, files under {}",
        if cfg.quick { "quick" } else { "full" },
        began.elapsed().as_secs_f64(),
        Path::new(&std::env::temp_dir()).display()
    );
}
