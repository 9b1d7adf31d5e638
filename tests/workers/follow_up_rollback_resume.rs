//! A `rollback` follow-up that arrives while a worker resumes a thread whose run had ended
//! (here cancelled; a failed run retried alike) replaces that resume: the thread goes back to
//! the checkpoint the resume continued from, not to the thread's first input.

use crate::support::job_worker::{LIMIT, completes, start, stop, trail};
use crate::support::stores::open_redb;
use crate::support::temp::temp_dir;
use crate::support::worker_graph::{Hold, Job, hold_marker, job, wait_until};
use agentflow::persist::{CheckpointSource, ThreadStatus};
use agentflow::{FollowUpQueued, Multitask, Store};
use std::sync::Arc;

/// Who the submitted runs act for: the jobs' graph lists a tool the default policy gates.
const OWNER: &str = "agent:jobs";
const THREAD: &str = "rb-resume";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_during_the_resume_of_an_ended_thread_goes_back_to_where_the_resume_began() {
    let store = open_redb(temp_dir("follow-up-rollback-resume").join("jobs.redb")).expect("open the redb file");
    let app = job::graph().app().store(Arc::new(store) as Arc<dyn Store>);
    let (first, second) = (hold_marker("rollback-resume-1"), hold_marker("rollback-resume-2"));
    // The first run does step `a`, then holds in `b` and is cancelled there.
    app.submit_as(THREAD, &Job::new(4, false, 0).held_at(1, &first), OWNER).unwrap();
    let (token, handle) = start(&app);
    wait_until("step b holds", LIMIT, || first.exists()).await;
    assert!(app.cancel_run(THREAD).unwrap());
    wait_until("the run ends cancelled", LIMIT, || {
        app.live_runs().unwrap().iter().all(|r| r.thread != THREAD)
            && app.thread(THREAD).unwrap().is_some_and(|t| t.status == ThreadStatus::Cancelled)
    })
    .await;
    // The resume holds in its second step (`c`), after it committed `b`.
    let hold = Hold { at: 2, marker: second.clone() };
    let resumed_from = app.update_state(THREAD, Job::update().hold(Some(hold)), "ada").unwrap();
    app.submit_resume(THREAD).unwrap();
    wait_until("the resume holds in step c", LIMIT, || second.exists()).await;
    let resume_step = app.history(THREAD).unwrap().last().cloned().unwrap();
    assert_eq!((resume_step.parent, resume_step.metadata.source), (Some(resumed_from), CheckpointSource::Loop));

    let next = Job::update().n(3).hold(None);
    let queued = app.submit_follow_up(THREAD, &next, Multitask::Rollback, "ada").unwrap();
    assert_eq!(queued, FollowUpQueued::Behind { ahead: 0 });
    completes(&app, THREAD).await;
    let report = stop(token, handle).await;
    std::fs::remove_file(&first).ok();
    std::fs::remove_file(&second).ok();
    assert_eq!(report.failed, 0, "{report:?}");
    // The resume's step `b` is gone; the first run's `a` stays: the follow-up ran `a`, `b` on it.
    assert_eq!(trail(&app, THREAD), ["a", "a", "b"]);
    let history = app.history(THREAD).unwrap();
    let restart = history.iter().rfind(|c| c.metadata.source == CheckpointSource::Input).unwrap();
    assert!(restart.seq > resume_step.seq, "{history:?}");
    assert_eq!(restart.parent, Some(resumed_from), "back to where the resume began: {history:?}");
    let audit = app.audit_log(THREAD).unwrap();
    let rolled = audit.iter().find(|e| e.kind == "thread.rolled_back").expect("the rollback is audited");
    assert_eq!(rolled.detail["from"], resumed_from);
}
