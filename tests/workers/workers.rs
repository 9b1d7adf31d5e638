//! Workers in one process: runs submitted to the store's queue are claimed and run by
//! `Worker`s, on `RedbStore` (its one-process rule) and on `PostgresStore` (skipped with one
//! line without `AGENTFLOW_PG_URL`). A parked approval is resumed once decided, a cancel
//! request stops a running thread at a step boundary, and a worker's graceful shutdown leaves
//! its runs to another worker.

use std::sync::Arc;
use std::time::Duration;

use crate::support::pg::pg_url;
use crate::support::worker_graph::{
    Job, assert_linear_history, authorizer, fresh_schema, hold_marker, job, wait_until,
};
use agentflow::approval::Approver;
use agentflow::persist::ThreadStatus;
use agentflow::prelude::*;
use agentflow::tool::RiskPolicy;
use agentflow::{CancellationToken, RedbStore, Store};
use agentflow::{Worker, WorkerError, WorkerReport};
use agentflow_store::{ApprovalStatus, PostgresStore, QueueError, RunWait};

const LIMIT: Duration = Duration::from_secs(60);
/// Who the submitted runs act for: the jobs' graph lists a tool the default policy gates.
const OWNER: &str = "agent:jobs";

fn redb_app() -> App<Job, ()> {
    job::graph().app().store(Arc::new(RedbStore::in_memory().expect("in-memory store")))
}

fn pg_app(url: &str, schema: &str) -> App<Job, ()> {
    let store = PostgresStore::builder().schema(schema).open(url).expect("open the PostgreSQL store");
    job::graph().app().store(Arc::new(store) as Arc<dyn Store>)
}

fn start(
    app: &App<Job, ()>,
    n: usize,
) -> (CancellationToken, tokio::task::JoinHandle<Result<WorkerReport, WorkerError>>) {
    let stop = CancellationToken::new();
    let worker = Worker::new(app.clone(), Arc::new(())).concurrency(n).poll_interval(Duration::from_millis(10));
    (stop.clone(), tokio::spawn(worker.run(stop)))
}

/// Checks a finished job: every step applied once, in order, its effect journaled once.
fn assert_done(app: &App<Job, ()>, thread: &str, n: u64) {
    let record = app.thread(thread).unwrap().unwrap();
    assert_eq!(record.status, ThreadStatus::Completed, "{thread}: {}", record.detail);
    let state = app.state(thread).unwrap().unwrap().state;
    assert_eq!(state.counter, n, "{thread}");
    let keys: Vec<String> =
        state.trail.iter().map(|t| t.rsplit(':').next().unwrap().split('@').next().unwrap().to_string()).collect();
    let expected: Vec<String> = (0..n).map(|i| format!("step{i}")).collect();
    assert_eq!(keys, expected, "{thread}: one step per effect, in order");
    assert_eq!(assert_linear_history(app.backing_store().unwrap().as_ref(), thread), n as usize + 1);
}

async fn many_threads_complete(app: App<Job, ()>, workers: usize) {
    for i in 0..24 {
        app.submit_as(&format!("t{i:02}"), &Job::new(3 + i % 4, false, 0), OWNER).unwrap();
    }
    let err = app.submit_as("t00", &Job::new(1, false, 0), OWNER).unwrap_err();
    assert!(matches!(err, WorkerError::Queue(QueueError::AlreadyQueued { .. })), "{err}");
    let pool: Vec<_> = (0..workers).map(|_| start(&app, 4)).collect();
    wait_until("the queue is empty", LIMIT, || app.live_runs().unwrap().is_empty()).await;
    let mut total = WorkerReport::default();
    for (stop, handle) in pool {
        stop.cancel();
        let r = handle.await.unwrap().unwrap();
        total.claimed += r.claimed;
        total.completed += r.completed;
    }
    assert_eq!((total.claimed, total.completed), (24, 24), "each run claimed once, by one worker");
    for i in 0..24 {
        assert_done(&app, &format!("t{i:02}"), 3 + i % 4);
    }
    let err = app.submit_as("t00", &Job::new(1, false, 0), OWNER).unwrap_err();
    assert!(matches!(err, WorkerError::ThreadExists { .. }), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redb_workers_in_one_process_run_every_submitted_thread_once() {
    many_threads_complete(redb_app(), 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_workers_on_separate_store_instances_run_every_submitted_thread_once() {
    let Some(url) = pg_url() else { return };
    let schema = fresh_schema("many");
    // The submitter and the checks use one instance; each worker another (its own pool).
    let app = pg_app(&url, &schema);
    for i in 0..24 {
        app.submit_as(&format!("t{i:02}"), &Job::new(3 + i % 4, false, 0), OWNER).unwrap();
    }
    let pool: Vec<_> = (0..2).map(|_| start(&pg_app(&url, &schema), 4)).collect();
    wait_until("the queue is empty", LIMIT, || app.live_runs().unwrap().is_empty()).await;
    let mut claimed = 0;
    for (stop, handle) in pool {
        stop.cancel();
        claimed += handle.await.unwrap().unwrap().claimed;
    }
    assert_eq!(claimed, 24);
    for i in 0..24 {
        assert_done(&app, &format!("t{i:02}"), 3 + i % 4);
    }
}

/// README: a worker runs the queued runs "up to `.concurrency(n)` at a time": with six runs of
/// slow steps queued, a worker of concurrency 2 holds two of them at once, never more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_runs_at_most_its_concurrency_at_a_time() {
    let app = redb_app();
    for i in 0..6 {
        app.submit_as(&format!("c{i}"), &Job::new(3, false, 60), OWNER).unwrap();
    }
    let (stop, handle) = start(&app, 2);
    let mut most = 0;
    let began = std::time::Instant::now();
    loop {
        let runs = app.live_runs().unwrap();
        if runs.is_empty() {
            break;
        }
        most = most.max(runs.iter().filter(|r| r.lease.is_some()).count());
        assert!(began.elapsed() < LIMIT, "timed out waiting for the queue to empty");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.cancel();
    let report = handle.await.unwrap().unwrap();
    assert_eq!((report.claimed, report.completed), (6, 6), "{report:?}");
    assert_eq!(most, 2, "runs held at once by a worker of concurrency 2");
}

async fn approval_parks_then_resumes(app: App<Job, ()>, decider: App<Job, ()>) {
    // A call that needs an approval is requested for the thread's owner.
    app.submit_as("pay-1", &Job::new(2, true, 0), "agent:refund-bot").unwrap();
    let (stop, handle) = start(&app, 2);
    wait_until("the run parks for its approval", LIMIT, || {
        app.live_runs().unwrap().iter().any(|r| r.wait == RunWait::Approval && r.lease.is_none())
    })
    .await;
    assert_eq!(app.thread("pay-1").unwrap().unwrap().status, ThreadStatus::Interrupted);
    // Decided through another handle (another process for PostgreSQL).
    let desk = decider.approvals(authorizer()).unwrap();
    let pending = desk.pending().unwrap();
    assert_eq!(pending.len(), 1, "{pending:?}");
    desk.approve(&pending[0].id, &Approver::new("alice", ["refund-approver"])).unwrap();
    wait_until("the run completes", LIMIT, || app.live_runs().unwrap().is_empty()).await;
    stop.cancel();
    let report = handle.await.unwrap().unwrap();
    assert_eq!((report.claimed, report.interrupted, report.completed), (2, 1, 1), "{report:?}");
    let state = app.state("pay-1").unwrap().unwrap().state;
    assert_eq!(state.receipt.unwrap()["result"]["refunded"], 10);
    assert_eq!(desk.get(&pending[0].id).unwrap().unwrap().status, ApprovalStatus::Succeeded);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redb_a_parked_approval_is_claimed_again_once_decided() {
    let app = redb_app();
    approval_parks_then_resumes(app.clone(), app).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_an_approval_decided_on_another_store_instance_resumes_the_parked_run() {
    let Some(url) = pg_url() else { return };
    let schema = fresh_schema("approval");
    approval_parks_then_resumes(pg_app(&url, &schema), pg_app(&url, &schema)).await;
}

async fn cancel_stops_at_a_step_boundary(app: App<Job, ()>, controller: App<Job, ()>) {
    // 10 000 steps of 2 ms: it is still running when cancelled.
    app.submit_as("long", &Job::new(10_000, false, 2), OWNER).unwrap();
    let (stop, handle) = start(&app, 1);
    wait_until("a few steps ran", LIMIT, || app.history("long").map(|h| h.len() > 3).unwrap_or(false)).await;
    let live = controller.live_runs().unwrap();
    assert_eq!(live.len(), 1);
    let worker = live[0].holder.clone().expect("claimed");
    assert_eq!(live[0].lease.as_ref().map(|l| &l.holder), Some(&worker), "the worker holds the lease");
    assert!(live[0].heartbeat_at.is_some());
    assert!(controller.cancel_run("long").unwrap());
    wait_until("the run leaves the queue", LIMIT, || app.live_runs().unwrap().is_empty()).await;
    stop.cancel();
    let report = handle.await.unwrap().unwrap();
    assert_eq!(report.controlled, 1, "{report:?}");
    let record = app.thread("long").unwrap().unwrap();
    assert_eq!(record.status, ThreadStatus::Cancelled);
    let state = app.state("long").unwrap().unwrap().state;
    assert!(state.counter < 10_000);
    // The last checkpoint is a whole step: its count matches its history.
    assert_eq!(assert_linear_history(app.backing_store().unwrap().as_ref(), "long") as u64, state.counter + 1);
    assert!(!controller.cancel_run("long").unwrap(), "no longer queued");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redb_cancel_request_stops_a_running_thread_at_a_step_boundary() {
    let app = redb_app();
    cancel_stops_at_a_step_boundary(app.clone(), app).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_cancel_request_from_another_store_instance_stops_a_running_thread() {
    let Some(url) = pg_url() else { return };
    let schema = fresh_schema("cancel");
    cancel_stops_at_a_step_boundary(pg_app(&url, &schema), pg_app(&url, &schema)).await;
}

async fn pause_then_resume(app: App<Job, ()>, controller: App<Job, ()>) {
    let paused = |app: &App<Job, ()>| -> Vec<String> {
        let threads = app.backing_store().unwrap().list_threads().unwrap();
        threads.into_iter().filter(|t| t.status == ThreadStatus::Paused).map(|t| t.id).collect()
    };
    // 40 steps of 5 ms, the fourth held until the run is asked to stop: still running when
    // paused, however slow the machine.
    let marker = hold_marker("pause");
    app.submit_as("long", &Job::new(40, false, 5).held_at(3, &marker), OWNER).unwrap();
    let (stop, handle) = start(&app, 2);
    wait_until("the fourth step runs", LIMIT, || marker.exists()).await;
    assert!(controller.pause_run("long").unwrap());
    wait_until("the run leaves the queue", LIMIT, || app.live_runs().unwrap().is_empty()).await;
    let record = app.thread("long").unwrap().unwrap();
    assert_eq!(record.status, ThreadStatus::Paused, "{}", record.detail);
    assert_eq!(paused(&controller), ["long"], "listed as paused");
    let state = app.state("long").unwrap().unwrap().state;
    assert_eq!(state.counter, 3, "paused inside the step it was asked in: the steps before it kept, that one dropped");
    assert_eq!(assert_linear_history(app.backing_store().unwrap().as_ref(), "long") as u64, state.counter + 1);

    // A run paused before any worker claimed it is created and paused before its first step.
    stop.cancel();
    let report = handle.await.unwrap().unwrap();
    assert_eq!((report.claimed, report.controlled), (1, 1), "{report:?}");
    app.submit_as("queued", &Job::new(5, false, 0), OWNER).unwrap();
    assert!(controller.pause_run("queued").unwrap());
    let (stop, handle) = start(&app, 2);
    wait_until("the paused run leaves the queue", LIMIT, || app.live_runs().unwrap().is_empty()).await;
    assert_eq!(app.thread("queued").unwrap().unwrap().status, ThreadStatus::Paused);
    assert_eq!(app.state("queued").unwrap().unwrap().state.counter, 0);
    assert_eq!(paused(&controller), ["long", "queued"]);

    // Resumed from any process: each continues with its next step, none lost or run twice.
    controller.submit_resume("long").unwrap();
    controller.submit_resume("queued").unwrap();
    wait_until("both complete", LIMIT, || app.live_runs().unwrap().is_empty()).await;
    stop.cancel();
    let report = handle.await.unwrap().unwrap();
    assert_eq!((report.claimed, report.controlled, report.completed), (3, 1, 2), "{report:?}");
    assert_done(&app, "long", 40);
    assert_done(&app, "queued", 5);
    assert!(paused(&controller).is_empty());
    let _ = std::fs::remove_file(&marker);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redb_a_paused_thread_is_listed_as_paused_and_resumes_where_it_stopped() {
    let app = redb_app();
    pause_then_resume(app.clone(), app).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_thread_paused_from_another_store_instance_resumes_where_it_stopped() {
    let Some(url) = pg_url() else { return };
    let schema = fresh_schema("pause");
    pause_then_resume(pg_app(&url, &schema), pg_app(&url, &schema)).await;
}

/// The `run.*` entries of `thread`'s audit log: `(kind, actor)`.
fn controls_audited(app: &App<Job, ()>, thread: &str) -> Vec<(String, String)> {
    let log = app.audit_log(thread).unwrap();
    log.into_iter().filter(|e| e.kind.starts_with("run.")).map(|e| (e.kind, e.actor)).collect()
}

async fn controls_are_audited(app: App<Job, ()>, controller: App<Job, ()>) {
    // The jobs here never refund: a policy that gates nothing lets them be submitted without
    // an owner, as the last part does.
    let (app, controller) = (app.policy(RiskPolicy::allow_all()), controller.policy(RiskPolicy::allow_all()));
    let pair = |kind: &str, actor: &str| (kind.to_string(), actor.to_string());
    // Paused before any worker runs it, resumed, then cancelled while it runs: each request
    // names who asked, in order.
    app.submit_as("audited", &Job::new(10_000, false, 2), "alice").unwrap();
    assert!(controller.pause_run_as("audited", "bob").unwrap());
    let (stop, handle) = start(&app, 1);
    wait_until("the paused run leaves the queue", LIMIT, || app.live_runs().unwrap().is_empty()).await;
    controller.submit_resume_as("audited", "carol").unwrap();
    wait_until("it runs again", LIMIT, || app.history("audited").map(|h| h.len() > 3).unwrap_or(false)).await;
    assert!(controller.cancel_run_as("audited", "dave").unwrap());
    wait_until("the run leaves the queue", LIMIT, || app.live_runs().unwrap().is_empty()).await;
    // A request for a thread that is not queued changes nothing and is not audited.
    assert!(!controller.cancel_run_as("audited", "erin").unwrap());
    assert!(!controller.pause_run_as("audited", "erin").unwrap());
    assert_eq!(
        controls_audited(&controller, "audited"),
        [
            pair("run.submitted", "alice"),
            pair("run.pause_requested", "bob"),
            pair("run.resume_requested", "carol"),
            pair("run.cancel_requested", "dave"),
        ]
    );
    let details: Vec<_> = controller.audit_log("audited").unwrap().into_iter().map(|e| e.detail).collect();
    assert_eq!(details[1]["control"], "PAUSE");
    assert_eq!(details[2]["status"], "paused");
    assert_eq!(details[3]["control"], "CANCEL");

    // Without a name, the requests name the process that made them.
    controller.submit("plain", &Job::new(10_000, false, 2)).unwrap();
    wait_until("it runs", LIMIT, || app.history("plain").map(|h| h.len() > 3).unwrap_or(false)).await;
    assert!(controller.pause_run("plain").unwrap());
    wait_until("the run leaves the queue", LIMIT, || app.live_runs().unwrap().is_empty()).await;
    controller.submit_resume("plain").unwrap();
    assert!(controller.cancel_run("plain").unwrap());
    wait_until("the run leaves the queue", LIMIT, || app.live_runs().unwrap().is_empty()).await;
    stop.cancel();
    handle.await.unwrap().unwrap();
    let audited = controls_audited(&controller, "plain");
    let kinds: Vec<&str> = audited.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(kinds, ["run.submitted", "run.pause_requested", "run.resume_requested", "run.cancel_requested"]);
    let me = format!("-pid{}-", std::process::id());
    for (kind, actor) in &audited {
        assert!(actor.starts_with("process:") && actor.contains(&me), "{kind} by {actor}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redb_submit_pause_resume_and_cancel_requests_are_audited_with_who_asked() {
    let app = redb_app();
    controls_are_audited(app.clone(), app).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_requests_from_another_store_instance_are_audited_with_who_asked() {
    let Some(url) = pg_url() else { return };
    let schema = fresh_schema("audit");
    controls_are_audited(pg_app(&url, &schema), pg_app(&url, &schema)).await;
}

async fn shutdown_hands_over(app: App<Job, ()>) {
    // The fourth step is held until the run is asked to stop: still running at the shutdown.
    let marker = hold_marker("shutdown");
    app.submit_as("handover", &Job::new(60, false, 5).held_at(3, &marker), OWNER).unwrap();
    let (stop_a, a) = start(&app, 1);
    wait_until("the fourth step runs", LIMIT, || marker.exists()).await;
    stop_a.cancel();
    let report = a.await.unwrap().unwrap();
    assert_eq!((report.claimed, report.stopped), (1, 1), "{report:?}");
    let queued = app.live_runs().unwrap();
    assert_eq!(queued.len(), 1, "the run stays queued");
    assert_eq!(queued[0].lease, None, "and its lease was released");
    // Stopped as a pause, not a cancel: nothing undone, continued by the next worker.
    assert_eq!(app.thread("handover").unwrap().unwrap().status, ThreadStatus::Paused);
    let stopped_at = app.state("handover").unwrap().unwrap().state.counter;
    assert_eq!(stopped_at, 4, "the running step finished and committed, no other one started");

    let (stop_b, b) = start(&app, 1);
    wait_until("the queue is empty", LIMIT, || app.live_runs().unwrap().is_empty()).await;
    stop_b.cancel();
    let report = b.await.unwrap().unwrap();
    assert_eq!((report.claimed, report.completed), (1, 1), "{report:?}");
    assert_done(&app, "handover", 60);
    let trail = app.state("handover").unwrap().unwrap().state.trail;
    assert_eq!(trail.len(), 60);
    let _ = std::fs::remove_file(&marker);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redb_graceful_shutdown_finishes_the_step_and_leaves_the_run_to_another_worker() {
    shutdown_hands_over(redb_app()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_graceful_shutdown_finishes_the_step_and_leaves_the_run_to_another_worker() {
    let Some(url) = pg_url() else { return };
    shutdown_hands_over(pg_app(&url, &fresh_schema("shutdown"))).await;
}

#[tokio::test]
async fn submitting_needs_a_store() {
    let app = job::graph().app();
    assert!(matches!(app.submit("t", &Job::new(1, false, 0)), Err(WorkerError::NoStore)));
    let report = Worker::new(app, Arc::new(())).run(CancellationToken::new()).await;
    assert!(matches!(report, Err(WorkerError::NoStore)));
}
