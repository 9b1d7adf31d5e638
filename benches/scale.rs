//! Scale: many runs at once in memory, many paused threads in one redb file. One JSON line per
//! figure on stdout.
//!
//! ```text
//! cargo bench --bench scale                # 10,000 and 100,000 runs; 20,000 paused threads
//! cargo bench --bench scale -- --quick     # 1,000 and 10,000 runs; 2,000 paused threads (CI)
//! cargo bench --bench scale -- concurrent  # only the in-memory runs
//! cargo bench --bench scale -- paused      # only the paused threads
//! ```
//!
//! Workloads:
//! - `concurrent`: N runs spawned at once on a two-worker tokio runtime, in memory (no store).
//!   Each run's first node awaits two 50 ms calls (timers standing in for a model and a tool),
//!   its second asks a person (`cx.interrupt`), so every run ends `Outcome::Interrupted`.
//!   Figures: wall time from the first spawn to the last run's end, and heap bytes per run:
//!   the peak of live heap bytes while the runs are in flight, minus the live bytes before,
//!   divided by N (counted by this binary's allocator, so the figure is the same on every
//!   machine, unlike resident memory). It counts the task tokio allocates for each run (the
//!   run's future) and its `JoinHandle`, as an application spawning runs has them.
//! - `paused`: N durable threads in one redb file (`Durability::Sync`, the default), run 500
//!   at a time, each pausing at the same interrupt after the same node. Figures: the time to
//!   write them all, the time to list them (`Store::list_threads`), one thread's pending items
//!   (`App::pending`) and state (`App::state`), and the file's bytes per thread.
//!
//! Targets (issue "win back the speed"): 10,000 runs at most 5 KB per run; 20,000 threads
//! written in under 8 s, listed in under 10 ms, at most 2 KB per thread. No figure is
//! asserted; the bench checks only that every run and thread ended as the workload says.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use agentflow::prelude::*;
use agentflow::{RedbStore, Store};
use serde::{Deserialize, Serialize};
use serde_json::json;

// ---------------------------------------------------------------------------
// Heap accounting.

/// The system allocator, counting the bytes live now and the most live since the last reset.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

impl Counting {
    fn grew(by: usize) {
        let now = LIVE.fetch_add(by, Ordering::Relaxed) + by;
        PEAK.fetch_max(now, Ordering::Relaxed);
    }

    fn shrank(by: usize) {
        LIVE.fetch_sub(by, Ordering::Relaxed);
    }
}

// SAFETY: every call is passed to `System` unchanged; only counters are updated beside it.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc` is passed on as is.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            Counting::grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as above.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            Counting::grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) };
        Counting::shrank(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as above.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            if new_size >= layout.size() {
                Counting::grew(new_size - layout.size());
            } else {
                Counting::shrank(layout.size() - new_size);
            }
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Starts a peak measurement: the bytes live now, which the peak is counted from.
fn reset_peak() -> usize {
    let now = LIVE.load(Ordering::Relaxed);
    PEAK.store(now, Ordering::Relaxed);
    now
}

// ---------------------------------------------------------------------------
// The workload.

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Job {
    id: u64,
    /// What the two calls returned.
    #[reduce(add)]
    found: u64,
    /// The person's answer.
    answer: Option<String>,
}

/// How long each of the node's two calls takes.
const CALL: Duration = Duration::from_millis(50);

#[graph(state = Job, start = work)]
mod job {
    use super::*;

    #[node(goto = [ask])]
    async fn work(s: &Job) -> Step<Job> {
        // Two awaited calls, as a model call and a tool call would be.
        tokio::time::sleep(CALL).await;
        tokio::time::sleep(CALL).await;
        goto!(ask, Job::update().found(s.id + 1))
    }

    #[node(goto = [END], interrupt)]
    async fn ask(s: &Job, cx: &Ctx<()>) -> Result<Step<Job>, NodeError> {
        let answer: String = cx.interrupt(json!({ "approve": s.id }))?;
        Ok(goto!(END, Job::update().answer(Some(answer))))
    }
}

fn figure(workload: &str, name: &str, value: serde_json::Value) {
    println!("{}", json!({ "bench": "scale", "workload": workload, "figure": name, "value": value }));
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("a tokio runtime")
}

// ---------------------------------------------------------------------------
// Concurrent in-memory runs.

fn concurrent(n: usize) {
    let rt = runtime();
    let graph = job::graph();
    // Warm up (the runtime's worker threads, the graph's first run).
    rt.block_on(async { graph.run(Job::default(), &()).await.expect("a warm-up run") });
    if std::env::var_os("AGENTFLOW_BENCH_SIZES").is_some() {
        let app = graph.app();
        let run = graph.run(Job::default(), &());
        eprintln!("future of CompiledGraph::run: {} bytes", std::mem::size_of_val(&run));
        let runner = app.runner(&()).run(Job::default());
        eprintln!("future of Runner::run: {} bytes", std::mem::size_of_val(&runner));
    }
    let before = reset_peak();
    let began = Instant::now();
    let interrupted = rt.block_on(async {
        let tasks: Vec<_> = (0..n as u64)
            .map(|id| {
                let graph = graph.clone();
                tokio::spawn(async move {
                    let run = graph.run(Job { id, ..Job::default() }, &()).await.expect("a run");
                    matches!(run.outcome, Outcome::Interrupted { .. }) && run.state.found == id + 1
                })
            })
            .collect();
        let mut interrupted = 0;
        for task in tasks {
            interrupted += usize::from(task.await.expect("a run's task"));
        }
        interrupted
    });
    let wall = began.elapsed();
    let peak = PEAK.load(Ordering::Relaxed).saturating_sub(before);
    assert_eq!(interrupted, n, "every run did its two calls and paused at the interrupt");
    let w = format!("concurrent_{n}");
    figure(&w, "runs", json!(n));
    figure(&w, "wall_s", json!(wall.as_secs_f64()));
    // The runs' calls take 100 ms; the rest is the executor's (and the runtime's) work.
    figure(&w, "wall_over_calls_s", json!((wall.saturating_sub(2 * CALL)).as_secs_f64()));
    figure(&w, "heap_peak_bytes_per_run", json!(peak as f64 / n as f64));
}

// ---------------------------------------------------------------------------
// Paused durable threads.

/// How many threads are run at once.
const AT_ONCE: usize = 500;

fn paused(n: usize) {
    let rt = runtime();
    let dir = std::env::temp_dir().join(format!("agentflow-bench-scale-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let path = dir.join("paused.redb");
    let store: Arc<dyn Store> = Arc::new(RedbStore::open(&path).expect("a redb file"));
    let app = job::graph().app().store(Arc::clone(&store));
    let w = format!("paused_{n}");

    let began = Instant::now();
    let paused = rt.block_on(async {
        let mut paused = 0;
        for chunk in (0..n as u64).collect::<Vec<_>>().chunks(AT_ONCE) {
            let mut tasks = tokio::task::JoinSet::new();
            for &id in chunk {
                let app = app.clone();
                tasks.spawn(async move {
                    let run = app
                        .runner(&())
                        .thread(format!("t-{id:06}"))
                        .run(Job { id, ..Job::default() })
                        .await
                        .expect("a run");
                    matches!(run.outcome, Outcome::Interrupted { .. })
                });
            }
            while let Some(done) = tasks.join_next().await {
                paused += usize::from(done.expect("a run's task"));
            }
        }
        paused
    });
    let write = began.elapsed();
    assert_eq!(paused, n, "every thread paused at the interrupt");
    figure(&w, "threads", json!(n));
    figure(&w, "write_s", json!(write.as_secs_f64()));
    // The calls take 100 ms per batch of 500; the rest is the executor's and the store's.
    let batches = n.div_ceil(AT_ONCE) as u32;
    figure(&w, "write_over_calls_s", json!(write.saturating_sub(2 * CALL * batches).as_secs_f64()));

    let listed = best_of(5, || {
        let threads = store.list_threads().expect("the thread list");
        assert_eq!(threads.iter().filter(|t| t.status.as_str() == "interrupted").count(), n);
    });
    figure(&w, "list_ms", json!(listed.as_secs_f64() * 1e3));
    let one = format!("t-{:06}", n / 2);
    let pending = best_of(5, || {
        let pending = app.pending(&one).expect("the pending items");
        assert_eq!(pending.len(), 1, "one question");
    });
    figure(&w, "pending_one_us", json!(pending.as_secs_f64() * 1e6));
    let state = best_of(5, || {
        let snapshot = app.state(&one).expect("the state").expect("a checkpoint");
        assert_eq!(snapshot.state.found, n as u64 / 2 + 1);
    });
    figure(&w, "state_one_us", json!(state.as_secs_f64() * 1e6));
    store.flush().expect("a flush");
    let bytes = std::fs::metadata(&path).map_or(0, |m| m.len());
    figure(&w, "file_bytes_per_thread", json!(bytes as f64 / n as f64));
    drop(app);
    drop(store);
    std::fs::remove_dir_all(&dir).ok();
}

/// The fastest of `reps` timed calls of `f`.
fn best_of(reps: usize, mut f: impl FnMut()) -> Duration {
    (0..reps)
        .map(|_| {
            let began = Instant::now();
            f();
            began.elapsed()
        })
        .min()
        .unwrap_or_default()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick") || std::env::var_os("AGENTFLOW_BENCH_QUICK").is_some();
    let only = |w: &str| {
        let named: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
        named.is_empty() || named.iter().any(|a| a.as_str() == w)
    };
    let began = Instant::now();
    if only("concurrent") {
        let sizes: &[usize] = if quick { &[1_000, 10_000] } else { &[10_000, 100_000] };
        for &n in sizes {
            concurrent(n);
        }
    }
    if only("paused") {
        paused(if quick { 2_000 } else { 20_000 });
    }
    eprintln!("scale bench done in {:.1} s", began.elapsed().as_secs_f64());
}
