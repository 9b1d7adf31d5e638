//! Follow-up runs claimed again, on a redb file: one that parked after its restart goes on
//! under a newer version of the graph (the restart is not refused for the graph it was written
//! by), and a run held behind a thread whose run then ended outside the queue leaves the queue
//! without running the thread again, the follow-up behind it running next.

use std::sync::Arc;

use crate::support::job_worker::{LIMIT, completes, count, start, stop, trail};
use crate::support::stores::open_redb;
use crate::support::temp::temp_dir;
use crate::support::worker_graph::{Job, authorizer, hold_marker, job, wait_until};
use agentflow::__private::with_release;
use agentflow::approval::Approver;
use agentflow::persist::ThreadStatus;
use agentflow::prelude::*;
use agentflow::release::Release;
use agentflow::{CancellationToken, FollowUpQueued, Multitask, Store};
use agentflow_store::RunWait;

/// Who the submitted runs act for: the jobs' graph lists a tool the default policy gates.
const OWNER: &str = "agent:jobs";

/// A follow-up that restarted its thread and parked for an approval, then claimed by a worker
/// of the graph's next version (another fingerprint): it goes on from where it parked, the
/// thread moved to the new version, instead of being dropped as a follow-up of another graph.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_follow_up_goes_on_under_a_newer_version_of_the_graph() {
    let store: Arc<dyn Store> =
        Arc::new(open_redb(temp_dir("follow-up-upgraded").join("follow-ups.redb")).expect("open the redb file"));
    let old = job::graph().app().store(Arc::clone(&store)).event_log(true);
    old.submit_as("up", &Job::new(1, false, 0), OWNER).unwrap();
    let (token, handle) = start(&old);
    completes(&old, "up").await;
    let next = Job::update().pay(true).trail(vec!["follow-up".into()]);
    assert_eq!(old.submit_follow_up("up", &next, Multitask::Enqueue, OWNER).unwrap(), FollowUpQueued::Now);
    wait_until("the follow-up parks for its approval", LIMIT, || {
        old.live_runs().unwrap().iter().any(|r| r.thread == "up" && r.wait == RunWait::Approval && r.lease.is_none())
    })
    .await;
    stop(token, handle).await;
    assert_eq!(count(&old, "up", "run.follow_up"), 1, "restarted before it parked");

    let new = with_release(job::graph(), Release::new("job", 2, &[], "{}", ""))
        .app()
        .store(Arc::clone(&store))
        .event_log(true);
    assert_ne!(new.graph().fingerprint(), old.graph().fingerprint());
    let desk = new.approvals(authorizer()).unwrap();
    let pending = desk.pending().unwrap();
    assert_eq!(pending.len(), 1, "{pending:?}");
    desk.approve(&pending[0].id, &Approver::new("alice", ["refund-approver"])).unwrap();
    let (token, handle) = start(&new);
    completes(&new, "up").await;
    let report = stop(token, handle).await;
    assert_eq!((report.completed, report.failed), (1, 0), "{report:?}");
    assert_eq!(count(&new, "up", "run.follow_up_failed"), 0, "not dropped");
    assert_eq!(count(&new, "up", "run.follow_up"), 1, "the restart is not made again");
    assert_eq!(count(&new, "up", "graph.migrated"), 1);
    assert!(new.state("up").unwrap().unwrap().state.receipt.is_some(), "the approved refund was made");
    assert_eq!(trail(&new, "up"), ["a", "follow-up", "a"]);
    assert_eq!(new.thread("up").unwrap().unwrap().graph_fingerprint, new.graph().fingerprint());
}

/// A paused thread with a follow-up behind it (its run held), resumed in this process outside
/// the queue and cancelled there: the held run is claimed once the thread's run ended, and
/// leaves the queue without resuming the cancelled thread (its remaining steps never run); the
/// follow-up runs next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_run_whose_thread_ended_outside_the_queue_does_not_run_it_again() {
    let store = open_redb(temp_dir("follow-up-held-ended").join("follow-ups.redb")).expect("open the redb file");
    let app = job::graph().app().store(Arc::new(store) as Arc<dyn Store>).event_log(true);
    let marker = hold_marker("follow-up-held-ended");
    app.submit_as("he", &Job::new(3, false, 0).held_at(1, &marker), OWNER).unwrap();
    let (token, handle) = start(&app);
    wait_until("step b holds", LIMIT, || marker.exists()).await;
    assert!(app.pause_run("he").unwrap());
    wait_until("the run left the queue, paused", LIMIT, || {
        app.live_runs().unwrap().iter().all(|r| r.thread != "he")
            && app.thread("he").unwrap().is_some_and(|t| t.status == ThreadStatus::Paused)
    })
    .await;
    stop(token, handle).await;
    let next = Job::update().n(2).hold(None).trail(vec!["follow-up".into()]);
    assert_eq!(
        app.submit_follow_up("he", &next, Multitask::Enqueue, "ada").unwrap(),
        FollowUpQueued::Behind { ahead: 0 }
    );
    assert!(app.live_runs().unwrap().iter().any(|r| r.thread == "he" && r.wait == RunWait::Held));

    // Resumed here, outside the queue, cancelled at its first step boundary.
    let cancel = CancellationToken::new();
    cancel.cancel();
    let run = app.runner(&()).thread("he").cancel_token(cancel).resume().await.unwrap();
    assert!(matches!(run.outcome, Outcome::Cancelled), "{}", run.outcome);
    assert_eq!(app.thread("he").unwrap().unwrap().status, ThreadStatus::Cancelled);
    assert_eq!(trail(&app, "he"), ["a"]);

    let (token, handle) = start(&app);
    wait_until("the follow-up ran", LIMIT, || count(&app, "he", "run.follow_up") == 1).await;
    completes(&app, "he").await;
    let report = stop(token, handle).await;
    std::fs::remove_file(&marker).ok();
    // The held run ended as the thread's run did; then the follow-up's one step.
    assert_eq!((report.controlled, report.completed, report.failed), (1, 1, 0), "{report:?}");
    assert_eq!(trail(&app, "he"), ["a", "follow-up", "a"], "the cancelled run's steps b and c never ran");
}
