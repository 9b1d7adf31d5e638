//! Leases: the rules of acquiring, renewing and releasing, and a race for one thread.

use std::sync::Barrier;

use crate::conformance::fixtures::{NOW, root, thread};
use crate::{CommitError, LeaseError, StepCommit, Store};

/// Leases: busy, renew, release, expiry takeover and commit fencing.
pub fn lease_rules(store: &dyn Store) {
    store.commit_step(StepCommit::new(thread("t"))).unwrap();
    store.acquire_lease("t", "w1", 1000, NOW).unwrap();
    let err = store.acquire_lease("t", "w2", 1000, NOW + 10).unwrap_err();
    assert!(
        matches!(&err, LeaseError::ThreadBusy { holder, expires_at, .. } if holder == "w1" && *expires_at == NOW + 1000),
        "{err}"
    );
    // Re-acquiring by the holder extends.
    assert_eq!(store.acquire_lease("t", "w1", 1000, NOW + 500).unwrap().expires_at, NOW + 1500);
    assert_eq!(store.renew_lease("t", "w1", 2000, NOW + 600).unwrap().expires_at, NOW + 2600);
    assert!(matches!(store.renew_lease("t", "w2", 1000, NOW), Err(LeaseError::NotHeld { .. })));
    assert!(matches!(store.release_lease("t", "w2"), Err(LeaseError::NotHeld { .. })));
    store.commit_step(StepCommit::new(thread("t")).fenced_by("w1", NOW + 700)).unwrap();

    // w1 crashes; once its lease expired w2 takes over and w1 can no longer commit.
    assert!(store.acquire_lease("t", "w2", 1000, NOW + 2599).is_err());
    let lease = store.acquire_lease("t", "w2", 1000, NOW + 2600).unwrap();
    assert_eq!(lease.holder, "w2");
    let err = store
        .commit_step(StepCommit::new(thread("t")).with_checkpoint(root("t", 0, b"S")).fenced_by("w1", NOW + 2601))
        .unwrap_err();
    assert!(matches!(err, CommitError::LeaseLost { .. }), "{err}");
    assert_eq!(store.latest_checkpoint("t").unwrap(), None);
    let err = store.commit_step(StepCommit::new(thread("t")).fenced_by("w2", NOW + 3600)).unwrap_err();
    assert!(matches!(err, CommitError::LeaseLost { .. }), "an expired lease does not fence: {err}");

    store.release_lease("t", "w2").unwrap();
    store.release_lease("t", "w2").unwrap();
    assert_eq!(store.thread("t").unwrap().unwrap().lease, None);
    assert!(matches!(store.renew_lease("t", "w2", 1000, NOW), Err(LeaseError::NotHeld { current: None, .. })));
    // A lease can be taken before the thread record exists.
    store.acquire_lease("new", "w3", 1000, NOW).unwrap();
}

/// 16 holders race for one thread: exactly one gets it.
pub fn lease_race(store: &dyn Store) {
    let barrier = Barrier::new(16);
    let results: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..16)
            .map(|i| {
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    store.acquire_lease("t", &format!("w{i}"), 1000, NOW)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let winners: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    assert_eq!(winners.len(), 1);
    let busy = results
        .iter()
        .filter(|r| matches!(r, Err(LeaseError::ThreadBusy { holder, .. }) if *holder == winners[0].holder))
        .count();
    assert_eq!(busy, 15);
}
