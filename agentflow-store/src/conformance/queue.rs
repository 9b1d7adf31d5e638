//! The run queue: submitting, claiming, parking, settling and controlling runs.

use std::collections::BTreeSet;
use std::sync::Barrier;

use serde_json::json;

use crate::conformance::fixtures::{NOW, approval, thread};
use crate::{
    ApprovalPatch, ApprovalStatus, CommitError, LeaseError, NewAuditEntry, NewRun, QueueError, RunControl, RunWait,
    Settle, StepCommit, Store, ThreadStatus,
};

/// Enqueue, claim (with the lease), heartbeat and controls, settle, and a dead holder's run
/// claimed again once its lease expired.
pub fn run_queue_lifecycle(store: &dyn Store) {
    store.enqueue_run(NewRun::new("q1", "g", Some(b"{}".to_vec()), "alice", NOW)).unwrap();
    store.enqueue_run(NewRun::new("q2", "g", None, "bob", NOW + 1)).unwrap();
    store.enqueue_run(NewRun::new("other", "h", None, "", NOW)).unwrap();
    let err = store.enqueue_run(NewRun::new("q1", "g", None, "", NOW)).unwrap_err();
    assert!(matches!(&err, QueueError::AlreadyQueued { thread } if thread == "q1"), "{err}");

    // Oldest first, only graph `g`, at most `max`; each claim takes the thread's lease.
    let claimed = store.claim_runs("g", "w1", 1000, NOW + 10, 1).unwrap();
    assert_eq!(claimed.len(), 1);
    let q1 = &claimed[0];
    assert_eq!((q1.thread.as_str(), q1.input.as_deref(), q1.owner.as_str()), ("q1", Some(&b"{}"[..]), "alice"));
    assert_eq!((q1.holder.as_deref(), q1.heartbeat_at, q1.claims), (Some("w1"), Some(NOW + 10), 1));
    assert_eq!(store.thread("q1").unwrap(), None, "claiming creates no thread");
    assert!(matches!(store.acquire_lease("q1", "w2", 1000, NOW + 20), Err(LeaseError::ThreadBusy { .. })));
    let claimed = store.claim_runs("g", "w2", 1000, NOW + 20, 10).unwrap();
    assert_eq!(claimed.iter().map(|r| r.thread.as_str()).collect::<Vec<_>>(), ["q2"], "q1 is held by w1");
    assert!(store.claim_runs("g", "w3", 1000, NOW + 30, 10).unwrap().is_empty());

    // A control request reaches the holder with its heartbeat.
    assert!(store.heartbeat_runs("w1", NOW + 40).unwrap().is_empty());
    assert!(store.control_run("q1", RunControl::Cancel).unwrap());
    assert!(!store.control_run("nope", RunControl::Cancel).unwrap());
    assert_eq!(store.heartbeat_runs("w1", NOW + 50).unwrap(), [("q1".to_string(), RunControl::Cancel)]);
    let listed = store.list_runs().unwrap();
    assert_eq!(listed.iter().map(|r| r.thread.as_str()).collect::<Vec<_>>(), ["other", "q1", "q2"]);
    let q1 = &listed[1];
    assert_eq!((q1.heartbeat_at, q1.control), (Some(NOW + 50), Some(RunControl::Cancel)));
    assert_eq!(q1.lease.as_ref().map(|l| l.holder.as_str()), Some("w1"));

    // Only the holder settles; a run that stopped for the cancel it was asked leaves the queue
    // (see `run_queue_settle_answers_control_requests` for the other cases).
    assert!(!store.settle_run("q1", "w2", &Settle::remove()).unwrap());
    assert!(store.settle_run("q1", "w1", &Settle::remove().handled(Some(RunControl::Cancel))).unwrap());
    assert!(!store.list_runs().unwrap().iter().any(|r| r.thread == "q1"));

    // w2 dies holding q2: nobody claims it until the lease expires, then w3 does.
    assert!(store.claim_runs("g", "w3", 1000, NOW + 1019, 10).unwrap().is_empty());
    let again = store.claim_runs("g", "w3", 1000, NOW + 1020, 10).unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!((again[0].thread.as_str(), again[0].holder.as_deref(), again[0].claims), ("q2", Some("w3"), 2));
    // The dead holder can no longer commit to the thread nor heartbeat it.
    let err = store.commit_step(StepCommit::new(thread("q2")).fenced_by("w2", NOW + 1021)).unwrap_err();
    assert!(matches!(err, CommitError::LeaseLost { .. }), "{err}");
    assert!(store.heartbeat_runs("w2", NOW + 1021).unwrap().is_empty());
    assert!(!store.settle_run("q2", "w2", &Settle::remove()).unwrap());
    assert!(store.settle_run("q2", "w3", &Settle::remove()).unwrap());
    assert_eq!(store.list_runs().unwrap().len(), 1);
    // A settled thread can be queued again.
    store.enqueue_run(NewRun::new("q2", "g", None, "", NOW + 2000)).unwrap();
}

/// A run parked for an approval is claimable again once no approval of its thread waits, or
/// once its thread's timer (the first approval's expiry) is due, the approval still pending.
pub fn run_queue_parks_for_approvals(store: &dyn Store) {
    store.enqueue_run(NewRun::new("t", "g", None, "", NOW)).unwrap();
    assert_eq!(store.claim_runs("g", "w1", 1000, NOW, 5).unwrap().len(), 1);
    store.put_approval(approval("a1", "t"), "agent").unwrap();
    assert!(store.settle_run("t", "w1", &Settle::park(RunWait::Approval)).unwrap());
    store.release_lease("t", "w1").unwrap();
    let parked = store.list_runs().unwrap();
    assert_eq!(parked[0].wait, RunWait::Approval);
    assert!(store.claim_runs("g", "w2", 1000, NOW + 1, 5).unwrap().is_empty(), "the approval waits");
    store
        .transition_approval("a1", ApprovalStatus::Pending, ApprovalStatus::Approved, ApprovalPatch::by("alice", NOW))
        .unwrap();
    // A subgraph child's approval, at any level, holds its parent too (a child names its
    // parent). A thread of its own does not, even one whose id has a child's shape, nor one
    // whose name merely starts with `t`.
    store.commit_step(StepCommit::new(thread("t/settle.0.0.pay").child_of("t"))).unwrap();
    let grandchild = thread("t/settle.0.0.pay/vet.1.0.check").child_of("t/settle.0.0.pay");
    store.commit_step(StepCommit::new(grandchild)).unwrap();
    store.commit_step(StepCommit::new(thread("t/settle.0.1.pay"))).unwrap();
    store.put_approval(approval("a-own", "t/settle.0.1.pay"), "agent").unwrap();
    store.put_approval(approval("a-other", "tx"), "agent").unwrap();
    store.put_approval(approval("a-grandchild", "t/settle.0.0.pay/vet.1.0.check"), "agent").unwrap();
    assert!(store.claim_runs("g", "w2", 1000, NOW + 1, 5).unwrap().is_empty(), "the grandchild's approval waits");
    let reject = |id: &str| {
        let patch = ApprovalPatch::by("alice", NOW);
        store.transition_approval(id, ApprovalStatus::Pending, ApprovalStatus::Rejected, patch).unwrap();
    };
    reject("a-grandchild");
    store.put_approval(approval("a-child", "t/settle.0.0.pay"), "agent").unwrap();
    assert!(store.claim_runs("g", "w2", 1000, NOW + 1, 5).unwrap().is_empty(), "the child's approval waits");
    reject("a-child");
    let claimed = store.claim_runs("g", "w2", 1000, NOW + 2, 5).unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!((claimed[0].wait, claimed[0].holder.as_deref()), (RunWait::Ready, Some("w2")));

    // An approval that expires: the thread waits with a timer at the expiry.
    let mut waiting = thread("u");
    waiting.status = ThreadStatus::Interrupted;
    store.commit_step(StepCommit::new(waiting).with_wake_at(NOW + 100)).unwrap();
    store.enqueue_run(NewRun::new("u", "g", None, "", NOW)).unwrap();
    assert_eq!(store.claim_runs("g", "w1", 1000, NOW, 5).unwrap().len(), 1);
    store.put_approval(approval("a2", "u"), "agent").unwrap();
    assert!(store.settle_run("u", "w1", &Settle::park(RunWait::Approval)).unwrap());
    store.release_lease("u", "w1").unwrap();
    assert!(store.claim_runs("g", "w3", 1000, NOW + 99, 5).unwrap().is_empty(), "the approval waits, not yet due");
    let due = store.claim_runs("g", "w3", 1000, NOW + 100, 5).unwrap();
    assert_eq!(due.iter().map(|r| r.thread.as_str()).collect::<Vec<_>>(), ["u"], "its expiry is due");
    assert_eq!(store.approval("a2").unwrap().unwrap().status, ApprovalStatus::Pending);
}

/// A run parked for the approvals it names ([`Settle::await_approvals`]) waits on those only:
/// a record left waiting from an earlier step, for a human to settle, does not hold it.
pub fn run_queue_parks_for_named_approvals(store: &dyn Store) {
    store.enqueue_run(NewRun::new("t", "g", None, "", NOW)).unwrap();
    assert_eq!(store.claim_runs("g", "w1", 1000, NOW, 5).unwrap().len(), 1);
    store.put_approval(approval("left", "t"), "agent").unwrap();
    store.put_approval(approval("asked", "t"), "agent").unwrap();
    assert!(store.settle_run_and_release("t", "w1", &Settle::await_approvals(vec!["asked".to_string()])).unwrap());
    assert!(store.claim_runs("g", "w2", 1000, NOW + 1, 5).unwrap().is_empty(), "the approval it names waits");
    let patch = ApprovalPatch::by("alice", NOW);
    store.transition_approval("asked", ApprovalStatus::Pending, ApprovalStatus::Approved, patch).unwrap();
    let claimed = store.claim_runs("g", "w2", 1000, NOW + 2, 5).unwrap();
    assert_eq!(claimed.len(), 1, "the record it does not name does not hold it");
    assert_eq!(store.approval("left").unwrap().unwrap().status, ApprovalStatus::Pending);
}

/// A run parked for an answer (`cx.interrupt`) is claimable once woken, or once its thread
/// no longer waits (it moved on without the queue); `wake_run` wakes only a run parked for what
/// it names.
pub fn run_queue_parks_for_answers(store: &dyn Store) {
    let mut waiting = thread("t");
    waiting.status = ThreadStatus::Interrupted;
    store.commit_step(StepCommit::new(waiting.clone())).unwrap();
    assert!(!store.wake_run("t", RunWait::Answer).unwrap(), "not queued");
    store.enqueue_run(NewRun::new("t", "g", None, "", NOW)).unwrap();
    assert!(!store.wake_run("t", RunWait::Answer).unwrap(), "queued, not parked");
    assert_eq!(store.claim_runs("g", "w1", 1000, NOW, 5).unwrap().len(), 1);
    assert!(store.settle_run("t", "w1", &Settle::park(RunWait::Answer)).unwrap());
    store.release_lease("t", "w1").unwrap();
    assert_eq!(store.list_runs().unwrap()[0].wait, RunWait::Answer);
    assert!(store.claim_runs("g", "w2", 1000, NOW + 1, 5).unwrap().is_empty(), "it waits for an answer");
    assert!(!store.wake_run("t", RunWait::Approval).unwrap(), "parked for an answer, not an approval");
    assert!(store.claim_runs("g", "w2", 1000, NOW + 1, 5).unwrap().is_empty());
    assert!(store.wake_run("t", RunWait::Answer).unwrap());
    assert_eq!(store.list_runs().unwrap()[0].wait, RunWait::Ready);
    let claimed = store.claim_runs("g", "w2", 1000, NOW + 2, 5).unwrap();
    assert_eq!(claimed.iter().map(|r| (r.thread.as_str(), r.wait)).collect::<Vec<_>>(), [("t", RunWait::Ready)]);

    // Parked again, then the thread moves on without the queue (resumed directly): claimable.
    assert!(store.settle_run("t", "w2", &Settle::park(RunWait::Answer)).unwrap());
    store.release_lease("t", "w2").unwrap();
    assert!(store.claim_runs("g", "w3", 1000, NOW + 3, 5).unwrap().is_empty());
    store.commit_step(StepCommit::new(thread("t"))).unwrap();
    assert_eq!(store.claim_runs("g", "w3", 1000, NOW + 4, 5).unwrap().len(), 1, "the thread moved on");

    // A thread that failed where it waits (an answer of the wrong shape) still waits: parked
    // through `settle_run_and_release`, as a worker parks it.
    let mut failed = thread("t");
    failed.status = ThreadStatus::Failed;
    store.commit_step(StepCommit::new(failed)).unwrap();
    assert_eq!(store.claim_runs("g", "w3", 1000, NOW + 4, 5).unwrap().len(), 0, "claimed above");
    assert!(store.settle_run_and_release("t", "w3", &Settle::park(RunWait::Answer)).unwrap());
    assert!(store.claim_runs("g", "w4", 1000, NOW + 5, 5).unwrap().is_empty(), "a failed thread still waits");
    let entry = NewAuditEntry::new(NOW + 5, "ops", "run.resume_requested", serde_json::json!({}));
    assert!(!store.wake_run_audited("t", RunWait::Approval, entry.clone()).unwrap());
    let audited = |store: &dyn Store| store.list_audit("t").unwrap().iter().filter(|e| e.kind == entry.kind).count();
    assert_eq!(audited(store), 0, "nothing woken, nothing audited");
    assert!(store.wake_run_audited("t", RunWait::Answer, entry.clone()).unwrap());
    assert_eq!(audited(store), 1);
    assert_eq!(store.claim_runs("g", "w4", 1000, NOW + 6, 5).unwrap().len(), 1);

    // A control request makes it claimable too (the worker ends it as asked).
    store.commit_step(StepCommit::new(waiting)).unwrap();
    assert!(store.settle_run("t", "w4", &Settle::park(RunWait::Answer)).unwrap());
    store.release_lease("t", "w4").unwrap();
    assert!(store.claim_runs("g", "w5", 1000, NOW + 7, 5).unwrap().is_empty());
    assert!(store.control_run("t", RunControl::Cancel).unwrap());
    assert_eq!(store.claim_runs("g", "w5", 1000, NOW + 8, 5).unwrap().len(), 1, "a cancel was asked");
}

/// A settle answers the control request set on the row in the same write: the one the worker
/// acted on is cleared, a pause it did not act on is moot (the run stopped already) and cleared,
/// and a cancel it did not act on keeps the row claimable at once, so the next claim ends the
/// thread cancelled.
pub fn run_queue_settle_answers_control_requests(store: &dyn Store) {
    let claim = |thread: &str, holder: &str, now: u64| {
        store.enqueue_run(NewRun::new(thread, "g", None, "", now)).unwrap();
        let claimed = store.claim_runs("g", holder, 1000, now, 1).unwrap();
        assert_eq!(claimed.iter().map(|r| r.thread.as_str()).collect::<Vec<_>>(), [thread]);
    };
    let row = |thread: &str| store.list_runs().unwrap().into_iter().find(|r| r.thread == thread);
    let claimable = |thread: &str, holder: &str, now: u64| {
        let claimed = store.claim_runs("g", holder, 1000, now, 5).unwrap();
        claimed.iter().any(|r| r.thread == thread)
    };

    // A cancel asked after the worker's last look, as the run parks for an answer: kept.
    claim("c1", "w1", NOW);
    assert!(store.control_run("c1", RunControl::Cancel).unwrap());
    assert!(store.settle_run_and_release("c1", "w1", &Settle::park(RunWait::Answer)).unwrap());
    let kept = row("c1").expect("a cancel nobody acted on keeps the row");
    assert_eq!((kept.wait, kept.control), (RunWait::Ready, Some(RunControl::Cancel)));
    assert!(claimable("c1", "w2", NOW + 1), "claimable at once, for its cancel");
    // The claim hands the request on; the worker that acts on it settles it away.
    assert!(store.settle_run_and_release("c1", "w2", &Settle::remove().handled(Some(RunControl::Cancel))).unwrap());
    assert_eq!(row("c1"), None);

    // The same as the run ends: kept (the next claim finds out what is left to cancel).
    claim("c2", "w1", NOW + 2);
    assert!(store.control_run("c2", RunControl::Cancel).unwrap());
    assert!(store.settle_run_and_release("c2", "w1", &Settle::remove()).unwrap());
    assert_eq!(row("c2").and_then(|r| r.control), Some(RunControl::Cancel));
    let handled = Settle::remove().handled(Some(RunControl::Cancel));
    assert!(claimable("c2", "w2", NOW + 2));
    assert!(store.settle_run_and_release("c2", "w2", &handled).unwrap());
    // A worker that acted on a pause, the request changed to a cancel since: kept too.
    claim("c3", "w1", NOW + 3);
    assert!(store.control_run("c3", RunControl::Pause).unwrap());
    assert!(store.control_run("c3", RunControl::Cancel).unwrap());
    let paused = Settle::remove().handled(Some(RunControl::Pause));
    assert!(store.settle_run_and_release("c3", "w1", &paused).unwrap());
    assert_eq!(row("c3").and_then(|r| r.control), Some(RunControl::Cancel));
    assert!(claimable("c3", "w2", NOW + 3));
    assert!(store.settle_run_and_release("c3", "w2", &handled).unwrap());

    // A pause nobody acted on, as the run parks for its timer: moot, cleared, the row parked.
    let mut sleeping = thread("p1");
    sleeping.status = ThreadStatus::Sleeping;
    store.commit_step(StepCommit::new(sleeping).with_wake_at(NOW + 100)).unwrap();
    claim("p1", "w1", NOW + 4);
    assert!(store.control_run("p1", RunControl::Pause).unwrap());
    assert!(store.settle_run_and_release("p1", "w1", &Settle::park(RunWait::Timer)).unwrap());
    let parked = row("p1").expect("parked");
    assert_eq!((parked.wait, parked.control), (RunWait::Timer, None));
    assert!(!claimable("p1", "w2", NOW + 5), "parked for its timer");
    // A pause asked once it is parked is refused, writing nothing: set, it would make the row
    // claimable, and the woken run would stop paused and leave the queue.
    let refused = store.control_run("p1", RunControl::Pause).unwrap_err();
    assert!(
        matches!(refused, QueueError::Waiting { ref thread, wait: RunWait::Timer } if thread == "p1"),
        "{refused:?}"
    );
    assert_eq!(row("p1").map(|r| (r.wait, r.control)), Some((RunWait::Timer, None)));
    assert!(!claimable("p1", "w2", NOW + 5), "still parked for its timer");
    // As the run ends: the row leaves the queue.
    claim("p2", "w1", NOW + 6);
    assert!(store.control_run("p2", RunControl::Pause).unwrap());
    assert!(store.settle_run_and_release("p2", "w1", &Settle::remove()).unwrap());
    assert_eq!(row("p2"), None);
    // Acted on, the run parked anyway (it reached a wait first): cleared, parked for the
    // approvals named.
    claim("p3", "w1", NOW + 7);
    store.put_approval(approval("a-p3", "p3"), "agent").unwrap();
    assert!(store.control_run("p3", RunControl::Pause).unwrap());
    let waits = Settle::await_approvals(vec!["a-p3".to_string()]).handled(Some(RunControl::Pause));
    assert!(store.settle_run_and_release("p3", "w1", &waits).unwrap());
    let parked = row("p3").expect("parked");
    assert_eq!((parked.wait, parked.control), (RunWait::Approval, None));
    let audited = NewAuditEntry::new(NOW + 7, "ops", "run.pause_requested", json!({}));
    let refused = store.control_run_audited("p3", RunControl::Pause, audited).unwrap_err();
    assert!(matches!(refused, QueueError::Waiting { wait: RunWait::Approval, .. }), "{refused:?}");
    assert!(store.list_audit("p3").unwrap().iter().all(|e| e.kind != "run.pause_requested"), "nothing written");
    assert!(!claimable("p3", "w2", NOW + 7), "still parked for its approval");
    // A cancel of a parked run is set: the next claim ends it.
    assert!(store.control_run("p3", RunControl::Cancel).unwrap());
    assert!(claimable("p3", "w2", NOW + 7));
    assert!(store.settle_run_and_release("p3", "w2", &handled).unwrap());
    // A pause asked after a cancel does not take its place.
    claim("p5", "w1", NOW + 9);
    assert!(store.control_run("p5", RunControl::Cancel).unwrap());
    assert!(store.control_run("p5", RunControl::Pause).unwrap());
    assert_eq!(row("p5").and_then(|r| r.control), Some(RunControl::Cancel), "the cancel stands");
    // A holder that lost the claim changes nothing, request or not.
    claim("p4", "w1", NOW + 8);
    assert!(store.control_run("p4", RunControl::Cancel).unwrap());
    assert!(!store.settle_run("p4", "w9", &handled).unwrap());
    assert_eq!(row("p4").and_then(|r| r.control), Some(RunControl::Cancel));
}

/// 8 claimers race for 20 runs: every run goes to exactly one.
pub fn run_queue_claim_race(store: &dyn Store) {
    for i in 0..20 {
        store.enqueue_run(NewRun::new(&format!("r{i:02}"), "g", None, "", NOW + i)).unwrap();
    }
    let barrier = Barrier::new(8);
    let claimed: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|w| {
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    let mut mine = Vec::new();
                    loop {
                        let got = store.claim_runs("g", &format!("w{w}"), 60_000, NOW + 100, 2).unwrap();
                        if got.is_empty() {
                            break mine;
                        }
                        mine.extend(got.into_iter().map(|r| r.thread));
                    }
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    let unique: BTreeSet<&String> = claimed.iter().collect();
    assert_eq!((claimed.len(), unique.len()), (20, 20), "{claimed:?}");
}
