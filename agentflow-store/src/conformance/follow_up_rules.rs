//! Follow-up rules decided in the store: a run held behind a thread that waits outside the
//! queue keeps its follow-ups until the thread's run ends; `Reject`, `Enqueue` and `Interrupt`
//! decide about the thread's run in the transaction that queues the follow-up.

use serde_json::json;

use crate::conformance::fixtures::{NOW, thread};
use crate::{
    FollowUpPlace, FollowUpQueued, FollowUpRule, NewAuditEntry, NewRun, QueueError, QueuedRun, RunControl, RunWait,
    Settle, StepCommit, Store, ThreadStatus,
};

/// A follow-up of `thread` whose input is `input`.
fn follow_up(thread: &str, input: &str, at: u64) -> NewRun {
    NewRun::new(thread, "g", Some(input.as_bytes().to_vec()), "alice", at).as_follow_up(None)
}

fn submitted(at: u64) -> NewAuditEntry {
    NewAuditEntry::new(at, "alice", "run.submitted", json!({ "follow_up": true }))
}

fn cancel(at: u64) -> FollowUpRule {
    FollowUpRule::Interrupt {
        cancel: NewAuditEntry::new(at, "alice", "run.cancel_requested", json!({ "control": "CANCEL" })),
    }
}

/// The inputs of `runs`, as text.
fn inputs(runs: &[QueuedRun]) -> Vec<String> {
    runs.iter().map(|r| String::from_utf8_lossy(r.input.as_deref().unwrap_or_default()).into_owned()).collect()
}

/// The thread's queued run.
fn row(store: &dyn Store, thread: &str) -> Option<QueuedRun> {
    store.list_runs().unwrap().into_iter().find(|r| r.thread == thread)
}

/// Writes thread `id` with status `status`.
fn status(store: &dyn Store, id: &str, status: ThreadStatus) {
    let mut record = thread(id);
    record.status = status;
    store.commit_step(StepCommit::new(record)).unwrap();
}

/// The kinds of the thread's audit entries, oldest first.
fn kinds(store: &dyn Store, thread: &str) -> Vec<String> {
    store.list_audit(thread).unwrap().into_iter().map(|e| e.kind).collect()
}

/// A run that stops where a person continues it is held ([`Settle::hold`]) only while
/// follow-ups wait behind it: it is claimable once woken (a resume) or once the thread's run
/// ended without the queue, and the settle that then removes it puts the first follow-up in its
/// place.
pub fn a_held_run_keeps_follow_ups_until_the_thread_s_run_ends(store: &dyn Store) {
    status(store, "t", ThreadStatus::Interrupted);
    let claim = |holder: &str, now: u64| store.claim_runs("g", holder, 1000, now, 1).unwrap();
    // Nothing behind it: a hold removes the row, as a remove does.
    store.enqueue_run(NewRun::new("t", "g", None, "alice", NOW)).unwrap();
    assert_eq!(claim("w1", NOW + 1).len(), 1);
    assert!(store.settle_run_and_release("t", "w1", &Settle::hold()).unwrap());
    assert!(row(store, "t").is_none());

    store.enqueue_run(NewRun::new("t", "g", None, "alice", NOW + 2)).unwrap();
    assert_eq!(claim("w2", NOW + 3).len(), 1);
    store.enqueue_follow_up(follow_up("t", "f1", NOW + 4), submitted(NOW + 4), FollowUpPlace::Back).unwrap();
    assert!(store.settle_run_and_release("t", "w2", &Settle::hold()).unwrap());
    let held = row(store, "t").expect("held for the follow-up behind it");
    assert_eq!((held.wait, held.follow_up, held.input.as_deref()), (RunWait::Held, false, None));
    assert!(claim("w3", NOW + 10).is_empty(), "held while the thread waits");
    assert!(matches!(store.control_run("t", RunControl::Pause), Err(QueueError::Waiting { wait: RunWait::Held, .. })));

    // A resume wakes it; stopped again, it is held again.
    assert!(!store.wake_run("t", RunWait::Answer).unwrap());
    assert!(store.wake_run("t", RunWait::Held).unwrap());
    assert_eq!(claim("w3", NOW + 11).iter().map(|r| r.held).collect::<Vec<_>>(), [false], "woken, not held");
    assert!(store.settle_run_and_release("t", "w3", &Settle::hold()).unwrap());
    assert_eq!(row(store, "t").map(|r| r.wait), Some(RunWait::Held));

    // Moved on without the queue: still held while paused, claimable once the run ended.
    status(store, "t", ThreadStatus::Paused);
    assert!(claim("w4", NOW + 20).is_empty());
    status(store, "t", ThreadStatus::Completed);
    let claimed = claim("w4", NOW + 21);
    assert_eq!(
        claimed.iter().map(|r| (r.thread.as_str(), r.input.is_none(), r.wait, r.held)).collect::<Vec<_>>(),
        [("t", true, RunWait::Ready, true)],
        "claimed held: its thread's run ended without the queue"
    );
    assert_eq!(inputs(&store.list_follow_ups("t").unwrap()), ["f1"], "the follow-up waited");
    assert!(store.settle_run_and_release("t", "w4", &Settle::remove()).unwrap());
    let next = row(store, "t").expect("the follow-up takes the run's place");
    assert_eq!(
        (inputs(std::slice::from_ref(&next)), next.wait, next.follow_up),
        (vec!["f1".into()], RunWait::Ready, true)
    );
    assert!(store.list_follow_ups("t").unwrap().is_empty());
}

/// `Reject` refuses a thread that is active (nothing written); `Enqueue` of a thread that waits
/// outside the queue holds a run for it first; `Interrupt` asks the thread's run to stop, with
/// its audit entry, and queues the follow-ups so put in the order they came, before the others.
pub fn follow_up_rules_decide_about_the_thread_s_run(store: &dyn Store) {
    let as_rule = |thread: &str, input: &str, at: u64, rule: FollowUpRule| {
        store.enqueue_follow_up_as(follow_up(thread, input, at), submitted(at), rule)
    };
    status(store, "done", ThreadStatus::Completed);
    assert_eq!(as_rule("done", "r1", NOW, FollowUpRule::Reject).unwrap(), FollowUpQueued::Now);
    let refused = as_rule("done", "r2", NOW + 1, FollowUpRule::Reject).unwrap_err();
    assert!(matches!(refused, QueueError::Active { ref thread, ref status } if thread == "done" && status == "queued"));
    assert_eq!((kinds(store, "done").len(), store.list_follow_ups("done").unwrap().len()), (1, 0), "nothing written");

    status(store, "w", ThreadStatus::Interrupted);
    let refused = as_rule("w", "r", NOW, FollowUpRule::Reject).unwrap_err();
    assert!(matches!(refused, QueueError::Active { ref status, .. } if status == "interrupted"));
    assert!(row(store, "w").is_none() && kinds(store, "w").is_empty());
    assert_eq!(as_rule("w", "e1", NOW + 1, FollowUpRule::Enqueue).unwrap(), FollowUpQueued::Behind { ahead: 0 });
    let held = row(store, "w").expect("a run held for the waiting thread");
    assert_eq!((held.wait, held.follow_up, held.input, held.owner.as_str()), (RunWait::Held, false, None, "owner"));
    assert_eq!(inputs(&store.list_follow_ups("w").unwrap()), ["e1"]);

    assert_eq!(as_rule("w", "i1", NOW + 2, cancel(NOW + 2)).unwrap(), FollowUpQueued::Behind { ahead: 0 });
    assert_eq!(as_rule("w", "i2", NOW + 3, cancel(NOW + 3)).unwrap(), FollowUpQueued::Behind { ahead: 1 });
    assert_eq!(inputs(&store.list_follow_ups("w").unwrap()), ["i1", "i2", "e1"]);
    assert_eq!(row(store, "w").and_then(|r| r.control), Some(RunControl::Cancel));
    assert_eq!(
        kinds(store, "w"),
        ["run.submitted", "run.cancel_requested", "run.submitted", "run.cancel_requested", "run.submitted"]
    );
    // The held run, asked to stop, is claimable; its end puts the first interrupt in its place.
    let claimed = store.claim_runs("g", "w1", 1000, NOW + 10, 10).unwrap();
    let claimed: Vec<_> = claimed.into_iter().filter(|r| r.thread == "w").map(|r| (r.control, r.held)).collect();
    assert_eq!(claimed, [(Some(RunControl::Cancel), true)]);
    let handled = Settle::remove().handled(Some(RunControl::Cancel));
    assert!(store.settle_run_and_release("w", "w1", &handled).unwrap());
    assert_eq!(row(store, "w").map(|r| inputs(&[r])), Some(vec!["i1".to_string()]));

    // Without a run in the queue, an interrupt is queued at once, asking nothing to stop.
    status(store, "x", ThreadStatus::Completed);
    assert_eq!(as_rule("x", "i", NOW, cancel(NOW)).unwrap(), FollowUpQueued::Now);
    assert_eq!(kinds(store, "x"), ["run.submitted"]);
}

/// Submitters racing `Reject` follow-ups of one idle thread: exactly one is queued, every other
/// one is refused, and each refusal wrote nothing.
pub fn reject_race_queues_one(store: &dyn Store) {
    const N: usize = 8;
    status(store, "t", ThreadStatus::Completed);
    let answers: Vec<Result<FollowUpQueued, QueueError>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..N)
            .map(|i| {
                s.spawn(move || {
                    let at = NOW + i as u64;
                    store.enqueue_follow_up_as(
                        follow_up("t", &format!("r{i}"), at),
                        submitted(at),
                        FollowUpRule::Reject,
                    )
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let queued = answers.iter().filter(|a| matches!(a, Ok(FollowUpQueued::Now))).count();
    let refused = answers.iter().filter(|a| matches!(a, Err(QueueError::Active { .. }))).count();
    assert_eq!((queued, refused), (1, N - 1), "{answers:?}");
    assert_eq!(kinds(store, "t").len(), 1);
    assert!(store.list_follow_ups("t").unwrap().is_empty());
}

/// `Enqueue` beside a thread whose compensation stopped midway (status `compensating`, no run
/// in the queue) holds a run for it, as beside a paused thread: the follow-up waits until the
/// compensation is resumed (a resume wakes the held run) or the thread moved on.
pub fn enqueue_beside_a_compensating_thread_is_held(store: &dyn Store) {
    status(store, "c", ThreadStatus::Compensating);
    let queued = store.enqueue_follow_up_as(follow_up("c", "e1", NOW), submitted(NOW), FollowUpRule::Enqueue);
    assert_eq!(queued.unwrap(), FollowUpQueued::Behind { ahead: 0 });
    let held = row(store, "c").expect("a run held for the compensating thread");
    assert_eq!((held.wait, held.follow_up, held.input), (RunWait::Held, false, None));
    assert_eq!(inputs(&store.list_follow_ups("c").unwrap()), ["e1"]);
    let claim = |now: u64| store.claim_runs("g", "w1", 1000, now, 10).unwrap().into_iter().filter(|r| r.thread == "c");
    assert_eq!(claim(NOW + 10).count(), 0, "held while the thread compensates");
    status(store, "c", ThreadStatus::Compensated);
    assert_eq!(claim(NOW + 11).map(|r| r.held).collect::<Vec<_>>(), [true], "claimable once it moved on");
}
