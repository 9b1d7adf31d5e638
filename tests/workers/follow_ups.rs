//! Follow-up runs and their multitask strategies, on a redb file: `reject` refuses while the
//! thread's run waits for a person, `enqueue` runs after it ends (two follow-ups in order, and
//! held behind a paused run until it is resumed and ends), `interrupt` cancels a running node and
//! runs the follow-up next (two in the order they came), `rollback` goes back to the checkpoint
//! the cancelled run started from, keeping the history and auditing it (a newer rollback is not
//! undone by an older one); a follow-up that cannot run is refused or audited, and one of a
//! purged thread is refused saying so.

use std::sync::Arc;

use crate::support::job_worker::{LIMIT, completes, start, stop, trail};
use crate::support::stores::open_redb;
use crate::support::temp::temp_dir;
use crate::support::worker_graph::{Job, authorizer, hold_marker, job, wait_until};
use agentflow::WorkerError;
use agentflow::approval::Approver;
use agentflow::persist::{CheckpointSource, ThreadStatus};
use agentflow::prelude::*;
use agentflow::{FollowUpQueued, Multitask, Store};
use agentflow_store::RunWait;
use serde_json::Value;

/// Who the submitted runs act for: the jobs' graph lists a tool the default policy gates.
const OWNER: &str = "agent:jobs";

/// The jobs' app on a new redb file, with its event log.
fn app(tag: &str) -> App<Job, ()> {
    let store = open_redb(temp_dir(tag).join("follow-ups.redb")).expect("open the redb file");
    job::graph().app().store(Arc::new(store) as Arc<dyn Store>).event_log(true)
}

/// Waits until `thread`'s run is parked waiting for its refund's approval.
async fn parks_for_approval(app: &App<Job, ()>, thread: &str) {
    wait_until(&format!("{thread} parks for its approval"), LIMIT, || {
        app.live_runs().unwrap().iter().any(|r| r.thread == thread && r.wait == RunWait::Approval && r.lease.is_none())
    })
    .await;
}

fn approve(app: &App<Job, ()>) {
    let desk = app.approvals(authorizer()).unwrap();
    let pending = desk.pending().unwrap();
    assert_eq!(pending.len(), 1, "{pending:?}");
    desk.approve(&pending[0].id, &Approver::new("alice", ["refund-approver"])).unwrap();
}

fn audit_kinds(app: &App<Job, ()>, thread: &str) -> Vec<String> {
    app.audit_log(thread).unwrap().into_iter().map(|e| e.kind).collect()
}

fn count(kinds: &[String], kind: &str) -> usize {
    kinds.iter().filter(|k| *k == kind).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reject_refuses_while_the_run_waits_for_a_person_and_queues_once_it_ended() {
    let app = app("follow-up-reject");
    app.submit_as("rej", &Job::new(1, true, 0), OWNER).unwrap();
    let (token, handle) = start(&app);
    parks_for_approval(&app, "rej").await;
    let next = Job::update().n(3).pay(false);
    let refused = app.submit_follow_up("rej", &next, Multitask::Reject, "ada").unwrap_err();
    match &refused {
        WorkerError::FollowUpRefused { thread, status, strategy } => {
            assert_eq!((thread.as_str(), status.as_str(), *strategy), ("rej", "interrupted", "reject"));
        }
        other => panic!("refused otherwise: {other}"),
    }
    assert!(refused.to_string().contains("enqueue"), "{refused}");
    assert_eq!(app.backing_store().unwrap().list_follow_ups("rej").unwrap(), vec![], "nothing was queued");

    approve(&app);
    completes(&app, "rej").await;
    assert_eq!(app.submit_follow_up("rej", &next, Multitask::Reject, "ada").unwrap(), FollowUpQueued::Now);
    wait_until("the follow-up runs", LIMIT, || app.state("rej").unwrap().unwrap().state.counter == 3).await;
    completes(&app, "rej").await;
    let report = stop(token, handle).await;
    assert_eq!((report.interrupted, report.completed, report.failed), (1, 2, 0), "{report:?}");
    // The first run's steps, its refund, then the follow-up's two steps from the start node.
    assert_eq!(trail(&app, "rej"), ["a", "a", "b"]);
    let kinds = audit_kinds(&app, "rej");
    assert_eq!(count(&kinds, "run.follow_up"), 1, "{kinds:?}");
    // The restart is a checkpoint of its own after the first run's last, never a rewrite.
    let history = app.history("rej").unwrap();
    let restart = history.iter().find(|c| c.seq > 0 && c.metadata.source == CheckpointSource::Input).unwrap();
    assert_eq!(restart.parent, Some(restart.seq - 1));
    assert_eq!(restart.cursor, ["a"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_runs_each_follow_up_after_the_run_before_it_ended_in_order() {
    let app = app("follow-up-enqueue");
    app.submit_as("enq", &Job::new(1, true, 0), OWNER).unwrap();
    let (token, handle) = start(&app);
    parks_for_approval(&app, "enq").await;
    let first = Job::update().n(3).pay(false).trail(vec!["first-follow-up".into()]);
    let second = Job::update().n(5).trail(vec!["second-follow-up".into()]);
    let queued = app.submit_follow_up("enq", &first, Multitask::Enqueue, "ada").unwrap();
    assert_eq!(queued, FollowUpQueued::Behind { ahead: 0 });
    let queued = app.submit_follow_up("enq", &second, Multitask::default(), "bob").unwrap();
    assert_eq!(queued, FollowUpQueued::Behind { ahead: 1 });
    assert_eq!(app.backing_store().unwrap().list_follow_ups("enq").unwrap().len(), 2);
    // Nothing of them applies while the run waits.
    assert_eq!(app.state("enq").unwrap().unwrap().state.counter, 1);
    assert_eq!(app.thread("enq").unwrap().unwrap().status, ThreadStatus::Interrupted);

    approve(&app);
    wait_until("both follow-ups ran", LIMIT, || app.state("enq").unwrap().unwrap().state.counter == 5).await;
    completes(&app, "enq").await;
    let report = stop(token, handle).await;
    assert_eq!((report.interrupted, report.completed, report.failed), (1, 3, 0), "{report:?}");
    let state = app.state("enq").unwrap().unwrap().state;
    assert!(state.receipt.is_some(), "the first run ended (its refund made) before the follow-ups");
    assert_eq!(trail(&app, "enq"), ["a", "first-follow-up", "a", "b", "second-follow-up", "a", "b"]);
    assert_eq!(count(&audit_kinds(&app, "enq"), "run.follow_up"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identical_follow_ups_submitted_at_once_each_apply() {
    let app = app("follow-up-identical");
    app.submit_as("same", &Job::new(1, false, 0), OWNER).unwrap();
    let again = Job::update().trail(vec!["again".into()]);
    // In a tight loop: the same input, very likely within one millisecond.
    for ahead in 0..3 {
        let queued = app.submit_follow_up("same", &again, Multitask::Enqueue, "ada").unwrap();
        assert_eq!(queued, FollowUpQueued::Behind { ahead });
    }
    let waiting = app.backing_store().unwrap().list_follow_ups("same").unwrap();
    let mut times: Vec<u64> = waiting.iter().map(|r| r.enqueued_at).collect();
    times.dedup();
    assert_eq!(times.len(), 3, "each follow-up is its own: {waiting:?}");
    let (token, handle) = start(&app);
    wait_until("the three follow-ups ran", LIMIT, || count(&audit_kinds(&app, "same"), "run.follow_up") == 3).await;
    completes(&app, "same").await;
    let report = stop(token, handle).await;
    assert_eq!((report.completed, report.failed), (4, 0), "{report:?}");
    assert_eq!(trail(&app, "same"), ["a", "again", "a", "again", "a", "again", "a"]);
}

/// A follow-up that restarted its thread and then parked for an approval, cancelled: the thread
/// ends `cancelled` (its row is still a follow-up's; the restart is not made again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_cancelled_while_it_waits_for_a_person_ends_its_thread_cancelled() {
    let app = app("follow-up-cancel-parked");
    app.submit_as("cx", &Job::new(1, false, 0), OWNER).unwrap();
    let (token, handle) = start(&app);
    completes(&app, "cx").await;
    let next = Job::update().pay(true);
    assert_eq!(app.submit_follow_up("cx", &next, Multitask::Enqueue, OWNER).unwrap(), FollowUpQueued::Now);
    parks_for_approval(&app, "cx").await;
    assert!(app.live_runs().unwrap().iter().any(|r| r.thread == "cx" && r.follow_up));
    assert!(app.cancel_run("cx").unwrap());
    wait_until("the run leaves the queue", LIMIT, || app.live_runs().unwrap().iter().all(|r| r.thread != "cx")).await;
    let report = stop(token, handle).await;
    let record = app.thread("cx").unwrap().unwrap();
    assert_eq!(record.status, ThreadStatus::Cancelled, "{}", record.detail);
    assert_eq!((report.interrupted, report.controlled, report.failed), (1, 1, 0), "{report:?}");
    assert_eq!(count(&audit_kinds(&app, "cx"), "run.follow_up"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupt_cancels_the_running_node_and_runs_the_follow_up_next() {
    let app = app("follow-up-interrupt");
    let marker = hold_marker("follow-up-interrupt");
    // Step `b` (after one step) holds until the run is asked to stop.
    app.submit_as("int", &Job::new(3, false, 0).held_at(1, &marker), OWNER).unwrap();
    let (token, handle) = start(&app);
    wait_until("step b holds", LIMIT, || marker.exists()).await;
    let next = Job::update().n(4).hold(None);
    let queued = app.submit_follow_up("int", &next, Multitask::Interrupt, "ada").unwrap();
    assert_eq!(queued, FollowUpQueued::Behind { ahead: 0 });
    completes(&app, "int").await;
    let report = stop(token, handle).await;
    std::fs::remove_file(&marker).ok();
    assert_eq!((report.controlled, report.completed, report.failed), (1, 1, 0), "{report:?}");
    // The held step never committed (the cancel dropped its node); the follow-up ran from the
    // start node on the state the cancelled run left: one step of it, then three.
    assert_eq!(trail(&app, "int"), ["a", "a", "b", "c"]);
    assert_eq!(app.state("int").unwrap().unwrap().state.counter, 4);
    let kinds = audit_kinds(&app, "int");
    assert_eq!((count(&kinds, "run.cancel_requested"), count(&kinds, "run.follow_up")), (1, 1), "{kinds:?}");
    assert_eq!(count(&kinds, "thread.rolled_back"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_goes_back_to_where_the_cancelled_run_started_and_keeps_its_history() {
    let app = app("follow-up-rollback");
    let marker = hold_marker("follow-up-rollback");
    app.submit_as("rb", &Job::new(3, false, 0).held_at(1, &marker), OWNER).unwrap();
    let (token, handle) = start(&app);
    wait_until("step b holds", LIMIT, || marker.exists()).await;
    let before: Vec<u64> = app.history("rb").unwrap().iter().map(|c| c.seq).collect();
    assert_eq!(before, [0, 1]);
    let next = Job::update().n(2).hold(None);
    let queued = app.submit_follow_up("rb", &next, Multitask::Rollback, "ada").unwrap();
    assert_eq!(queued, FollowUpQueued::Behind { ahead: 0 });
    completes(&app, "rb").await;
    let report = stop(token, handle).await;
    std::fs::remove_file(&marker).ok();
    assert_eq!((report.controlled, report.completed, report.failed), (1, 1, 0), "{report:?}");
    // From the input again (the cancelled run's step is gone from the state): two steps.
    assert_eq!(trail(&app, "rb"), ["a", "b"]);
    assert_eq!(app.state("rb").unwrap().unwrap().state.counter, 2);
    // The history keeps the replaced branch; the restart follows checkpoint 0.
    let history = app.history("rb").unwrap();
    assert!(history.iter().any(|c| c.seq == 1 && c.parent == Some(0)), "{history:?}");
    let restart = history.iter().find(|c| c.seq > 1 && c.metadata.source == CheckpointSource::Input).unwrap();
    assert_eq!(restart.parent, Some(0));
    let audit = app.audit_log("rb").unwrap();
    let rolled: Vec<&Value> = audit.iter().filter(|e| e.kind == "thread.rolled_back").map(|e| &e.detail).collect();
    assert_eq!(rolled.len(), 1, "{audit:?}");
    assert_eq!(rolled[0]["from"], 0);
    assert_eq!(rolled[0]["checkpoint"], restart.seq);
    assert_eq!(rolled[0]["replaced"]["head"], 1);
    // The run it replaced, as the thread's event log named it.
    let events = app.backing_store().unwrap().read_events("rb", None, 100).unwrap().events;
    let first = events.iter().find(|e| e.kind == "run.started").expect("the replaced run's start");
    let first: Value = serde_json::from_slice(&first.data).unwrap();
    assert_eq!(rolled[0]["replaced"]["run"], first["run"]);
    let submitted = audit.iter().rfind(|e| e.kind == "run.submitted").unwrap();
    assert_eq!(
        (submitted.detail["strategy"].as_str(), submitted.detail["fork_from"].as_u64()),
        (Some("rollback"), Some(0))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_of_an_unknown_thread_is_refused_and_the_strategies_read_back_by_name() {
    let app = app("follow-up-unknown");
    let next = Job::update().n(1);
    assert!(matches!(
        app.submit_follow_up("nobody", &next, Multitask::Enqueue, "ada"),
        Err(WorkerError::UnknownThread { .. })
    ));
    // Submitted, no worker started it yet: enqueue waits behind it, interrupt would leave no thread.
    app.submit_as("fresh", &Job::new(1, false, 0), OWNER).unwrap();
    assert!(matches!(
        app.submit_follow_up("fresh", &next, Multitask::Interrupt, "ada"),
        Err(WorkerError::FollowUpRefused { strategy: "interrupt", .. })
    ));
    assert_eq!(
        app.submit_follow_up("fresh", &next, Multitask::Enqueue, "ada").unwrap(),
        FollowUpQueued::Behind { ahead: 0 }
    );
    for strategy in Multitask::ALL {
        assert_eq!(Multitask::parse(strategy.as_str()), Some(strategy));
    }
    assert_eq!(Multitask::parse("queue"), None);
}

/// Waits until `thread`'s run is held behind it (parked `HELD`, no lease).
async fn is_held(app: &App<Job, ()>, thread: &str) {
    wait_until(&format!("{thread}'s run is held"), LIMIT, || {
        app.live_runs().unwrap().iter().any(|r| r.thread == thread && r.wait == RunWait::Held && r.lease.is_none())
    })
    .await;
}

/// A run paused with a follow-up behind it is held, not ended: the follow-up waits (nothing of
/// it applies) until a resume lets the run end, then runs after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_run_holds_its_follow_ups_until_it_is_resumed_and_ends() {
    let app = app("follow-up-paused");
    let marker = hold_marker("follow-up-paused");
    app.submit_as("pz", &Job::new(3, false, 0).held_at(1, &marker), OWNER).unwrap();
    let (token, handle) = start(&app);
    wait_until("step b holds", LIMIT, || marker.exists()).await;
    let next = Job::update().n(4).hold(None).trail(vec!["follow-up".into()]);
    assert_eq!(
        app.submit_follow_up("pz", &next, Multitask::Enqueue, "ada").unwrap(),
        FollowUpQueued::Behind { ahead: 0 }
    );
    assert!(app.pause_run("pz").unwrap());
    is_held(&app, "pz").await;
    assert_eq!(app.thread("pz").unwrap().unwrap().status, ThreadStatus::Paused);
    assert_eq!(app.backing_store().unwrap().list_follow_ups("pz").unwrap().len(), 1, "the follow-up waits");
    assert_eq!(trail(&app, "pz"), ["a"], "nothing of the follow-up applied");
    let refused = app.submit_follow_up("pz", &next, Multitask::Reject, "ada").unwrap_err();
    assert!(matches!(&refused, WorkerError::FollowUpRefused { status, .. } if status == "paused"), "{refused}");

    app.submit_resume("pz").unwrap();
    wait_until("the follow-up ran", LIMIT, || count(&audit_kinds(&app, "pz"), "run.follow_up") == 1).await;
    completes(&app, "pz").await;
    let report = stop(token, handle).await;
    std::fs::remove_file(&marker).ok();
    assert_eq!((report.controlled, report.completed, report.failed), (1, 2, 0), "{report:?}");
    // The paused run went on from its last step and ended; then the follow-up ran.
    assert_eq!(trail(&app, "pz"), ["a", "b", "c", "follow-up", "a"]);
}

/// A follow-up of a thread paused with no run in the queue gets a run held for the thread: it
/// waits for the thread's resume and end, then runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_of_a_thread_waiting_outside_the_queue_waits_for_its_run_to_end() {
    let app = app("follow-up-paused-idle");
    let marker = hold_marker("follow-up-paused-idle");
    app.submit_as("pi", &Job::new(3, false, 0).held_at(1, &marker), OWNER).unwrap();
    let (token, handle) = start(&app);
    wait_until("step b holds", LIMIT, || marker.exists()).await;
    assert!(app.pause_run("pi").unwrap());
    wait_until("the run left the queue, paused", LIMIT, || {
        app.live_runs().unwrap().iter().all(|r| r.thread != "pi")
            && app.thread("pi").unwrap().is_some_and(|t| t.status == ThreadStatus::Paused)
    })
    .await;
    let next = Job::update().n(4).hold(None).trail(vec!["follow-up".into()]);
    assert_eq!(
        app.submit_follow_up("pi", &next, Multitask::Enqueue, "ada").unwrap(),
        FollowUpQueued::Behind { ahead: 0 }
    );
    is_held(&app, "pi").await;
    assert_eq!(trail(&app, "pi"), ["a"], "nothing of the follow-up applied");
    app.submit_resume("pi").unwrap();
    wait_until("the follow-up ran", LIMIT, || count(&audit_kinds(&app, "pi"), "run.follow_up") == 1).await;
    completes(&app, "pi").await;
    stop(token, handle).await;
    std::fs::remove_file(&marker).ok();
    assert_eq!(trail(&app, "pi"), ["a", "b", "c", "follow-up", "a"]);
}

/// Two interrupts in a row run in the order they were submitted, each after the one before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupts_run_in_the_order_they_were_submitted() {
    let app = app("follow-up-two-interrupts");
    let marker = hold_marker("follow-up-two-interrupts");
    app.submit_as("ii", &Job::new(3, false, 0).held_at(1, &marker), OWNER).unwrap();
    let (token, handle) = start(&app);
    wait_until("step b holds", LIMIT, || marker.exists()).await;
    let first = Job::update().n(2).hold(None).trail(vec!["i1".into()]);
    let second = Job::update().n(3).hold(None).trail(vec!["i2".into()]);
    assert_eq!(
        app.submit_follow_up("ii", &first, Multitask::Interrupt, "ada").unwrap(),
        FollowUpQueued::Behind { ahead: 0 }
    );
    // Behind the first, unless the worker claimed the first already (it is then the thread's run).
    let queued = app.submit_follow_up("ii", &second, Multitask::Interrupt, "bob").unwrap();
    assert!(matches!(queued, FollowUpQueued::Behind { ahead: 0 | 1 }), "{queued:?}");
    wait_until("both ran", LIMIT, || count(&audit_kinds(&app, "ii"), "run.follow_up") == 2).await;
    completes(&app, "ii").await;
    stop(token, handle).await;
    std::fs::remove_file(&marker).ok();
    let trail = trail(&app, "ii");
    if queued == (FollowUpQueued::Behind { ahead: 1 }) {
        assert_eq!(trail, ["a", "i1", "a", "i2", "a"]);
    } else {
        // The second interrupted the first's run, which may have ended before its step.
        let i1 = trail.iter().position(|t| t == "i1").expect("the first follow-up applied");
        assert!(trail[..i1] == ["a"] && trail.ends_with(&["i2".to_string(), "a".to_string()]), "{trail:?}");
    }
}

/// Two rollbacks of one run: the older runs first, and the newer, run after it, replaces the
/// older's run too (its point decided at its claim), so the newer's input is the one that stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_rollback_is_not_undone_by_an_older_one() {
    let app = app("follow-up-two-rollbacks");
    let marker = hold_marker("follow-up-two-rollbacks");
    app.submit_as("rr", &Job::new(3, false, 0).held_at(1, &marker), OWNER).unwrap();
    let (token, handle) = start(&app);
    wait_until("step b holds", LIMIT, || marker.exists()).await;
    let older = Job::update().n(1).hold(None).trail(vec!["r1".into()]);
    let newer = Job::update().n(2).hold(None).trail(vec!["r2".into()]);
    app.submit_follow_up("rr", &older, Multitask::Rollback, "ada").unwrap();
    app.submit_follow_up("rr", &newer, Multitask::Rollback, "bob").unwrap();
    wait_until("both ran", LIMIT, || count(&audit_kinds(&app, "rr"), "run.follow_up") == 2).await;
    completes(&app, "rr").await;
    stop(token, handle).await;
    std::fs::remove_file(&marker).ok();
    // Back to the input for each: the newer's run is the thread's state.
    assert_eq!(trail(&app, "rr"), ["r2", "a", "b"]);
    let rolled: Vec<Value> = app
        .audit_log("rr")
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == "thread.rolled_back")
        .map(|e| e.detail["from"].clone())
        .collect();
    assert_eq!(rolled, [0, 0]);
}

/// A follow-up of a thread another graph wrote is refused at submission; one accepted before
/// the thread changed fails at its claim with a `run.follow_up_failed` audit entry saying why,
/// the thread left as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_that_cannot_run_is_refused_or_audited() {
    let app = app("follow-up-other-graph");
    app.submit_as("og", &Job::new(1, false, 0), OWNER).unwrap();
    let (token, handle) = start(&app);
    completes(&app, "og").await;
    stop(token, handle).await;
    let next = Job::update().n(2);
    let hook = "http://127.0.0.1:9/hook";
    let queued = app.submit_follow_up_with_webhook("og", &next, Multitask::Enqueue, "ada", hook).unwrap();
    assert_eq!(queued, FollowUpQueued::Now);
    let store = app.backing_store().unwrap();
    let record = store.thread("og").unwrap().unwrap();
    store.put_graph_description("another-graph", r#"{"id":"billing"}"#).unwrap();
    let other = agentflow::persist::ThreadRecord { graph_fingerprint: "another-graph".into(), ..record };
    store.commit_step(agentflow_store::StepCommit::new(other)).unwrap();
    let refused = app.submit_follow_up("og", &next, Multitask::Enqueue, "ada").unwrap_err();
    assert!(matches!(refused, WorkerError::FollowUpOtherGraph { ref stored, .. } if stored == "another-graph"));

    let (token, handle) = start(&app);
    wait_until("the follow-up left the queue", LIMIT, || app.live_runs().unwrap().iter().all(|r| r.thread != "og"))
        .await;
    stop(token, handle).await;
    let audit = app.audit_log("og").unwrap();
    let failed = audit.iter().find(|e| e.kind == "run.follow_up_failed").expect("the failure is audited");
    assert!(failed.detail["reason"].as_str().unwrap().contains("another graph"), "{:?}", failed.detail);
    // Its webhook says it did not run, not the thread's earlier run's end.
    let deliveries = store.list_webhooks("og").unwrap();
    assert_eq!(deliveries.len(), 1);
    let body: serde_json::Value = serde_json::from_slice(&deliveries[0].payload).unwrap();
    assert_eq!(body["status"], "follow_up_failed", "{body}");
    assert!(body["detail"].as_str().unwrap().contains("another graph"), "{body}");
    assert_eq!(body["values"], serde_json::Value::Null);
    assert_eq!(count(&audit_kinds(&app, "og"), "run.follow_up"), 0);
    assert_eq!(app.state("og").unwrap().unwrap().state.counter, 1, "the thread is left as it was");
}

/// A follow-up cancelled before it ran tells its webhook so, not the thread's earlier run's end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_cancelled_before_it_ran_tells_its_webhook_so() {
    let app = app("follow-up-cancelled-hook");
    app.submit_as("ch", &Job::new(1, false, 0), OWNER).unwrap();
    let (token, handle) = start(&app);
    completes(&app, "ch").await;
    stop(token, handle).await;
    let hook = "http://127.0.0.1:9/hook";
    app.submit_follow_up_with_webhook("ch", &Job::update().n(2), Multitask::Enqueue, "ada", hook).unwrap();
    assert!(app.cancel_run("ch").unwrap());
    let (token, handle) = start(&app);
    wait_until("the follow-up left the queue", LIMIT, || app.live_runs().unwrap().iter().all(|r| r.thread != "ch"))
        .await;
    stop(token, handle).await;
    let deliveries = app.backing_store().unwrap().list_webhooks("ch").unwrap();
    assert_eq!(deliveries.len(), 1);
    let body: serde_json::Value = serde_json::from_slice(&deliveries[0].payload).unwrap();
    assert_eq!(body["status"], "cancelled", "{body}");
    assert_eq!(body["values"], serde_json::Value::Null);
    assert_eq!(app.state("ch").unwrap().unwrap().state.counter, 1, "the thread is left as it was");
}

/// In a rolling deploy a worker of another build of the same version may claim a follow-up a
/// server of the thread's build accepted: it leaves it queued for a worker of that build, as it
/// leaves a resume, rather than drop it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_of_another_build_of_the_same_version_stays_queued() {
    let app = app("follow-up-other-build");
    app.submit_as("ob", &Job::new(1, false, 0), OWNER).unwrap();
    let (token, handle) = start(&app);
    completes(&app, "ob").await;
    stop(token, handle).await;
    app.submit_follow_up("ob", &Job::update().n(2), Multitask::Enqueue, "ada").unwrap();
    // The thread as another build of this version (same graph id, same version) stored it.
    let store = app.backing_store().unwrap();
    let record = store.thread("ob").unwrap().unwrap();
    let other = agentflow::persist::ThreadRecord { graph_fingerprint: "same-version-other-build".into(), ..record };
    store.commit_step(agentflow_store::StepCommit::new(other)).unwrap();

    let (token, handle) = start(&app);
    // Let go for a while: its lease held for the retry's wait (a minute), not a step's.
    let later =
        || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64 + 40_000;
    wait_until("the worker claimed the follow-up and let it go for a while", LIMIT, || {
        app.live_runs()
            .unwrap()
            .iter()
            .any(|r| r.thread == "ob" && r.claims >= 1 && r.lease.as_ref().is_some_and(|l| l.expires_at > later()))
    })
    .await;
    stop(token, handle).await;
    assert!(app.live_runs().unwrap().iter().any(|r| r.thread == "ob" && r.follow_up), "still queued");
    assert_eq!(count(&audit_kinds(&app, "ob"), "run.follow_up_failed"), 0);
    assert_eq!(app.state("ob").unwrap().unwrap().state.counter, 1, "the thread is left as it was");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_of_a_purged_thread_is_refused_saying_so_with_every_strategy() {
    let app = app("follow-up-purged");
    app.submit_as("pur", &Job::new(1, false, 0), OWNER).unwrap();
    let (token, handle) = start(&app);
    completes(&app, "pur").await;
    app.purge_thread("pur", "dpo").unwrap();
    assert_eq!(app.thread("pur").unwrap().unwrap().status, ThreadStatus::Purged);
    for strategy in [Multitask::Enqueue, Multitask::Reject, Multitask::Interrupt, Multitask::Rollback] {
        let refused = app.submit_follow_up("pur", &Job::update().n(2), strategy, "ada").unwrap_err();
        assert!(matches!(&refused, WorkerError::FollowUpPurged { thread } if thread == "pur"), "{refused}");
        assert!(refused.to_string().contains("new thread"), "{refused}");
    }
    let store = app.backing_store().unwrap();
    assert!(store.list_follow_ups("pur").unwrap().is_empty(), "nothing was queued");
    assert!(app.live_runs().unwrap().iter().all(|r| r.thread != "pur"));
    stop(token, handle).await;
}
