//! Durable timers at scale. One JSON line per figure on stdout.
//!
//! ```text
//! cargo bench --bench timers                 # 10,000 sleeping threads
//! cargo bench --bench timers -- --quick      # 1,000, a short window
//! AGENTFLOW_BENCH_TIMERS=20000 AGENTFLOW_BENCH_WINDOW_MS=60000 cargo bench --bench timers
//! ```
//!
//! N threads of one redb store (a file, default durability) each run a node
//! that sleeps until its own wake time; the wake times are spread evenly
//! over a window that starts after every thread is asleep. Figures:
//! - `rss_*`: resident memory of the process (from `/proc/self/statm`)
//!   before the threads exist, once half and all of them sleep (the runs
//!   have ended: nothing of a sleeping thread is held by the executor), and
//!   while a scheduler watches them, before the first is due;
//! - `wake_lag_ms`: for each thread, when its node started again minus its
//!   wake time (the scheduler's poll, the resume and the node's start), as
//!   p50 / p99 / max. Target: p99 under 100 ms.
//!
//! No figure is asserted; the bench checks that every thread woke once and
//! completed.

use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use agentflow::prelude::*;
use agentflow::timer::{SchedulerConfig, now_ms};
use agentflow::{RedbStore, Store};
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Timer {
    /// When this thread wakes (unix ms).
    wake_at: u64,
    done: bool,
}

#[derive(Default)]
struct Lags {
    /// (thread's wake time, lag in ms) of every wake-up.
    lags: Mutex<Vec<(u64, u64)>>,
}

#[graph(state = Timer, deps = Lags, start = wait)]
mod timers {
    use super::*;

    #[node(goto = [END], sleep)]
    async fn wait(s: &Timer, cx: &Ctx<Lags>) -> Result<Step<Timer>, NodeError> {
        let at = std::time::UNIX_EPOCH + Duration::from_millis(s.wake_at);
        cx.sleep_until(at).await?;
        let lag = now_ms().saturating_sub(s.wake_at);
        cx.deps().lags.lock().unwrap().push((s.wake_at, lag));
        Ok(goto!(END, Timer::update().done(true)))
    }
}

/// Resident set size of this process, in bytes.
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm.split_whitespace().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
    pages * 4096
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn figure(name: &str, value: serde_json::Value) {
    println!("{}", json!({ "bench": "timers", "figure": name, "value": value }));
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick") || std::env::var_os("AGENTFLOW_BENCH_QUICK").is_some();
    let env = |k: &str, d: u64| std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d);
    let n = env("AGENTFLOW_BENCH_TIMERS", if quick { 1_000 } else { 10_000 }) as usize;
    let window = env("AGENTFLOW_BENCH_WINDOW_MS", if quick { 5_000 } else { 40_000 });
    // Time to create every thread before the first is due (estimated high).
    let lead = env("AGENTFLOW_BENCH_LEAD_MS", 3_000 + 2 * n as u64);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(run(n, window, lead));
}

async fn run(n: usize, window: u64, lead: u64) {
    let dir = std::env::temp_dir().join(format!("agentflow-bench-timers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let store: Arc<dyn Store> = Arc::new(RedbStore::open(dir.join("timers.redb")).unwrap());
    let app = timers::graph().app().store(Arc::clone(&store));
    let lags = Arc::new(Lags::default());

    let rss_before = rss();
    let created = Instant::now();
    let first_due = now_ms() + lead;
    let sem = Arc::new(tokio::sync::Semaphore::new(64));
    let mut tasks = tokio::task::JoinSet::new();
    let mut rss_half = 0;
    let mut asleep = 0;
    for i in 0..n {
        if i == n / 2 {
            while let Some(slept) = tasks.join_next().await {
                asleep += usize::from(slept.unwrap());
            }
            rss_half = rss();
        }
        let permit = Arc::clone(&sem).acquire_owned().await.unwrap();
        let (app, lags) = (app.clone(), Arc::clone(&lags));
        let wake_at = first_due + (i as u64 * window) / n as u64;
        tasks.spawn(async move {
            let run = app.runner(&*lags).thread(format!("t-{i:05}")).run(Timer { wake_at, done: false }).await.unwrap();
            drop(permit);
            matches!(run.outcome, Outcome::Sleeping { .. })
        });
    }
    while let Some(slept) = tasks.join_next().await {
        asleep += usize::from(slept.unwrap());
    }
    let create_s = created.elapsed().as_secs_f64();
    let rss_asleep = rss();
    figure("threads", json!(n));
    figure("create_s", json!(create_s));
    // Threads created after their wake time did not sleep: raise the lead if this is not n.
    figure("asleep_after_create", json!(asleep));
    figure("rss_before_mb", json!(rss_before as f64 / 1e6));
    figure("rss_half_asleep_mb", json!(rss_half as f64 / 1e6));
    figure("rss_all_asleep_mb", json!(rss_asleep as f64 / 1e6));
    // Creating threads grows the store (and redb's page cache with it):
    // compare with the file's growth.
    figure(
        "rss_growth_second_half_bytes_per_thread",
        json!((rss_asleep.saturating_sub(rss_half)) as f64 / (n - n / 2).max(1) as f64),
    );
    let file = std::fs::metadata(dir.join("timers.redb")).map_or(0, |m| m.len());
    figure("store_file_bytes_per_thread", json!(file as f64 / n.max(1) as f64));

    // The scheduler watches the sleeping threads; memory is sampled until the first is due.
    let config = SchedulerConfig::default().poll(Duration::from_millis(20));
    let scheduler = app.scheduler_with(Arc::clone(&lags), config);
    let mut rss_sleeping = rss_asleep;
    let mut samples = 0;
    while now_ms() + 50 < first_due {
        tokio::time::sleep(Duration::from_millis(200.min(first_due.saturating_sub(now_ms() + 50)))).await;
        rss_sleeping = rss_sleeping.max(rss());
        samples += 1;
    }
    figure("rss_max_while_asleep_with_scheduler_mb", json!(rss_sleeping as f64 / 1e6));
    figure("rss_samples_while_asleep", json!(samples));

    // Wait until every thread woke (or the store says no timer is left).
    let woke_started = Instant::now();
    loop {
        let done = lags.lags.lock().unwrap().len();
        if done >= n || (now_ms() > first_due + window && store.due_timers(u64::MAX, 1).unwrap().is_empty()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    scheduler.shutdown().await;
    let rss_after = rss();
    let mut all: Vec<(u64, u64)> = lags.lags.lock().unwrap().clone();
    // Only the wake-ups of threads that slept (the others ran straight through).
    all.retain(|(wake_at, _)| *wake_at >= first_due);
    let mut lag: Vec<u64> = all.iter().map(|(_, l)| *l).collect();
    lag.sort_unstable();
    figure("woken", json!(lag.len()));
    figure("wake_seconds", json!(woke_started.elapsed().as_secs_f64()));
    figure("wake_lag_ms_p50", json!(percentile(&lag, 0.50)));
    figure("wake_lag_ms_p99", json!(percentile(&lag, 0.99)));
    figure("wake_lag_ms_max", json!(lag.last().copied().unwrap_or(0)));
    figure("rss_after_wake_mb", json!(rss_after as f64 / 1e6));
    let completed = store.list_threads().unwrap().iter().filter(|t| t.status.as_str() == "completed").count();
    assert_eq!(completed, n, "every thread completed");
    assert_eq!(lags.lags.lock().unwrap().len(), n, "every thread woke once");
    drop(app);
    drop(store);
    std::fs::remove_dir_all(&dir).ok();
}
