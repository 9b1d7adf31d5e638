//! Workers and threads that wait: a run that ends sleeping on a durable timer, a thread that
//! waits in `cx.interrupt` for a value (parked until someone answers), a cancel request that arrives while the worker shuts
//! down, and a claim whose rows do not decode. On `RedbStore`, and on `PostgresStore` where
//! the store's part differs (skipped with one line without `AGENTFLOW_PG_URL`).

use crate::support::hooked_store;
use crate::support::pg;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use agentflow::persist::ThreadStatus;
use agentflow::prelude::*;
use agentflow::{CancellationToken, Store};
use agentflow::{Worker, WorkerError, WorkerReport};
use agentflow_store::{NewRun, PostgresStore, RunWait, Settle};
use serde::{Deserialize, Serialize};

const LIMIT: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
pub struct Nap {
    /// Milliseconds the first step sleeps on a durable timer.
    pub sleep_ms: u64,
    /// Whether the first step waits in `cx.interrupt` instead.
    pub ask: bool,
    #[reduce(add)]
    pub steps: u64,
    pub answer: Option<String>,
}

/// The gated graph's first step waits here until the test opens the gate.
static GATE: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(0);
static AT_GATE: AtomicBool = AtomicBool::new(false);

#[graph(state = Nap, start = first)]
mod naps {
    use super::*;

    #[node(goto = [second], interrupt, sleep)]
    async fn first(s: &Nap, cx: &Ctx<()>) -> Result<Step<Nap>, NodeError> {
        if s.sleep_ms > 0 {
            cx.sleep(Duration::from_millis(s.sleep_ms)).await?;
        }
        let answer = if s.ask { Some(cx.interrupt::<_, String>("name?")?) } else { None };
        Ok(goto!(second, Nap::update().steps(1).answer(answer)))
    }

    #[node(goto = [END])]
    async fn second(_s: &Nap) -> Step<Nap> {
        goto!(END, Nap::update().steps(1))
    }
}

#[graph(state = Nap, start = held)]
mod gated {
    use super::*;

    #[node(goto = [after])]
    async fn held(_s: &Nap) -> Step<Nap> {
        AT_GATE.store(true, Ordering::SeqCst);
        GATE.acquire().await.expect("the gate stays open").forget();
        goto!(after, Nap::update().steps(1))
    }

    #[node(goto = [END])]
    async fn after(_s: &Nap) -> Step<Nap> {
        goto!(END, Nap::update().steps(1))
    }
}

/// The gate of `gated_nap`, apart from `gated`'s: the tests run at the same time.
static NAP_GATE: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(0);
static AT_NAP_GATE: AtomicBool = AtomicBool::new(false);

#[graph(state = Nap, start = held)]
mod gated_nap {
    use super::*;

    /// Waits at the gate, then sleeps on a durable timer.
    #[node(goto = [after], sleep)]
    async fn held(s: &Nap, cx: &Ctx<()>) -> Result<Step<Nap>, NodeError> {
        AT_NAP_GATE.store(true, Ordering::SeqCst);
        NAP_GATE.acquire().await.expect("the gate stays open").forget();
        cx.sleep(Duration::from_millis(s.sleep_ms)).await?;
        Ok(goto!(after, Nap::update().steps(1)))
    }

    #[node(goto = [END])]
    async fn after(_s: &Nap) -> Step<Nap> {
        goto!(END, Nap::update().steps(1))
    }
}

use crate::support::stores::store as redb;

fn postgres(url: &str, tag: &str) -> Arc<dyn Store> {
    let schema = format!("worker_waits_{tag}_{}", std::process::id());
    Arc::new(PostgresStore::builder().schema(&schema).open(url).expect("open the PostgreSQL store"))
}

fn start<D: Send + Sync + 'static>(
    app: &App<Nap, D>,
    deps: D,
) -> (CancellationToken, tokio::task::JoinHandle<Result<WorkerReport, WorkerError>>) {
    let stop = CancellationToken::new();
    let worker = Worker::new(app.clone(), Arc::new(deps)).poll_interval(Duration::from_millis(10));
    (stop.clone(), tokio::spawn(worker.run(stop)))
}

async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !done() {
        assert!(start.elapsed() < LIMIT, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `store` behind a clock for claims that stops at `cap` (unix ms) until the test sets the
/// returned cap to `u64::MAX`: a claim sees no timer and no approval expiry due after `cap`.
/// The claim of a ready row does not look at the time (but for a lease, which the parked runs
/// here have released), so only the claim of a due row is held back: a test checks a parked
/// run, then lets it come due, however slowly it goes.
fn claims_held_at(store: Arc<dyn Store>, cap: u64) -> (Arc<dyn Store>, Arc<AtomicU64>) {
    let cap = Arc::new(AtomicU64::new(cap));
    let mut hooked = hooked_store::Hooked::new(store);
    hooked.claim_clock = Some({
        let cap = Arc::clone(&cap);
        Box::new(move |now: u64| now.min(cap.load(Ordering::SeqCst)))
    });
    (Arc::new(hooked), cap)
}

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

/// Whether thread `thread`'s run is queued, parked for an answer, with no lease held.
fn parked_for_an_answer<D>(app: &App<Nap, D>, thread: &str) -> bool {
    app.live_runs().unwrap().iter().any(|r| r.thread == thread && r.wait == RunWait::Answer && r.lease.is_none())
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

/// A worker parks a thread that waits in `cx.interrupt`; an answer recorded from elsewhere (as
/// the inbox and `agentflow answer` record it, with no graph types) hands it back to the
/// workers, and the worker's resume continues with that answer. No `submit_resume` needed.
async fn an_answer_wakes_the_parked_run(store: Arc<dyn Store>) {
    use agentflow::approval::{ApprovalDesk, Approver, RoleAuthorizer};
    let app = naps::graph().app().store(store.clone());
    app.submit("ask", &Nap { ask: true, ..Nap::default() }).unwrap();
    let (stop, handle) = start(&app, ());
    wait_until("the run parks for its value and lets go of the thread", || {
        parked_for_an_answer(&app, "ask") && app.thread("ask").unwrap().is_some_and(|t| t.lease.is_none())
    })
    .await;
    let refused = app.submit_resume("ask").unwrap_err();
    assert!(matches!(&refused, WorkerError::ValueRequired { .. }), "{refused}");
    // Parked: the worker's polls claim nothing meanwhile.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(app.live_runs().unwrap()[0].claims, 1);

    let desk = ApprovalDesk::for_store(store.clone(), RoleAuthorizer::new());
    let (seq, _) = desk.waiting_interrupt("ask").unwrap();
    desk.answer_interrupt("ask", seq, serde_json::json!("grace"), &Approver::new("ops", ["x"])).unwrap();
    wait_until("the resumed run completes", || app.live_runs().unwrap().is_empty()).await;
    stop.cancel();
    let report = handle.await.unwrap().unwrap();
    assert_eq!((report.claimed, report.interrupted, report.completed), (2, 1, 1), "{report:?}");
    let record = app.thread("ask").unwrap().unwrap();
    assert_eq!(record.status, ThreadStatus::Completed, "{}", record.detail);
    assert_eq!(app.state("ask").unwrap().unwrap().state.answer.as_deref(), Some("grace"));
}

/// A fork of a thread whose worker-queued run waits for a value hands the run back to the
/// workers: the new branch runs (here it asks its question anew, and an answer continues it).
/// The run stayed parked for good before: the fork's branch waits for no answer, so no answer
/// could be recorded to wake it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_of_a_thread_parked_for_a_value_is_run_again_by_the_workers() {
    use agentflow::approval::{ApprovalDesk, Approver, RoleAuthorizer};
    let store = redb();
    let app = naps::graph().app().store(store.clone());
    app.submit("ask-fork", &Nap { ask: true, ..Nap::default() }).unwrap();
    let (stop, handle) = start(&app, ());
    let released = |app: &App<Nap, ()>| app.thread("ask-fork").unwrap().is_some_and(|t| t.lease.is_none());
    wait_until("the run parks for its value", || parked_for_an_answer(&app, "ask-fork") && released(&app)).await;
    let seq = app.history("ask-fork").unwrap().first().expect("a checkpoint").seq;
    app.fork("ask-fork", seq, "ops").unwrap();
    wait_until("a worker runs the forked thread and it asks anew", || {
        app.live_runs().unwrap().iter().any(|r| r.thread == "ask-fork" && r.claims == 2)
            && parked_for_an_answer(&app, "ask-fork")
            && released(&app)
    })
    .await;
    let desk = ApprovalDesk::for_store(store.clone(), RoleAuthorizer::new());
    let (seq, _) = desk.waiting_interrupt("ask-fork").unwrap();
    desk.answer_interrupt("ask-fork", seq, serde_json::json!("grace"), &Approver::new("ops", ["x"])).unwrap();
    wait_until("the resumed run completes", || app.live_runs().unwrap().is_empty()).await;
    stop.cancel();
    handle.await.unwrap().unwrap();
    assert_eq!(app.thread("ask-fork").unwrap().unwrap().status, ThreadStatus::Completed);
    assert_eq!(app.state("ask-fork").unwrap().unwrap().state.answer.as_deref(), Some("grace"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redb_an_answer_wakes_a_run_parked_for_it_and_a_worker_continues_it() {
    an_answer_wakes_the_parked_run(redb()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_an_answer_wakes_a_run_parked_for_it_and_a_worker_continues_it() {
    let Some(url) = pg::pg_url() else { return };
    an_answer_wakes_the_parked_run(postgres(&url, "answer")).await;
}

/// The answer comes in the instant after the run stopped and let go of the thread, before its
/// worker parked the queue row: recording it finds no parked run to wake, so the worker, having
/// parked the row, sees the answer and wakes the run itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_recorded_just_before_the_worker_parks_the_run_still_wakes_it() {
    use agentflow::approval::{ApprovalDesk, Approver, RoleAuthorizer};
    use std::sync::atomic::AtomicU32;
    let inner = redb();
    let answered = Arc::new(AtomicU32::new(0));
    let mut store = hooked_store::Hooked::new(Arc::clone(&inner));
    store.before_settle = Some({
        let (inner, answered) = (Arc::clone(&inner), Arc::clone(&answered));
        Box::new(move |_: &dyn Store, thread: &str, holder: &str, settle: &Settle| {
            if settle.park != Some(RunWait::Answer) || answered.fetch_add(1, Ordering::SeqCst) > 0 {
                return;
            }
            inner.release_lease(thread, holder).unwrap();
            let desk = ApprovalDesk::for_store(Arc::clone(&inner), RoleAuthorizer::new());
            let (seq, _) = desk.waiting_interrupt(thread).unwrap();
            desk.answer_interrupt(thread, seq, serde_json::json!("hopper"), &Approver::new("ops", ["x"])).unwrap();
            let row = inner.list_runs().unwrap().into_iter().find(|r| r.thread == thread).unwrap();
            assert_eq!(row.wait, RunWait::Ready, "not parked yet: the answer had nothing to wake");
        })
    });
    let app = naps::graph().app().store(Arc::new(store) as Arc<dyn Store>);
    app.submit("ask", &Nap { ask: true, ..Nap::default() }).unwrap();
    let (stop, handle) = start(&app, ());
    wait_until("the answered run completes", || {
        app.thread("ask").unwrap().is_some_and(|t| t.status == ThreadStatus::Completed)
            && app.live_runs().unwrap().is_empty()
    })
    .await;
    stop.cancel();
    let report = handle.await.unwrap().unwrap();
    assert_eq!((report.claimed, report.interrupted, report.completed), (2, 1, 1), "{report:?}");
    assert_eq!(answered.load(Ordering::SeqCst), 1);
    assert_eq!(app.state("ask").unwrap().unwrap().state.answer.as_deref(), Some("hopper"));
}

/// An answer of the wrong shape fails the thread where it waits: the answer is spent, the
/// worker keeps the run parked, and a new answer wakes it and continues the thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_failed_by_a_wrong_answer_stays_parked_and_a_new_answer_continues_it() {
    use agentflow::approval::{ApprovalDesk, Approver, RoleAuthorizer};
    let store = redb();
    let app = naps::graph().app().store(store.clone());
    let desk = ApprovalDesk::for_store(store.clone(), RoleAuthorizer::new());
    app.submit("ask", &Nap { ask: true, ..Nap::default() }).unwrap();
    let (stop, handle) = start(&app, ());
    wait_until("the run parks for its value", || parked_for_an_answer(&app, "ask")).await;
    let (seq, _) = desk.waiting_interrupt("ask").unwrap();
    desk.answer_interrupt("ask", seq, serde_json::json!(42), &Approver::new("ops", ["x"])).unwrap();
    wait_until("the failed run parks again", || {
        parked_for_an_answer(&app, "ask") && app.live_runs().unwrap()[0].claims == 2
    })
    .await;
    assert_eq!(app.thread("ask").unwrap().unwrap().status, ThreadStatus::Failed);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(app.live_runs().unwrap()[0].claims, 2, "a failed thread that waits is not claimed");

    let (again, _) = desk.waiting_interrupt("ask").unwrap();
    assert_eq!(again, seq, "it still waits where it was answered");
    desk.answer_interrupt("ask", again, serde_json::json!("lovelace"), &Approver::new("ops", ["x"])).unwrap();
    wait_until("the run completes", || app.live_runs().unwrap().is_empty()).await;
    stop.cancel();
    let report = handle.await.unwrap().unwrap();
    assert_eq!((report.claimed, report.interrupted, report.failed, report.completed), (3, 1, 1, 1), "{report:?}");
    assert_eq!(app.thread("ask").unwrap().unwrap().status, ThreadStatus::Completed);
    assert_eq!(app.state("ask").unwrap().unwrap().state.answer.as_deref(), Some("lovelace"));
}

/// A parked run whose thread was continued directly and then stopped for something else (a
/// breakpoint) no longer waits for an answer: `submit_resume` wakes the parked run (audited)
/// instead of refusing a second queued run, and a worker continues it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_resume_wakes_a_run_parked_for_an_answer_that_no_longer_waits_for_one() {
    let store = redb();
    let app = naps::graph().app().store(store.clone());
    app.submit("ask", &Nap { ask: true, ..Nap::default() }).unwrap();
    let (stop, handle) = start(&app, ());
    wait_until("the run parks for its value", || parked_for_an_answer(&app, "ask")).await;
    stop.cancel();
    handle.await.unwrap().unwrap();

    let run =
        app.runner(&()).thread("ask").interrupt_before(["second"]).resume_with("babbage".to_string()).await.unwrap();
    assert!(matches!(run.outcome, Outcome::Interrupted { .. }), "{}", run.outcome);
    assert_eq!(app.thread("ask").unwrap().unwrap().status, ThreadStatus::Interrupted);
    assert!(parked_for_an_answer(&app, "ask"), "still parked: its thread is interrupted");

    app.submit_resume_as("ask", "ops").unwrap();
    let requested = store.list_audit("ask").unwrap().into_iter().filter(|e| e.kind == "run.resume_requested");
    assert_eq!(requested.map(|e| e.actor).collect::<Vec<_>>(), ["ops"]);
    let (stop, handle) = start(&app, ());
    wait_until("the run completes", || app.live_runs().unwrap().is_empty()).await;
    stop.cancel();
    handle.await.unwrap().unwrap();
    let state = app.state("ask").unwrap().unwrap().state;
    assert_eq!((state.answer.as_deref(), state.steps), (Some("babbage"), 2));
}

// ------------------------------------------------------------ approvals that expire

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
pub struct Refund {
    pub order: String,
    pub receipt: Option<serde_json::Value>,
    pub escalated_to: Option<String>,
}

static REFUNDS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

#[derive(Deserialize, schemars::JsonSchema)]
pub struct RefundArgs {
    order_id: String,
}

/// Refunds an order. Irreversible, so the default policy asks a human first.
#[tool(risk = irreversible)]
async fn issue_refund(args: RefundArgs) -> Result<serde_json::Value, ToolError> {
    REFUNDS.fetch_add(1, Ordering::SeqCst);
    Ok(serde_json::json!({ "refunded": args.order_id }))
}

#[graph(state = Refund, start = refund)]
mod refunding {
    use super::*;

    /// Asks for the refund; when nobody decided in time, escalates.
    #[node(goto = [escalate, END], tools = [issue_refund])]
    async fn refund(s: &Refund, cx: &Ctx<()>) -> Result<Step<Refund>, NodeError> {
        let obs = cx.run_tool(issue_refund, serde_json::json!({ "order_id": s.order })).await?;
        if obs.code() == Some(agentflow::tool::Code::ApprovalExpired) {
            return Ok(goto!(escalate));
        }
        Ok(goto!(END, Refund::update().receipt(Some(obs.body))))
    }

    #[node(goto = [END])]
    async fn escalate(_s: &Refund) -> Step<Refund> {
        goto!(END, Refund::update().escalated_to(Some("on-call manager".to_string())))
    }
}

/// Nobody decides and no scheduler runs: the worker claims the parked run at the approval's
/// expiry, the call resolves as `APPROVAL_EXPIRED` and the node escalates; the refund never ran.
async fn an_expiring_approval_is_claimed_when_it_expires(store: Arc<dyn Store>, thread: &str) {
    const TTL_MS: u64 = 800;
    // Until the checks below are made, no claim sees the approval expired: it expires after the cap.
    let (hooked, cap) = claims_held_at(Arc::clone(&store), agentflow::timer::now_ms() + TTL_MS - 1);
    let app = refunding::graph().app().store(hooked).approval_ttl(Duration::from_millis(TTL_MS));
    app.submit_as(thread, &Refund { order: format!("{thread}-order"), ..Refund::default() }, "support-bot").unwrap();
    let stop = CancellationToken::new();
    let worker = Worker::new(app.clone(), Arc::new(())).poll_interval(Duration::from_millis(10));
    let handle = tokio::spawn(worker.run(stop.clone()));
    wait_until("the run parks for its approval", || {
        app.live_runs().unwrap().iter().any(|r| r.thread == thread && r.wait == RunWait::Approval && r.lease.is_none())
    })
    .await;
    let approvals = store.list_approvals(thread).unwrap();
    assert_eq!(approvals.len(), 1, "{approvals:?}");
    let expires_at = approvals[0].expires_at;
    assert_eq!(store.thread_timer(thread).unwrap(), Some(expires_at));
    cap.store(u64::MAX, Ordering::SeqCst);
    wait_until("the run leaves the queue", || app.live_runs().unwrap().iter().all(|r| r.thread != thread)).await;
    stop.cancel();
    let report = handle.await.unwrap().unwrap();
    assert!(agentflow::timer::now_ms() >= expires_at);
    let record = app.thread(thread).unwrap().unwrap();
    assert_eq!(record.status, ThreadStatus::Completed, "{}", record.detail);
    let state = app.state(thread).unwrap().unwrap().state;
    assert_eq!((state.escalated_to.as_deref(), state.receipt), (Some("on-call manager"), None));
    let approval = store.approval(&approvals[0].id).unwrap().unwrap();
    assert_eq!(approval.status, agentflow_store::ApprovalStatus::Expired);
    assert_eq!((report.claimed, report.interrupted, report.completed, report.failed), (2, 1, 1, 0), "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redb_a_run_parked_for_an_approval_is_claimed_when_the_approval_expires() {
    an_expiring_approval_is_claimed_when_it_expires(redb(), "expiring-redb").await;
    assert_eq!(REFUNDS.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_run_parked_for_an_approval_is_claimed_when_the_approval_expires() {
    let Some(url) = pg::pg_url() else { return };
    an_expiring_approval_is_claimed_when_it_expires(postgres(&url, "expiry"), "expiring-pg").await;
    assert_eq!(REFUNDS.load(Ordering::SeqCst), 0);
}

/// A worker-queued run parked for its approval, beside an `OUTCOME_UNKNOWN` record of the same
/// thread (a call of the branch cut off earlier): forked, the thread runs its new branch afresh.
/// The fork cancels the open request and hands the parked run back to the workers: the record
/// left for a human no longer keeps it parked (it did, for good, while nothing settled it). The
/// new branch asks for its own approval; the record still waits for a human.
async fn a_forked_thread_is_not_held_by_its_old_branchs_unknown_outcome(store: Arc<dyn Store>, thread: &str) {
    use agentflow_store::ApprovalStatus;

    let app = refunding::graph().app().store(Arc::clone(&store));
    let (stop, handle) = parked_for_its_approval(&app, thread, &format!("{thread}-order")).await;
    let parked = || parked_on_approvals(&app, thread);
    let (first, unknown) = asked_beside_an_unknown_outcome(&*store, thread);

    let seq = app.history(thread).unwrap().first().expect("a checkpoint").seq;
    app.fork(thread, seq, "ops").unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let asked_anew = loop {
        let asked: Vec<_> = store
            .list_approvals(thread)
            .unwrap()
            .into_iter()
            .filter(|a| a.status == ApprovalStatus::Pending && a.id != first.id)
            .collect();
        if !asked.is_empty() {
            break asked;
        }
        assert!(std::time::Instant::now() < deadline, "no worker ran the forked thread: {:?}", app.live_runs());
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(asked_anew.len(), 1, "{asked_anew:?}");
    wait_until("the new branch parks for its own approval", parked).await;
    stop.cancel();
    handle.await.unwrap().unwrap();
    assert_eq!(store.approval(&first.id).unwrap().unwrap().status, ApprovalStatus::Cancelled);
    assert_eq!(store.approval(&unknown.id).unwrap().unwrap().status, ApprovalStatus::OutcomeUnknown);
    assert_eq!(REFUNDS.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redb_a_forked_thread_is_not_held_by_its_old_branchs_unknown_outcome() {
    a_forked_thread_is_not_held_by_its_old_branchs_unknown_outcome(redb(), "forked-redb").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_forked_thread_is_not_held_by_its_old_branchs_unknown_outcome() {
    let Some(url) = pg::pg_url() else { return };
    a_forked_thread_is_not_held_by_its_old_branchs_unknown_outcome(postgres(&url, "forked"), "forked-pg").await;
}

/// The orders `pay_out` paid, one entry per payment.
static PAID: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// Pays an order out. Irreversible, so the default policy asks a human first.
#[tool(risk = irreversible)]
async fn pay_out(args: RefundArgs) -> Result<serde_json::Value, ToolError> {
    PAID.lock().unwrap().push(args.order_id.clone());
    Ok(serde_json::json!({ "paid": args.order_id }))
}

#[graph(state = Refund, start = pay)]
mod paying {
    use super::*;

    #[node(goto = [END], tools = [pay_out])]
    async fn pay(s: &Refund, cx: &Ctx<()>) -> Result<Step<Refund>, NodeError> {
        let obs = cx.run_tool(pay_out, serde_json::json!({ "order_id": s.order })).await?;
        Ok(goto!(END, Refund::update().receipt(Some(obs.body))))
    }
}

/// A run parked for its approval is claimed as soon as that approval is decided, even when the
/// thread holds another record still waiting for a human that the run does not wait on (an
/// outcome left unknown by an earlier step, to settle). It waited until the approval's expiry
/// before, which then refused the approved call as expired.
async fn a_decided_approval_wakes_its_run_past_an_unrelated_waiting_record(store: Arc<dyn Store>, thread: &str) {
    use agentflow::approval::{ApprovalDesk, Approver, RoleAuthorizer};
    use agentflow::tool::Risk;
    use agentflow_store::ApprovalStatus;

    let app = paying::graph().app().store(Arc::clone(&store));
    let order = format!("{thread}-order");
    let (stop, handle) = parked_for_its_approval(&app, thread, &order).await;
    let (asked, unrelated) = asked_beside_an_unknown_outcome(&*store, thread);
    let desk = ApprovalDesk::for_store(Arc::clone(&store), RoleAuthorizer::new().role_for(Risk::Irreversible, "ops"));
    desk.approve(&asked.id, &Approver::new("alice", ["ops"])).unwrap();
    wait_until("the approved run completes", || app.live_runs().unwrap().iter().all(|r| r.thread != thread)).await;
    stop.cancel();
    handle.await.unwrap().unwrap();
    let state = app.state(thread).unwrap().unwrap().state;
    assert_eq!(state.receipt, Some(serde_json::json!({ "ok": true, "result": { "paid": order } })));
    assert_eq!(PAID.lock().unwrap().iter().filter(|o| **o == order).count(), 1);
    assert_eq!(store.approval(&unrelated.id).unwrap().unwrap().status, ApprovalStatus::OutcomeUnknown);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redb_a_decided_approval_wakes_its_run_past_an_unrelated_waiting_record() {
    a_decided_approval_wakes_its_run_past_an_unrelated_waiting_record(redb(), "unrelated-redb").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_decided_approval_wakes_its_run_past_an_unrelated_waiting_record() {
    let Some(url) = pg::pg_url() else { return };
    a_decided_approval_wakes_its_run_past_an_unrelated_waiting_record(postgres(&url, "unrelated"), "unrelated-pg")
        .await;
}

/// The one request thread `thread` waits on, and an `OUTCOME_UNKNOWN` record stored beside it
/// (an earlier call cut off mid-way, left for a human to settle) that the run does not wait on.
fn asked_beside_an_unknown_outcome(
    store: &dyn Store,
    thread: &str,
) -> (agentflow_store::ApprovalRecord, agentflow_store::ApprovalRecord) {
    let asked = store.list_approvals(thread).unwrap();
    assert_eq!(asked.len(), 1, "{asked:?}");
    let now = agentflow::timer::now_ms();
    let unknown = agentflow_store::ApprovalRecord {
        id: format!("unk-{thread}"),
        status: agentflow_store::ApprovalStatus::OutcomeUnknown,
        reason: "an earlier call was cut off mid-way".into(),
        created_at: now,
        updated_at: now,
        expires_at: now + 3_600_000,
        ..asked[0].clone()
    };
    store.put_approval(unknown.clone(), "agentflow").unwrap();
    (asked.into_iter().next().unwrap(), unknown)
}

/// Whether thread `thread`'s run is queued, parked for approvals, with no lease held.
fn parked_on_approvals(app: &App<Refund, ()>, thread: &str) -> bool {
    app.live_runs().unwrap().iter().any(|r| r.thread == thread && r.wait == RunWait::Approval && r.lease.is_none())
}

/// Submits a refund of `order` as thread `thread` and starts a worker, which runs it until it
/// parks for its approval; returns the worker's stop token and task.
async fn parked_for_its_approval(
    app: &App<Refund, ()>,
    thread: &str,
    order: &str,
) -> (CancellationToken, tokio::task::JoinHandle<Result<WorkerReport, WorkerError>>) {
    app.submit_as(thread, &Refund { order: order.to_string(), ..Refund::default() }, "support-bot").unwrap();
    let stop = CancellationToken::new();
    let worker = Worker::new(app.clone(), Arc::new(())).poll_interval(Duration::from_millis(10));
    let handle = tokio::spawn(worker.run(stop.clone()));
    wait_until("the run parks for its approval", || parked_on_approvals(app, thread)).await;
    (stop, handle)
}

/// A cancel asked in the instant after the run stopped to wait for its value, before its worker
/// parked the queue row: the worker never saw it, so the row stays claimable and the next claim
/// ends the thread cancelled (the parked row used to drop the request: the cancel was reported
/// as set, and the thread kept waiting, out of the queue).
async fn a_cancel_asked_as_the_run_parks_is_not_lost(inner: Arc<dyn Store>) {
    let asked = Arc::new(AtomicBool::new(false));
    let mut store = hooked_store::Hooked::new(Arc::clone(&inner));
    store.before_settle = Some({
        let (inner, asked) = (Arc::clone(&inner), Arc::clone(&asked));
        Box::new(move |_: &dyn Store, thread: &str, _: &str, settle: &Settle| {
            if settle.park != Some(RunWait::Answer) || asked.swap(true, Ordering::SeqCst) {
                return;
            }
            let controller = naps::graph().app().store(Arc::clone(&inner));
            assert!(controller.cancel_run(thread).unwrap(), "queued: the request is set");
        })
    });
    let app = naps::graph().app().store(Arc::new(store) as Arc<dyn Store>);
    app.submit("ask", &Nap { ask: true, ..Nap::default() }).unwrap();
    let (stop, handle) = start(&app, ());
    wait_until("the run leaves the queue", || asked.load(Ordering::SeqCst) && app.live_runs().unwrap().is_empty())
        .await;
    stop.cancel();
    let report = handle.await.unwrap().unwrap();
    let record = app.thread("ask").unwrap().unwrap();
    assert_eq!(record.status, ThreadStatus::Cancelled, "the cancel was kept: {}", record.detail);
    assert_eq!((report.claimed, report.interrupted, report.controlled), (2, 1, 1), "{report:?}");
    let kinds: Vec<String> = inner.list_audit("ask").unwrap().into_iter().map(|e| e.kind).collect();
    assert!(kinds.iter().any(|k| k == "run.cancel_requested"), "{kinds:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redb_a_cancel_asked_as_the_run_parks_is_not_lost() {
    a_cancel_asked_as_the_run_parks_is_not_lost(redb()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_cancel_asked_as_the_run_parks_is_not_lost() {
    let Some(url) = pg::pg_url() else { return };
    a_cancel_asked_as_the_run_parks_is_not_lost(postgres(&url, "cancel_parks")).await;
}

/// An answer and the wake of the run parked for it are one write: a process that dies right
/// after recording the answer leaves no run parked beside it for good. (The answer was
/// appended, then the run woken in a second write: dying in between left the run parked with
/// its answer recorded, and answering again was refused as already answered.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_and_the_wake_of_its_parked_run_are_one_write() {
    use agentflow::approval::{ApprovalDesk, Approver, RoleAuthorizer};
    let mut store = hooked_store::Hooked::new(redb());
    store.before_wake =
        Some(Box::new(|thread: &str, wait: RunWait| panic!("the process dies before it wakes `{thread}` ({wait:?})")));
    let store: Arc<dyn Store> = Arc::new(store);
    let app = naps::graph().app().store(Arc::clone(&store));
    app.submit("ask", &Nap { ask: true, ..Nap::default() }).unwrap();
    let (stop, handle) = start(&app, ());
    wait_until("the run parks for its value", || parked_for_an_answer(&app, "ask")).await;
    let desk = ApprovalDesk::for_store(Arc::clone(&store), RoleAuthorizer::new());
    let (seq, _) = desk.waiting_interrupt("ask").unwrap();
    let by = Approver::new("ops", ["x"]);
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        desk.answer_interrupt("ask", seq, serde_json::json!("ada"), &by)
    }));
    wait_until("the answered run completes", || app.live_runs().unwrap().is_empty()).await;
    stop.cancel();
    let report = handle.await.unwrap().unwrap();
    assert_eq!((report.claimed, report.interrupted, report.completed), (2, 1, 1), "{report:?}");
    assert_eq!(app.state("ask").unwrap().unwrap().state.answer.as_deref(), Some("ada"));
}

/// A cancel asked of a run parked for a value: the worker that claims the request ends the
/// thread cancelled (nobody gives it its value any more).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_request_ends_a_thread_waiting_for_a_value_cancelled() {
    let app = naps::graph().app().store(redb());
    app.submit("ask", &Nap { ask: true, ..Nap::default() }).unwrap();
    let (stop, handle) = start(&app, ());
    wait_until("the run parks for its value", || parked_for_an_answer(&app, "ask")).await;
    assert!(app.cancel_run("ask").unwrap());
    wait_until("the run leaves the queue", || app.live_runs().unwrap().is_empty()).await;
    stop.cancel();
    let report = handle.await.unwrap().unwrap();
    let record = app.thread("ask").unwrap().unwrap();
    assert_eq!(record.status, ThreadStatus::Cancelled, "{}", record.detail);
    assert_eq!((report.interrupted, report.controlled, report.failed), (1, 1, 0), "{report:?}");
}
