//! How many write transactions a worker spends on a run, on PostgreSQL (the server at
//! `AGENTFLOW_PG_URL`; skipped with one line without it).
//!
//! Counted with the server's transaction-id counter (`pg_current_snapshot()`'s `xmax`): every
//! transaction that writes or locks a row takes one id, reads take none. This binary holds one
//! test only, so nothing else uses the server while it counts (test binaries run one after
//! another).

use crate::support::pg;

use std::sync::Arc;
use std::time::Duration;

use agentflow::prelude::*;
use agentflow::{CancellationToken, Store, Worker};
use agentflow_store::PostgresStore;
use serde::{Deserialize, Serialize};

const STEPS: u64 = 10;
const RUNS: u64 = 8;

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
pub struct Tick {
    pub n: u64,
    #[reduce(add)]
    pub counter: u64,
}

#[graph(state = Tick, start = wait, max_steps = 1000)]
mod timer {
    use super::*;

    /// An I/O wait: a 5 ms timer.
    #[node(goto = [wait, END])]
    async fn wait(s: &Tick) -> Step<Tick> {
        tokio::time::sleep(Duration::from_millis(5)).await;
        let u = Tick::update().counter(1);
        if s.counter + 1 >= s.n { goto!(END, u) } else { goto!(wait, u) }
    }
}

/// The next transaction id the server will hand out.
async fn next_xid(client: &tokio_postgres::Client) -> i64 {
    let row = client.query_one("SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint", &[]).await.unwrap();
    row.get(0)
}

/// A run of `STEPS` steps costs its worker one write transaction per step, one for the input
/// checkpoint, one for the claim and one that settles the queue row and releases the lease:
/// no separate lease acquire when the run starts (the claim took the lease), no separate release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claimed_run_costs_one_write_transaction_per_step_plus_three() {
    let Some(url) = pg::pg_url() else { return };
    let schema = format!("worker_commits_{}", std::process::id());
    let store: Arc<dyn Store> = Arc::new(PostgresStore::builder().schema(&schema).open(&url).unwrap());
    let app = timer::graph().app().store(store);
    // Stored once per store: not part of a run's cost.
    app.runner(&()).thread("warm-up").run(Tick { n: 1, ..Tick::default() }).await.unwrap();
    for i in 0..RUNS {
        app.submit(&format!("t{i}"), &Tick { n: STEPS, ..Tick::default() }).unwrap();
    }

    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    let before = next_xid(&client).await;
    // One run at a time; no heartbeat (the poll interval is longer than the test), so the
    // count is the runs' own.
    let stop = CancellationToken::new();
    let worker = Worker::new(app.clone(), Arc::new(())).concurrency(1).poll_interval(Duration::from_secs(3600));
    let handle = tokio::spawn(worker.run(stop.clone()));
    let start = std::time::Instant::now();
    while !app.live_runs().unwrap().is_empty() {
        assert!(start.elapsed() < Duration::from_secs(60), "the runs did not finish");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop.cancel();
    let report = handle.await.unwrap().unwrap();
    let used = next_xid(&client).await - before;
    assert_eq!(report.completed, RUNS, "{report:?}");
    for i in 0..RUNS {
        assert_eq!(app.state(&format!("t{i}")).unwrap().unwrap().state.counter, STEPS);
    }
    let per_run = used as f64 / RUNS as f64;
    println!("write transactions per {STEPS}-step run: {per_run:.2} ({used} for {RUNS} runs)");
    let budget = STEPS + 3;
    // Two ids of slack: the server's autovacuum takes one when it analyzes a table meanwhile.
    // The old cost (a lease acquire and a release of their own: 15 per run) is 16 over.
    assert!(
        used as u64 <= RUNS * budget + 2,
        "{per_run:.2} write transactions per {STEPS}-step run, more than {budget} (steps + claim + input + settle)"
    );
}
