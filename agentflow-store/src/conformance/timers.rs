//! Durable timers: a thread's timer follows its status.

use crate::conformance::fixtures::{NOW, commit, root, step, thread};
use crate::{CommitError, StepCommit, Store, ThreadStatus};

/// A thread record with status `Sleeping` commits only with its wake time; the timer is listed
/// by `due_timers` in wake order up to `until`, replaced by the thread's next commit (so a
/// commit without one clears it), also for a thread that is not sleeping.
pub fn timers_follow_the_status(store: &dyn Store) {
    let sleeping = |id: &str| {
        let mut t = thread(id);
        t.status = ThreadStatus::Sleeping;
        t
    };
    commit(store, root("a", 0, b"a"));
    commit(store, root("b", 0, b"b"));
    commit(store, root("c", 0, b"c"));
    assert!(store.due_timers(u64::MAX, 10).unwrap().is_empty());

    // Sleeping without a wake time is refused, and writes nothing.
    let refused = store.commit_step(StepCommit::new(sleeping("a")));
    assert!(matches!(refused, Err(CommitError::Invalid { .. })), "{refused:?}");
    assert_eq!(store.thread("a").unwrap().unwrap().status, ThreadStatus::Running);

    store.commit_step(StepCommit::new(sleeping("a")).with_wake_at(NOW + 300)).unwrap();
    store.commit_step(StepCommit::new(sleeping("b")).with_wake_at(NOW + 100)).unwrap();
    store.commit_step(StepCommit::new(sleeping("c")).with_wake_at(NOW + 100)).unwrap();
    assert_eq!(store.thread("a").unwrap().unwrap().status, ThreadStatus::Sleeping);
    assert_eq!(store.thread_timer("a").unwrap(), Some(NOW + 300));
    let due = |until, limit| -> Vec<(u64, String)> {
        store.due_timers(until, limit).unwrap().into_iter().map(|t| (t.wake_at, t.thread)).collect()
    };
    assert_eq!(due(NOW + 99, 10), vec![]);
    assert_eq!(due(NOW + 100, 10), vec![(NOW + 100, "b".into()), (NOW + 100, "c".into())]);
    assert_eq!(due(u64::MAX, 1), vec![(NOW + 100, "b".into())]);
    assert_eq!(due(u64::MAX, 10).len(), 3);

    // A new sleep replaces the thread's timer; it never has two.
    store.commit_step(StepCommit::new(sleeping("b")).with_wake_at(NOW + 500)).unwrap();
    assert_eq!(due(u64::MAX, 10), vec![(NOW + 100, "c".into()), (NOW + 300, "a".into()), (NOW + 500, "b".into())]);

    // The thread moves on: a commit without a timer clears it.
    store.commit_step(StepCommit::new(thread("c"))).unwrap();
    assert_eq!(store.thread_timer("c").unwrap(), None);
    // Even one that leaves the record as it was.
    store.commit_step(StepCommit::new(thread("c")).with_wake_at(NOW + 50)).unwrap();
    assert_eq!(store.thread_timer("c").unwrap(), Some(NOW + 50));
    store.commit_step(StepCommit::new(thread("c"))).unwrap();
    assert_eq!(store.thread_timer("c").unwrap(), None);
    // A thread paused for a human may wake at its approval's expiry.
    let mut paused = thread("c");
    paused.status = ThreadStatus::Interrupted;
    store.commit_step(StepCommit::new(paused).with_wake_at(NOW + 700)).unwrap();
    assert_eq!(store.thread_timer("c").unwrap(), Some(NOW + 700));
    store.commit_step(StepCommit::new(thread("c"))).unwrap();
    let mut failed = thread("a");
    failed.status = ThreadStatus::Failed;
    store.commit_step(StepCommit::new(failed).with_checkpoint(step("a", 1, 0, &[b"x"]))).unwrap();
    assert_eq!(due(u64::MAX, 10), vec![(NOW + 500, "b".into())]);

    // A refused commit of a sleeping thread leaves its timer as it was.
    let mut stale = StepCommit::new(thread("b")).with_checkpoint(step("b", 5, 4, &[b"y"]));
    stale.wake_at = None;
    assert!(store.commit_step(stale).is_err());
    assert_eq!(store.thread_timer("b").unwrap(), Some(NOW + 500));

    // A sleep "for ever" (a wake time past `i64::MAX`, as `Duration::MAX` gives) commits on every
    // store, and reads back alike: as `i64::MAX`, never due.
    commit(store, root("d", 0, b"d"));
    store.commit_step(StepCommit::new(sleeping("d")).with_wake_at(u64::MAX)).unwrap();
    assert_eq!(store.thread_timer("d").unwrap(), Some(i64::MAX as u64));
    assert_eq!(due(NOW + 1_000_000, 10), vec![(NOW + 500, "b".into())]);
}
