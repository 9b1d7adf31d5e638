//! Worker-pool benchmarks on PostgreSQL (the server at `AGENTFLOW_PG_URL`; without it one
//! SKIPPED line is printed). One JSON line per figure on stdout; nothing is asserted.
//!
//! ```text
//! source .ci/postgres.sh && cargo bench --bench workers
//! cargo bench --bench workers -- --quick
//! ```
//!
//! This binary starts copies of itself as worker processes (`--worker`): each worker is a
//! separate OS process with its own store connections. For each workload and 1, 2 and 4
//! worker processes (`Durability::Sync`), this process queues every run, lets the workers
//! (already started, store open) go at once and times until the queue is empty: steps per
//! second (one step = one durable commit of a super-step), the ratio to one worker, and the
//! server's write transactions per run (transaction ids handed out while the workers ran:
//! claims, step commits, settles and heartbeats). The same workloads run on a `RedbStore` file
//! with one in-process worker (redb's one-process rule), for comparison.
//!
//! - `cycle_flat`: 64 threads of 30 steps, 8 runs at once per worker process; `fanout`: 96
//!   runs of the 8-branch fan-out (4 steps each), 8 at once per process.
//! - `timer`: 128 threads of 10 steps whose node awaits a 5 ms timer (an I/O wait), in two
//!   regimes. `io_bound`: `Worker::concurrency(1)`, each worker process runs one thread at a
//!   time, so a worker mostly waits and more processes do more [target: 4 workers >= 3x one].
//!   `saturated`: `Worker::concurrency(8)`, where one process already keeps the 2 cores busy
//!   with the server, so more processes add little.
//! - `--quick` runs a quarter of the runs.
//! - `claim_latency`: one idle worker (polling every 10 ms); a run is submitted and its first
//!   node records when it started: p50/p99 of submit -> first step start, over 40 runs.
//! - `sync_step_vs_raw_commit`: one thread of `cycle_flat` run in this process with
//!   `Durability::Sync` on `PostgresStore`, per step, next to a raw single-row `INSERT`
//!   committed on its own connection (synchronous commit), in the same run [target: within 2x].

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentflow::Worker;
use agentflow::prelude::*;
use agentflow::{CancellationToken, Durability, RedbStore, Store};
use agentflow_store::PostgresStore;
use serde::{Deserialize, Serialize};
use serde_json::json;

#[path = "workloads/cycles.rs"]
#[allow(dead_code)]
mod workload_cycles;
use workload_cycles::{Flat, Limit, cycle_flat};

#[path = "workloads/fanout.rs"]
#[allow(dead_code)]
mod workload_fanout;
use workload_fanout::{Fan, fanout};

const CYCLE_STEPS: u64 = 30;
const FAN_STEPS: u64 = 4;
const TIMER_STEPS: u64 = 10;

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
pub struct Tick {
    pub n: u64,
    #[reduce(add)]
    pub counter: u64,
    /// Unix micros at which the first node started (for the claim latency).
    pub started_us: Option<u64>,
}

fn now_us() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

#[graph(state = Tick, start = wait, max_steps = 100000)]
mod timer {
    use super::*;

    #[node(goto = [wait, END])]
    async fn wait(s: &Tick) -> Step<Tick> {
        let u = Tick::update().counter(1);
        let u = if s.counter == 0 { u.started_us(Some(now_us())) } else { u };
        tokio::time::sleep(Duration::from_millis(5)).await;
        if s.counter + 1 >= s.n { goto!(END, u) } else { goto!(wait, u) }
    }
}

#[graph(state = Tick, start = probe)]
mod probe {
    use super::*;

    #[node(goto = [END])]
    async fn probe(_s: &Tick) -> Step<Tick> {
        goto!(END, Tick::update().counter(1).started_us(Some(now_us())))
    }
}

fn emit(value: serde_json::Value) {
    println!("{value}");
}

fn round(x: f64, places: i32) -> f64 {
    let p = 10f64.powi(places);
    (x * p).round() / p
}

// ---------------------------------------------------------------- workers

fn pg(url: &str, schema: &str) -> Arc<dyn Store> {
    Arc::new(PostgresStore::builder().schema(schema).max_connections(16).open(url).expect("open PostgreSQL"))
}

/// Runs a worker for `workload` on `store`, `concurrency` runs at once, until `stop` is cancelled.
async fn work(workload: &str, concurrency: usize, store: Arc<dyn Store>, poll: Duration, stop: CancellationToken) {
    let report = match workload {
        "cycle_flat" => {
            let app = cycle_flat::graph().app().store(store);
            let worker = Worker::new(app, Arc::new(Limit { n: CYCLE_STEPS }));
            worker.concurrency(concurrency).poll_interval(poll).run(stop).await
        }
        "fanout" => {
            let app = fanout::graph().app().store(store);
            Worker::new(app, Arc::new(())).concurrency(concurrency).poll_interval(poll).run(stop).await
        }
        "timer" => {
            let app = timer::graph().app().store(store);
            Worker::new(app, Arc::new(())).concurrency(concurrency).poll_interval(poll).run(stop).await
        }
        "probe" => {
            let app = probe::graph().app().store(store);
            Worker::new(app, Arc::new(())).concurrency(1).poll_interval(poll).run(stop).await
        }
        other => panic!("unknown workload {other}"),
    };
    report.expect("the worker runs");
}

/// The child process: `--worker WORKLOAD CONCURRENCY SCHEMA STOP_FILE`. It opens the store, creates
/// `STOP_FILE.ready.PID`, waits for `STOP_FILE.go`, then works until `STOP_FILE` exists.
fn worker_child(args: &[String]) {
    let url = std::env::var("AGENTFLOW_PG_URL").expect("AGENTFLOW_PG_URL");
    let (workload, schema, stop_file) = (&args[0], &args[2], PathBuf::from(&args[3]));
    let concurrency: usize = args[1].parse().expect("a concurrency");
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let store = pg(&url, schema);
        std::fs::write(format!("{}.ready.{}", stop_file.display(), std::process::id()), "").unwrap();
        let go = PathBuf::from(format!("{}.go", stop_file.display()));
        while !go.exists() {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let stop = CancellationToken::new();
        let s = stop.clone();
        tokio::spawn(async move {
            while !stop_file.exists() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            s.cancel();
        });
        let poll = if workload == "probe" { Duration::from_millis(10) } else { Duration::from_millis(20) };
        work(workload, concurrency, store, poll, stop).await;
    });
}

struct Pool {
    children: Vec<Child>,
    stop: PathBuf,
}

impl Pool {
    fn start(workload: &str, concurrency: usize, schema: &str, n: usize, dir: &Path) -> Self {
        let stop = dir.join(format!("{schema}.stop"));
        let exe = std::env::current_exe().unwrap();
        let children = (0..n)
            .map(|_| {
                Command::new(&exe)
                    .args(["--worker", workload, &concurrency.to_string(), schema, stop.to_str().unwrap()])
                    .spawn()
                    .expect("start a worker process")
            })
            .collect();
        Pool { children, stop }
    }

    /// Waits until every worker process opened the store, then lets them all start.
    async fn go(&self) {
        let prefix = format!("{}.ready.", self.stop.file_name().unwrap().to_str().unwrap());
        let dir = self.stop.parent().unwrap().to_path_buf();
        loop {
            let ready = std::fs::read_dir(&dir)
                .unwrap()
                .filter(|e| e.as_ref().is_ok_and(|e| e.file_name().to_string_lossy().starts_with(&prefix)))
                .count();
            if ready == self.children.len() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        std::fs::write(format!("{}.go", self.stop.display()), "").unwrap();
    }

    fn stop(mut self) {
        std::fs::write(&self.stop, "").unwrap();
        for c in &mut self.children {
            let _ = c.wait();
        }
    }
}

/// Submits the workload's runs; answers the number of steps they take.
fn submit(workload: &str, store: &Arc<dyn Store>, runs: usize) -> u64 {
    for i in 0..runs {
        let thread = format!("{workload}-{i}");
        match workload {
            "cycle_flat" => cycle_flat::graph().app().store(store.clone()).submit(&thread, &Flat::default()).unwrap(),
            "fanout" => fanout::graph().app().store(store.clone()).submit(&thread, &Fan::default()).unwrap(),
            "timer" => timer::graph()
                .app()
                .store(store.clone())
                .submit(&thread, &Tick { n: TIMER_STEPS, ..Tick::default() })
                .unwrap(),
            other => panic!("unknown workload {other}"),
        }
    }
    let per_run = match workload {
        "cycle_flat" => CYCLE_STEPS,
        "fanout" => FAN_STEPS,
        _ => TIMER_STEPS,
    };
    per_run * runs as u64
}

/// Waits until the queue is empty.
async fn drained(store: &Arc<dyn Store>) {
    loop {
        let s = store.clone();
        let empty = tokio::task::spawn_blocking(move || s.list_runs().unwrap().is_empty()).await.unwrap();
        if empty {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn runs_of(workload: &str, quick: bool) -> usize {
    let full = match workload {
        "cycle_flat" => 64,
        "fanout" => 96,
        _ => 128,
    };
    if quick { full / 4 } else { full }
}

/// The next transaction id the server will hand out: every transaction that writes or locks a
/// row takes one, reads take none.
async fn next_xid(client: &tokio_postgres::Client) -> i64 {
    let row = client.query_one("SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint", &[]).await.unwrap();
    row.get(0)
}

async fn pool_figures(url: &str, dir: &Path, quick: bool) {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    // (workload, runs at once per worker process, regime)
    let cases = [
        ("cycle_flat", 8, "no_wait"),
        ("fanout", 8, "no_wait"),
        ("timer", 1, "io_bound: one run at a time per worker process"),
        ("timer", 8, "saturated: 8 runs at once per worker process; one process keeps the 2 cores busy"),
    ];
    for (workload, concurrency, regime) in cases {
        let mut one = None;
        for n in [1usize, 2, 4] {
            let schema = format!("bench_{workload}_{concurrency}_{n}_{}", std::process::id());
            let store = pg(url, &schema);
            let pool = Pool::start(workload, concurrency, &schema, n, dir);
            // Every run is queued before the workers start, so the time is the workers'.
            let s = store.clone();
            let runs = runs_of(workload, quick);
            let steps = tokio::task::spawn_blocking(move || submit(workload, &s, runs)).await.unwrap();
            let before = next_xid(&client).await;
            pool.go().await;
            let start = Instant::now();
            drained(&store).await;
            let secs = start.elapsed().as_secs_f64();
            let writes = next_xid(&client).await - before;
            pool.stop();
            let rate = steps as f64 / secs;
            let base = *one.get_or_insert(rate);
            let mut line = json!({
                "bench": "workers_postgres", "workload": workload, "regime": regime, "durability": "Sync",
                "worker_processes": n, "concurrency_per_worker": concurrency, "runs": runs, "steps": steps,
                "secs": round(secs, 3), "steps_per_s": round(rate, 1), "vs_one_worker": round(rate / base, 2),
                "write_transactions_per_run": round(writes as f64 / runs as f64, 2), "quick": quick,
            });
            if workload == "timer" && concurrency == 1 && n == 4 {
                line["target"] = json!(">= 3x one worker");
                line["met"] = json!(rate / base >= 3.0);
            }
            emit(line);
        }
        // redb, one process.
        let path = dir.join(format!("{workload}_{concurrency}.redb"));
        let store: Arc<dyn Store> = Arc::new(RedbStore::open(&path).unwrap());
        let s = store.clone();
        let runs = runs_of(workload, quick);
        let steps = tokio::task::spawn_blocking(move || submit(workload, &s, runs)).await.unwrap();
        let stop = CancellationToken::new();
        let start = Instant::now();
        let worker = tokio::spawn(work(workload, concurrency, store.clone(), Duration::from_millis(20), stop.clone()));
        drained(&store).await;
        let secs = start.elapsed().as_secs_f64();
        stop.cancel();
        worker.await.unwrap();
        emit(json!({
            "bench": "workers_redb_one_process", "workload": workload, "regime": regime, "durability": "Sync",
            "workers": 1, "concurrency_per_worker": concurrency, "runs": runs, "steps": steps,
            "secs": round(secs, 3), "steps_per_s": round(steps as f64 / secs, 1), "quick": quick,
        }));
    }
}

async fn claim_latency(url: &str, dir: &Path, quick: bool) {
    let schema = format!("bench_probe_{}", std::process::id());
    let store = pg(url, &schema);
    let app = probe::graph().app().store(store.clone());
    let pool = Pool::start("probe", 1, &schema, 1, dir);
    pool.go().await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut latencies = Vec::new();
    for i in 0..if quick { 10 } else { 40 } {
        let thread = format!("probe-{i}");
        let submitted = now_us();
        app.submit(&thread, &Tick::default()).unwrap();
        drained(&store).await;
        let started = app.state(&thread).unwrap().unwrap().state.started_us.unwrap();
        latencies.push(started.saturating_sub(submitted) as f64 / 1000.0);
    }
    pool.stop();
    latencies.sort_by(f64::total_cmp);
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q).round() as usize];
    emit(json!({
        "bench": "claim_latency", "store": "postgres", "poll_interval_ms": 10, "samples": latencies.len(),
        "p50_ms": round(at(0.5), 2), "p99_ms": round(at(0.99), 2), "quick": quick,
    }));
}

async fn sync_step_vs_raw(url: &str, quick: bool) {
    let schema = format!("bench_sync_{}", std::process::id());
    let store = pg(url, &schema);
    let steps = if quick { 100 } else { 400 };
    let app = cycle_flat::graph().app().store(store);
    let limit = Limit { n: steps };
    let start = Instant::now();
    let run = app.runner(&limit).thread("sync").durability(Durability::Sync).run(Flat::default()).await.unwrap();
    assert!(run.outcome.is_completed());
    let step_us = start.elapsed().as_secs_f64() * 1e6 / steps as f64;

    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    client
        .batch_execute(&format!(
            "CREATE TABLE IF NOT EXISTS {schema}.raw (id bigint PRIMARY KEY, payload bytea NOT NULL); \
             SET synchronous_commit = on"
        ))
        .await
        .unwrap();
    let insert = client.prepare(&format!("INSERT INTO {schema}.raw (id, payload) VALUES ($1, $2)")).await.unwrap();
    let payload = vec![7u8; 200];
    let start = Instant::now();
    for i in 0..steps as i64 {
        // Autocommit: each INSERT is its own transaction, committed synchronously.
        client.execute(&insert, &[&i, &payload]).await.unwrap();
    }
    let raw_us = start.elapsed().as_secs_f64() * 1e6 / steps as f64;
    emit(json!({
        "bench": "sync_step_vs_raw_commit", "store": "postgres", "steps": steps,
        "us_per_sync_step": round(step_us, 1), "us_per_raw_single_row_commit": round(raw_us, 1),
        "ratio": round(step_us / raw_us, 2), "target": "<= 2x", "met": step_us / raw_us <= 2.0, "quick": quick,
    }));
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(i) = args.iter().position(|a| a == "--worker") {
        worker_child(&args[i + 1..]);
        return;
    }
    let Ok(url) = std::env::var("AGENTFLOW_PG_URL") else {
        println!(
            "SKIPPED worker benchmarks: AGENTFLOW_PG_URL is not set (start a server with `source .ci/postgres.sh`)"
        );
        return;
    };
    let quick = args.iter().any(|a| a == "--quick") || std::env::var_os("AGENTFLOW_BENCH_QUICK").is_some();
    let dir = std::env::temp_dir().join(format!("agentflow-bench-workers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        sync_step_vs_raw(&url, quick).await;
        claim_latency(&url, &dir, quick).await;
        pool_figures(&url, &dir, quick).await;
    });
    let _ = std::fs::remove_dir_all(&dir);
}
