//! Follow-up runs of a thread an older version of its graph wrote (a conversation's next
//! message after a deploy): accepted under every strategy, for a finished thread and for one
//! waiting for a person; the worker moves the thread to the current version first (one
//! `graph.migrated`) and runs the follow-up as usual. A thread of a newer version, or of another
//! graph, is refused at submission, and a follow-up of a thread a newer version moved meanwhile
//! stays queued for a worker of that version.

use std::sync::Arc;

use crate::support::job_worker::{LIMIT, completes, count, start, stop, trail};
use crate::support::stores::open_redb;
use crate::support::temp::temp_dir;
use crate::support::worker_graph::{Job, authorizer, job, wait_until};
use agentflow::__private::with_release;
use agentflow::WorkerError;
use agentflow::approval::Approver;
use agentflow::persist::CheckpointSource;
use agentflow::prelude::*;
use agentflow::release::Release;
use agentflow::{FollowUpQueued, Multitask, Store};
use agentflow_store::RunWait;

/// Who the submitted runs act for: the jobs' graph lists a tool the default policy gates.
const OWNER: &str = "agent:jobs";

fn store(tag: &str) -> Arc<dyn Store> {
    Arc::new(open_redb(temp_dir(tag).join("follow-up-versions.redb")).expect("open the redb file"))
}

/// The jobs' graph as version 1 (never versioned) wrote it.
fn v1(store: &Arc<dyn Store>) -> App<Job, ()> {
    job::graph().app().store(Arc::clone(store))
}

/// The jobs' graph as version 2 (nothing to map: the nodes kept their names).
fn v2(store: &Arc<dyn Store>) -> App<Job, ()> {
    with_release(job::graph(), Release::new("job", 2, &[], "{}", "")).app().store(Arc::clone(store))
}

/// Checks that `thread` was moved from version 1 to 2 once, before its follow-up's restart,
/// and that it runs version 2 now.
fn moved_once_then_restarted(app: &App<Job, ()>, thread: &str) {
    let audit = app.audit_log(thread).unwrap();
    let moves: Vec<_> = audit.iter().filter(|e| e.kind == "graph.migrated").collect();
    assert_eq!(moves.len(), 1, "{thread}: {audit:?}");
    assert_eq!((moves[0].detail["from"].as_u64(), moves[0].detail["to"].as_u64()), (Some(1), Some(2)));
    let moved_at = moves[0].detail["checkpoint"].as_u64().unwrap();
    let history = app.history(thread).unwrap();
    let restart = history
        .iter()
        .rfind(|c| c.metadata.source == CheckpointSource::Input && c.seq > 0)
        .expect("the follow-up's restart");
    assert!(restart.seq > moved_at, "{thread}: the restart {} comes after the move {moved_at}", restart.seq);
    assert_eq!(count(app, thread, "run.follow_up"), 1, "{thread}");
    assert_eq!(count(app, thread, "run.follow_up_failed"), 0, "{thread}");
    assert_eq!(app.thread(thread).unwrap().unwrap().graph_fingerprint, app.graph().fingerprint());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_thread_of_an_older_version_takes_a_follow_up_under_every_strategy() {
    let store = store("follow-up-versions-finished");
    let (old, new) = (v1(&store), v2(&store));
    let strategies = [Multitask::Reject, Multitask::Enqueue, Multitask::Interrupt, Multitask::Rollback];
    for strategy in strategies {
        old.submit_as(strategy.as_str(), &Job::new(1, false, 0), OWNER).unwrap();
    }
    let (token, handle) = start(&old);
    for strategy in strategies {
        completes(&old, strategy.as_str()).await;
    }
    stop(token, handle).await;

    // Deployed: version 2 takes the next message of each.
    for strategy in strategies {
        let next = Job::update().n(3);
        assert_eq!(new.submit_follow_up(strategy.as_str(), &next, strategy, "ada").unwrap(), FollowUpQueued::Now);
    }
    let (token, handle) = start(&new);
    for strategy in strategies {
        wait_until("the follow-up ran", LIMIT, || new.state(strategy.as_str()).unwrap().unwrap().state.counter == 3)
            .await;
        completes(&new, strategy.as_str()).await;
    }
    let report = stop(token, handle).await;
    assert_eq!((report.completed, report.failed), (4, 0), "{report:?}");
    for strategy in strategies {
        moved_once_then_restarted(&new, strategy.as_str());
        // A finished thread has no run to roll back.
        assert_eq!(count(&new, strategy.as_str(), "thread.rolled_back"), 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_of_an_older_version_waiting_for_a_person_takes_a_follow_up() {
    let store = store("follow-up-versions-waiting");
    let (old, new) = (v1(&store), v2(&store));
    let strategies = [Multitask::Enqueue, Multitask::Interrupt, Multitask::Rollback];
    for strategy in strategies {
        old.submit_as(strategy.as_str(), &Job::new(1, true, 0), OWNER).unwrap();
    }
    let (token, handle) = start(&old);
    for strategy in strategies {
        let thread = strategy.as_str();
        wait_until(&format!("{thread} parks for its approval"), LIMIT, || {
            old.live_runs()
                .unwrap()
                .iter()
                .any(|r| r.thread == thread && r.wait == RunWait::Approval && r.lease.is_none())
        })
        .await;
    }
    stop(token, handle).await;

    // Version 2 is deployed while the threads wait; `reject` still refuses while they do.
    let next = Job::update().n(3).pay(false);
    let refused = new.submit_follow_up("enqueue", &next, Multitask::Reject, "ada").unwrap_err();
    assert!(matches!(refused, WorkerError::FollowUpRefused { .. }), "{refused}");
    for strategy in strategies {
        new.submit_follow_up(strategy.as_str(), &next, strategy, "ada").unwrap();
    }
    // `enqueue` waits for the run before it to end: its approval, given now.
    let desk = new.approvals(authorizer()).unwrap();
    let pending = desk.pending().unwrap().into_iter().find(|a| a.thread == "enqueue").expect("its approval waits");
    desk.approve(&pending.id, &Approver::new("alice", ["refund-approver"])).unwrap();
    let (token, handle) = start(&new);
    for strategy in strategies {
        let thread = strategy.as_str();
        wait_until("the follow-up ran", LIMIT, || new.state(thread).unwrap().unwrap().state.counter >= 3).await;
        completes(&new, thread).await;
    }
    stop(token, handle).await;
    for strategy in strategies {
        moved_once_then_restarted(&new, strategy.as_str());
    }
    // `enqueue` ran on after its refund; `interrupt` and `rollback` cancelled the run that waited.
    assert!(new.state("enqueue").unwrap().unwrap().state.receipt.is_some());
    // The first run's step, then the follow-up's from the start node up to three steps; the
    // rollback from the input again.
    assert_eq!(trail(&new, "interrupt"), ["a", "a", "b"]);
    assert_eq!(trail(&new, "rollback"), ["a", "b", "c"]);
    assert_eq!(count(&new, "rollback", "thread.rolled_back"), 1);

    // The rollback's restart went back to before the move: a fork to it, or to a checkpoint
    // after it, is still version 2's (its parent links lead to version 1's checkpoints).
    let history = new.history("rollback").unwrap();
    let restart = history.iter().rfind(|c| c.metadata.source == CheckpointSource::Input && c.seq > 0).unwrap();
    let after = history.iter().find(|c| c.seq > restart.seq).expect("a step after the restart");
    for seq in [restart.seq, after.seq] {
        new.fork("rollback", seq, "ada").unwrap();
        let record = new.thread("rollback").unwrap().unwrap();
        assert_eq!(record.graph_fingerprint, new.graph().fingerprint(), "forked to {seq}");
    }
    assert_eq!(count(&new, "rollback", "graph.migrated"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_of_a_newer_version_or_another_graph_is_refused_or_left_queued() {
    let store = store("follow-up-versions-newer");
    let (old, new) = (v1(&store), v2(&store));
    new.submit_as("newer", &Job::new(1, false, 0), OWNER).unwrap();
    let (token, handle) = start(&new);
    completes(&new, "newer").await;
    stop(token, handle).await;
    let next = Job::update().n(3);

    // Refused by version 1 and by another graph at submission.
    let refused = old.submit_follow_up("newer", &next, Multitask::Enqueue, "ada").unwrap_err();
    assert!(matches!(refused, WorkerError::FollowUpOtherGraph { .. }), "{refused}");
    let other =
        with_release(job::graph(), Release::new("another-job", 3, &[], "{}", "")).app().store(Arc::clone(&store));
    let refused = other.submit_follow_up("newer", &next, Multitask::Enqueue, "ada").unwrap_err();
    assert!(matches!(refused, WorkerError::FollowUpOtherGraph { .. }), "{refused}");

    // Accepted by version 2, claimed by a worker of version 1 (a rolling deploy): left queued.
    assert_eq!(new.submit_follow_up("newer", &next, Multitask::Enqueue, "ada").unwrap(), FollowUpQueued::Now);
    let before = store.list_checkpoints("newer").unwrap().len();
    let (token, handle) = start(&old);
    let claimed = || store.list_runs().unwrap().iter().all(|r| r.thread != "newer" || r.claims >= 1);
    wait_until("the older build's worker claims the follow-up", LIMIT, claimed).await;
    stop(token, handle).await;
    let queued: Vec<_> = store.list_runs().unwrap().into_iter().filter(|r| r.thread == "newer").collect();
    assert_eq!(queued.len(), 1, "the follow-up stays queued");
    assert_eq!(store.list_checkpoints("newer").unwrap().len(), before, "the older build does not write to the thread");
    assert_eq!(count(&new, "newer", "run.follow_up_failed"), 0);
    assert_eq!(count(&new, "newer", "graph.migrated"), 0);
}
