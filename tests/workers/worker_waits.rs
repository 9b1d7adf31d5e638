//! Workers and threads that wait: a run that ends sleeping on a durable timer, a thread that
//! waits in `cx.interrupt` for a value (parked until someone answers), a cancel request that arrives while the worker shuts
//! down, and a claim whose rows do not decode. On `RedbStore`, and on `PostgresStore` where
//! the store's part differs (skipped with one line without `AGENTFLOW_PG_URL`).

use crate::support::hooked_store;
use crate::support::pg;
use crate::support::stores::store as redb;
use crate::worker_naps::*;
use agentflow::Store;
use agentflow::WorkerError;
use agentflow::persist::ThreadStatus;
use agentflow_store::{NewRun, PostgresStore, RunWait};
use std::sync::Arc;
use std::sync::atomic::Ordering;

async fn a_sleeping_run_is_claimed_again_when_due(store: Arc<dyn Store>) {
    const SLEEP_MS: u64 = 1500;
    // Until the checks below are made, no claim sees the timer due: it falls after the cap.
    let (store, cap) = claims_held_at(store, agentflow::timer::now_ms() + SLEEP_MS - 1);
    let app = naps::graph().app().store(store);
    app.submit("nap", &Nap { sleep_ms: SLEEP_MS, ..Nap::default() }).unwrap();
    let (stop, handle) = start(&app, ());
    // While it sleeps it stays queued, parked for its timer, with no lease held.
    wait_until("the run parks for its timer", || {
        app.live_runs().unwrap().iter().any(|r| r.thread == "nap" && r.wait == RunWait::Timer && r.lease.is_none())
    })
    .await;
    assert_eq!(app.thread("nap").unwrap().unwrap().status, ThreadStatus::Sleeping);
    // A sleeping thread is not running: a pause is refused, nothing is set on its run.
    let refused = app.pause_run("nap").unwrap_err();
    assert!(matches!(&refused, WorkerError::NotRunning { status, .. } if status == "sleeping"), "{refused}");
    assert_eq!(app.live_runs().unwrap()[0].control, None);
    // No scheduler runs: the worker itself claims it once the timer is due.
    cap.store(u64::MAX, Ordering::SeqCst);
    wait_until("the run completes", || app.live_runs().unwrap().is_empty()).await;
    stop.cancel();
    let report = handle.await.unwrap().unwrap();
    let record = app.thread("nap").unwrap().unwrap();
    assert_eq!(record.status, ThreadStatus::Completed, "{}", record.detail);
    assert_eq!(app.state("nap").unwrap().unwrap().state.steps, 2);
    assert_eq!((report.claimed, report.sleeping, report.completed, report.failed), (2, 1, 1, 0), "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redb_a_run_that_ends_sleeping_stays_queued_and_a_worker_finishes_it_when_due() {
    a_sleeping_run_is_claimed_again_when_due(redb()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_run_that_ends_sleeping_stays_queued_and_a_worker_finishes_it_when_due() {
    let Some(url) = pg::pg_url() else { return };
    a_sleeping_run_is_claimed_again_when_due(postgres(&url, "sleep")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_waiting_for_a_value_stays_parked_and_is_not_paused_or_counted_failed() {
    let store = redb();
    let app = naps::graph().app().store(store.clone());
    app.submit("ask", &Nap { ask: true, ..Nap::default() }).unwrap();
    let (stop, handle) = start(&app, ());
    wait_until("the run parks for its value", || parked_for_an_answer(&app, "ask")).await;
    assert_eq!(app.thread("ask").unwrap().unwrap().status, ThreadStatus::Interrupted);

    // A worker cannot give it its value: resuming it through the queue, or pausing it, is refused.
    let refused = app.submit_resume("ask").unwrap_err();
    assert!(matches!(&refused, WorkerError::ValueRequired { node, .. } if node == "first"), "{refused}");
    let refused = app.pause_run("ask").unwrap_err();
    assert!(matches!(&refused, WorkerError::NotRunning { status, .. } if status == "interrupted"), "{refused}");
    assert!(parked_for_an_answer(&app, "ask"));

    // Woken without an answer (straight in the store): the worker finds no value and parks it
    // again, waiting, not failed.
    assert!(store.wake_run("ask", RunWait::Answer).unwrap());
    wait_until("the woken run is claimed and parked again", || {
        app.live_runs().unwrap().iter().any(|r| r.claims == 2) && parked_for_an_answer(&app, "ask")
    })
    .await;
    stop.cancel();
    let report = handle.await.unwrap().unwrap();
    assert_eq!((report.claimed, report.interrupted, report.failed), (2, 2, 0), "{report:?}");
    assert_eq!(app.thread("ask").unwrap().unwrap().status, ThreadStatus::Interrupted);

    // Its value, given directly, continues it where it waited; the parked row no longer
    // holds anything: the next worker claims it, finds the thread finished, and removes it.
    let run = app.runner(&()).thread("ask").resume_with("ada".to_string()).await.unwrap();
    assert!(run.outcome.is_completed(), "{:?}", run.outcome);
    assert_eq!(run.state.answer.as_deref(), Some("ada"));
    let (stop, handle) = start(&app, ());
    wait_until("the stale row leaves the queue", || app.live_runs().unwrap().is_empty()).await;
    stop.cancel();
    let report = handle.await.unwrap().unwrap();
    assert_eq!((report.claimed, report.completed, report.failed), (1, 1, 0), "{report:?}");
    assert_eq!(app.state("ask").unwrap().unwrap().state.steps, 2, "nothing ran twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_request_during_shutdown_wins_over_the_shutdown_pause() {
    let app = gated::graph().app().store(redb());
    app.submit("gated", &Nap::default()).unwrap();
    let (stop, handle) = start(&app, ());
    wait_until("the first step runs", || AT_GATE.load(Ordering::SeqCst)).await;
    // The worker shuts down: the running step may finish (until the shutdown's deadline) and
    // the run is to pause there.
    stop.cancel();
    // A cancel request comes meanwhile: the worker reads it, and it reaches the running step.
    assert!(app.cancel_run("gated").unwrap());
    wait_until("the cancel ends the thread", || {
        app.thread("gated").unwrap().is_some_and(|t| t.status == ThreadStatus::Cancelled)
    })
    .await;
    let report = handle.await.unwrap().unwrap();
    GATE.add_permits(1);
    assert_eq!((report.controlled, report.stopped), (1, 0), "{report:?}");
    let record = app.thread("gated").unwrap().unwrap();
    assert_eq!(record.status, ThreadStatus::Cancelled, "the cancel wins: {}", record.detail);
    assert!(app.live_runs().unwrap().is_empty(), "a cancelled run leaves the queue");
    assert_eq!(app.state("gated").unwrap().unwrap().state.steps, 0, "the running step was stopped inside");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_claim_whose_rows_do_not_decode_is_rolled_back() {
    let Some(url) = pg::pg_url() else { return };
    let schema = format!("worker_waits_decode_{}", std::process::id());
    let store = PostgresStore::builder().schema(&schema).open(&url).unwrap();
    store.enqueue_run(NewRun::new("bad", "g", None, "", 1)).unwrap();
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    // A control request this version does not know.
    client.execute(&format!("UPDATE {schema}.run_queue SET control = 'BOGUS'"), &[]).await.unwrap();
    let store = Arc::new(store);
    let s = store.clone();
    let claimed = tokio::task::spawn_blocking(move || s.claim_runs("g", "w1", 30_000, agentflow::timer::now_ms(), 4))
        .await
        .unwrap();
    // The row is skipped, as on redb: nothing of it was claimed.
    assert!(claimed.unwrap().is_empty());
    // Nothing of the claim was kept: the row is unclaimed and no lease was taken.
    let row = client
        .query_one(&format!("SELECT claims, holder FROM {schema}.run_queue WHERE thread = 'bad'"), &[])
        .await
        .unwrap();
    assert_eq!((row.get::<_, i32>(0), row.get::<_, Option<String>>(1)), (0, None));
    let leases = client
        .query_one(&format!("SELECT count(*) FROM {schema}.leases WHERE thread = 'bad' AND holder IS NOT NULL"), &[])
        .await
        .unwrap();
    assert_eq!(leases.get::<_, i64>(0), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_request_ends_a_sleeping_thread_cancelled() {
    let app = naps::graph().app().store(redb());
    app.submit("long-nap", &Nap { sleep_ms: 600_000, ..Nap::default() }).unwrap();
    let (stop, handle) = start(&app, ());
    wait_until("the run parks for its timer", || {
        app.live_runs().unwrap().iter().any(|r| r.wait == RunWait::Timer && r.lease.is_none())
    })
    .await;
    // Nobody runs it: the worker that claims the request resumes it already cancelled.
    assert!(app.cancel_run("long-nap").unwrap());
    wait_until("the run leaves the queue", || app.live_runs().unwrap().is_empty()).await;
    stop.cancel();
    let report = handle.await.unwrap().unwrap();
    assert_eq!((report.sleeping, report.controlled, report.failed), (1, 1, 0), "{report:?}");
    let record = app.thread("long-nap").unwrap().unwrap();
    assert_eq!(record.status, ThreadStatus::Cancelled, "{}", record.detail);
}

/// A pause reaches the running step before it goes to sleep: the thread ends `paused` (its
/// step dropped, to run again when resumed), not asleep, even on a store that refuses to queue
/// anything meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_asked_to_pause_before_it_falls_asleep_is_paused() {
    let mut store = hooked_store::Hooked::new(redb());
    store.before_enqueue = Some(Box::new(|run: &NewRun| {
        Some(agentflow_store::QueueError::AlreadyQueued { thread: format!("{} (refused by the test)", run.thread) })
    }));
    let app = gated_nap::graph().app().store(Arc::new(store) as Arc<dyn Store>);
    app.submit("nap", &Nap { sleep_ms: 600_000, ..Nap::default() }).unwrap();
    let (stop, handle) = start(&app, ());
    wait_until("the first step runs", || AT_NAP_GATE.load(Ordering::SeqCst)).await;
    // The pause is asked while the step runs: it reaches the step before it goes to sleep.
    assert!(app.pause_run("nap").unwrap());
    wait_until("the run is paused", || app.thread("nap").unwrap().is_some_and(|t| t.status == ThreadStatus::Paused))
        .await;
    NAP_GATE.add_permits(1);
    wait_until("the run leaves the queue", || app.live_runs().unwrap().is_empty()).await;
    stop.cancel();
    let report = handle.await.unwrap().unwrap();
    assert_eq!((report.failed, report.controlled), (0, 1), "{report:?}");
}

/// `Store::run_controls`: the requests on the holder's runs, read without writing.
fn controls_are_read_without_a_write(store: &dyn Store) {
    const NOW: u64 = 1_000_000;
    store.enqueue_run(NewRun::new("r1", "g", None, "", NOW)).unwrap();
    store.enqueue_run(NewRun::new("r2", "g", None, "", NOW)).unwrap();
    assert_eq!(store.claim_runs("g", "w1", 1000, NOW, 5).unwrap().len(), 2);
    assert!(store.run_controls("w1", NOW + 1).unwrap().is_empty());
    assert!(store.control_run("r1", agentflow_store::RunControl::Cancel).unwrap());
    assert_eq!(store.run_controls("w1", NOW + 2).unwrap(), [("r1".to_string(), agentflow_store::RunControl::Cancel)]);
    assert!(store.run_controls("w2", NOW + 2).unwrap().is_empty(), "not w2's runs");
    assert!(store.run_controls("w1", NOW + 1000).unwrap().is_empty(), "the lease expired");
    let beats: Vec<Option<u64>> = store.list_runs().unwrap().iter().map(|r| r.heartbeat_at).collect();
    assert_eq!(beats, [Some(NOW), Some(NOW)], "nothing written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redb_control_requests_are_read_without_a_write() {
    let store = redb();
    tokio::task::spawn_blocking(move || controls_are_read_without_a_write(store.as_ref())).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_control_requests_are_read_without_a_write() {
    let Some(url) = pg::pg_url() else { return };
    let store = postgres(&url, "controls");
    tokio::task::spawn_blocking(move || controls_are_read_without_a_write(store.as_ref())).await.unwrap();
}
