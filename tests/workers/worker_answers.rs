//! Workers and threads parked for an answer: an answer recorded from elsewhere wakes the parked
//! run (in the same write), a fork of a parked thread, a wrong answer, and a cancel request.

use crate::support::hooked_store;
use crate::support::pg;
use crate::support::stores::store as redb;
use crate::worker_naps::*;
use agentflow::Store;
use agentflow::WorkerError;
use agentflow::persist::ThreadStatus;
use agentflow::prelude::*;
use agentflow_store::{RunWait, Settle};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

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
