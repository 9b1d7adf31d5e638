//! Threads, checkpoints, state chains and pending writes, and the step commits that write them.

use std::collections::BTreeSet;
use std::sync::Barrier;

use serde_json::json;

use crate::conformance::fixtures::{NOW, commit, concat, root, state_at, step, thread};
use crate::{
    Checkpoint, CheckpointSource, CommitError, Durability, NewAuditEntry, PendingWrite, StepCommit, Store, ThreadStatus,
};

/// Thread records round-trip, without and with a lease.
pub fn threads_roundtrip(store: &dyn Store) {
    assert_eq!(store.thread("t").unwrap(), None);
    let mut t = thread("t");
    t.status = ThreadStatus::Interrupted;
    t.detail = "waiting for review".to_string();
    store.commit_step(StepCommit::new(t.clone())).unwrap();
    assert_eq!(store.thread("t").unwrap(), Some(t.clone()));

    let lease = store.acquire_lease("t", "w1", 1000, NOW).unwrap();
    assert_eq!(lease.expires_at, NOW + 1000);
    let read = store.thread("t").unwrap().unwrap();
    assert_eq!(read.lease, Some(lease.clone()));

    // A lease on the record given to a commit is ignored; the stored one stays.
    let mut other = t.clone();
    other.lease = None;
    other.status = ThreadStatus::Running;
    store.commit_step(StepCommit::new(other)).unwrap();
    let read = store.thread("t").unwrap().unwrap();
    assert_eq!(read.status, ThreadStatus::Running);
    assert_eq!(read.lease, Some(lease));

    store.commit_step(StepCommit::new(thread("a"))).unwrap();
    // A subgraph child names its parent; a thread of its own names none, whatever its id.
    let child = thread("t/settle.0.0.pay").child_of("t");
    store.commit_step(StepCommit::new(child.clone())).unwrap();
    // A parent the id does not extend is refused: every chain of parents ends.
    for (id, parent) in [("b", "t"), ("t/x", "t/x"), ("tt/x", "t"), ("t/", "t")] {
        let err = store.commit_step(StepCommit::new(thread(id).child_of(parent))).unwrap_err();
        assert!(
            matches!(&err, CommitError::Invalid { reason, .. } if reason.contains("not a prefix of its id")),
            "{err}"
        );
        assert!(store.thread(id).unwrap().is_none());
    }
    store.commit_step(StepCommit::new(thread("t/settle.0.1.pay"))).unwrap();
    assert_eq!(store.thread("t/settle.0.0.pay").unwrap(), Some(child));
    let listed: Vec<(String, Option<String>)> =
        store.list_threads().unwrap().into_iter().map(|t| (t.id, t.parent)).collect();
    let own = |id: &str| (id.to_string(), None);
    assert_eq!(listed, [own("a"), own("t"), ("t/settle.0.0.pay".into(), Some("t".into())), own("t/settle.0.1.pay")]);
}

/// `child_threads` lists the threads whose record names the parent, one level down: not a
/// thread of its own whose id has a child's shape, nor a grandchild, nor the child of a thread
/// whose id starts the same way.
pub fn child_threads_follow_the_parent_field(store: &dyn Store) {
    for record in [
        thread("a"),
        thread("a/n.0.0.g").child_of("a"),
        thread("a/n.1.0.g").child_of("a"),
        thread("a/n.0.0.g/m.0.0.h").child_of("a/n.0.0.g"),
        thread("a/own"),
        thread("ab/n.0.0.g").child_of("ab"),
        thread("a.b/n.0.0.g").child_of("a.b"),
        // A level with a `/` in it (a hand-built graph's name): a child of `a` all the same.
        thread("a/x/n.0.0.g").child_of("a"),
    ] {
        store.commit_step(StepCommit::new(record)).unwrap();
    }
    let ids = |parent: &str| {
        let listing = store.child_threads(parent).unwrap();
        assert!(listing.skipped.is_empty());
        listing.items.into_iter().map(|t| t.id).collect::<Vec<_>>()
    };
    assert_eq!(ids("a"), ["a/n.0.0.g", "a/n.1.0.g", "a/x/n.0.0.g"]);
    assert_eq!(ids("a/n.0.0.g"), ["a/n.0.0.g/m.0.0.h"]);
    assert!(ids("a/own").is_empty());
    assert!(ids("nobody").is_empty());
}

/// Checkpoints round-trip; latest and history follow seq order.
pub fn checkpoints_roundtrip(store: &dyn Store) {
    assert_eq!(store.latest_checkpoint("t").unwrap(), None);
    assert!(store.list_checkpoints("t").unwrap().is_empty());
    let c0 = root("t", 0, b"S");
    let c1 = step("t", 1, 0, &[b"a", b"b"]);
    let c5 = step("t", 5, 1, &[]);
    commit(store, c0.clone());
    commit(store, c1.clone());
    commit(store, c5.clone());
    commit(store, root("other", 7, b"X"));
    assert_eq!(store.checkpoint("t", 1).unwrap(), Some(c1.clone()));
    assert_eq!(store.checkpoint("t", 2).unwrap(), None);
    assert_eq!(store.latest_checkpoint("t").unwrap(), Some(c5.clone()));
    let history = store.list_checkpoints("t").unwrap();
    assert_eq!(
        history,
        vec![c0.summary(), c1.summary(), c5.summary()],
        "history is ordered by seq and holds no other thread"
    );
    assert_eq!(history[1].delta_len, 2);
    assert_eq!(history[1].payload_bytes, 2);
    assert!(history[0].has_snapshot);
}

/// Refused commits write nothing.
pub fn commit_rules(store: &dyn Store) {
    commit(store, root("t", 3, b"S"));
    let before = store.thread("t").unwrap();
    let mut changed = thread("t");
    changed.status = ThreadStatus::Failed;

    let with_extras = |cp: Checkpoint| {
        let mut c = StepCommit::new(changed.clone()).with_checkpoint(cp);
        c.audit.push(NewAuditEntry::new(NOW, "x", "k", json!(null)));
        c.pending_writes.push(PendingWrite { seq: 3, node: "n".to_string(), idx: 0, value: b"w".to_vec() });
        c
    };
    let err = store.commit_step(with_extras(root("t", 3, b"S"))).unwrap_err();
    assert!(matches!(err, CommitError::SeqNotIncreasing { seq: 3, latest: 3, .. }), "{err}");
    let err = store.commit_step(with_extras(step("t", 4, 2, &[]))).unwrap_err();
    assert!(matches!(err, CommitError::ParentMissing { parent: 2, .. }), "{err}");
    let mut orphan = step("t", 4, 3, &[]);
    orphan.parent = None;
    let err = store.commit_step(with_extras(orphan)).unwrap_err();
    assert!(matches!(err, CommitError::Invalid { .. }), "{err}");
    let err = store.commit_step(with_extras(root("u", 4, b"S"))).unwrap_err();
    assert!(matches!(err, CommitError::Invalid { .. }), "{err}");
    // A seq past `i64::MAX` (the most a thread can have) is refused, so the next one always fits.
    let err = store.commit_step(with_extras(step("t", i64::MAX as u64 + 1, 3, &[]))).unwrap_err();
    assert!(matches!(&err, CommitError::Invalid { reason, .. } if reason.contains("too large")), "{err}");

    assert_eq!(store.thread("t").unwrap(), before);
    assert!(store.list_audit("t").unwrap().is_empty());
    assert!(store.pending_writes("t", 3).unwrap().is_empty());
    assert_eq!(store.list_checkpoints("t").unwrap().len(), 1);
}

/// `state_chain` walks parents to the nearest snapshot, through forks.
pub fn state_chain_and_forks(store: &dyn Store) {
    commit(store, root("t", 0, b"S"));
    commit(store, step("t", 1, 0, &[b"1"]));
    commit(store, step("t", 2, 1, &[b"2a", b"2b"]));
    let mut c3 = step("t", 3, 2, &[b"3"]);
    c3.snapshot = Some(b"S12a2b3".to_vec());
    commit(store, c3);
    commit(store, step("t", 4, 3, &[b"4"]));
    let mut fork = step("t", 5, 1, &[b"f"]);
    fork.metadata.source = CheckpointSource::Fork;
    commit(store, fork);

    let chain = store.state_chain("t", 2).unwrap().unwrap();
    assert_eq!(chain.snapshot_seq, 0);
    assert_eq!(chain.steps.iter().map(|s| s.seq).collect::<Vec<_>>(), [1, 2]);
    assert_eq!(concat(&chain), b"S12a2b");
    let chain = store.state_chain("t", 4).unwrap().unwrap();
    assert_eq!(chain.snapshot_seq, 3);
    assert_eq!(concat(&chain), b"S12a2b34");
    let chain = store.state_chain("t", 3).unwrap().unwrap();
    assert!(chain.steps.is_empty());
    assert_eq!(state_at(store, "t", 5), b"S1f");
    assert_eq!(store.state_chain("t", 99).unwrap(), None);
    assert_eq!(store.latest_checkpoint("t").unwrap().unwrap().seq, 5);
}

/// Pending writes are listed per checkpoint and cleared when the next checkpoint commits.
pub fn pending_writes_lifecycle(store: &dyn Store) {
    commit(store, root("t", 0, b"S"));
    let write =
        |seq, node: &str, idx, value: &[u8]| PendingWrite { seq, node: node.to_string(), idx, value: value.to_vec() };
    let mut failed = StepCommit::new(thread("t"));
    failed.thread.status = ThreadStatus::Failed;
    failed.pending_writes = vec![write(0, "b", 0, b"b0"), write(0, "a", 1, b"a1"), write(0, "a", 0, b"a0")];
    store.commit_step(failed).unwrap();
    let mut other = StepCommit::new(thread("u"));
    other.pending_writes = vec![write(0, "a", 0, b"u")];
    store.commit_step(other).unwrap();

    let listed = store.pending_writes("t", 0).unwrap();
    assert_eq!(listed, vec![write(0, "a", 0, b"a0"), write(0, "a", 1, b"a1"), write(0, "b", 0, b"b0")]);
    assert!(store.pending_writes("t", 1).unwrap().is_empty());

    commit(store, step("t", 1, 0, &[b"a0", b"a1", b"b0", b"c"]));
    assert!(store.pending_writes("t", 0).unwrap().is_empty());
    assert_eq!(store.pending_writes("u", 0).unwrap().len(), 1);
}

/// 16 threads commit concurrently; every commit lands.
pub fn group_commit_concurrent(store: &dyn Store) {
    const THREADS: usize = 16;
    const STEPS: u64 = 10;
    let barrier = Barrier::new(THREADS);
    std::thread::scope(|s| {
        for i in 0..THREADS {
            let barrier = &barrier;
            s.spawn(move || {
                let id = format!("t{i:02}");
                barrier.wait();
                commit(store, root(&id, 0, id.as_bytes()));
                for seq in 1..STEPS {
                    let mut c = StepCommit::new(thread(&id)).with_checkpoint(step(&id, seq, seq - 1, &[&[seq as u8]]));
                    c.audit.push(NewAuditEntry::new(NOW, "exec", "step", json!({ "seq": seq })));
                    let receipt = store.commit_step(c).unwrap();
                    assert_eq!(receipt.checkpoint, Some(seq));
                    assert!(receipt.durable);
                }
            });
        }
    });
    assert_eq!(store.list_threads().unwrap().len(), THREADS);
    for i in 0..THREADS {
        let id = format!("t{i:02}");
        let seqs: BTreeSet<u64> = store.list_checkpoints(&id).unwrap().iter().map(|c| c.seq).collect();
        assert_eq!(seqs, (0..STEPS).collect());
        assert_eq!(store.list_audit(&id).unwrap().len(), (STEPS - 1) as usize);
        let mut expected = id.as_bytes().to_vec();
        expected.extend((1..STEPS).map(|s| s as u8));
        assert_eq!(state_at(store, &id, STEPS - 1), expected);
    }
}

/// Eventual commits are visible at once and survive a flush.
pub fn eventual_then_flush(store: &dyn Store) {
    let c = StepCommit::new(thread("t")).with_checkpoint(root("t", 0, b"S")).with_durability(Durability::Eventual);
    let receipt = store.commit_step(c).unwrap();
    assert_eq!(receipt.checkpoint, Some(0));
    assert_eq!(store.latest_checkpoint("t").unwrap().unwrap().seq, 0);
    store.flush().unwrap();
    assert_eq!(store.latest_checkpoint("t").unwrap().unwrap().seq, 0);
}
