//! Effect batches: a refusal writes nothing, every part lands together, and the lease fences
//! the batch (and a step commit) of a thread and of its parents.

use serde_json::json;

use crate::conformance::fixtures::{NOW, approval, root, step, thread};
use crate::{
    ApprovalError, ApprovalPatch, ApprovalRecord, ApprovalStatus, ApprovalTransition, CommitError, EffectBatch,
    EffectKey, EffectOutcome, NewAuditEntry, StepCommit, Store,
};

/// A refused part of a `commit_effects` batch (a lost compare-and-set, an illegal move, an
/// unknown approval, an approval of another thread) refuses the whole batch with the typed
/// error, and none of it is written: not the effects journaled before the refused part, not
/// the earlier transitions of the batch, not its audit entries.
pub fn effect_batch_refusal_writes_nothing(store: &dyn Store) {
    use ApprovalStatus::{Approved, Executing, Pending, Succeeded};
    let key = |k: &str| EffectKey { thread: "t".into(), seq: 0, node: "n".into(), key: k.into() };
    let transition =
        |id: &str, from, to| ApprovalTransition { id: id.into(), from, to, patch: ApprovalPatch::by("exec", NOW) };
    store.put_approval(approval("a1", "t"), "agent").unwrap();
    store.transition_approval("a1", Pending, Approved, ApprovalPatch::by("alice", NOW)).unwrap();
    store.put_approval(approval("a2", "t"), "agent").unwrap();
    store.transition_approval("a2", Pending, Approved, ApprovalPatch::by("alice", NOW)).unwrap();
    store.put_approval(approval("b1", "u"), "agent").unwrap();
    store.record_effect(&key("kept"), b"first").unwrap();
    let audit = || store.list_audit("t").unwrap();
    let before = audit();
    assert_eq!(before.len(), 4);

    let refusals: [(&str, Vec<ApprovalTransition>); 4] = [
        // The caller believes a1 is still pending: the compare-and-set is lost.
        ("lost compare-and-set", vec![transition("a1", Pending, Approved)]),
        // a2 may move, a1 may not: the first transition is not applied either.
        (
            "second transition refused",
            vec![transition("a2", Approved, Executing), transition("a1", Executing, Succeeded)],
        ),
        ("unknown approval", vec![transition("a2", Approved, Executing), transition("nope", Approved, Executing)]),
        ("approval of another thread", vec![transition("b1", Pending, Approved)]),
    ];
    for (what, transitions) in refusals {
        let mut batch = EffectBatch::new("t")
            .effect(key("started"), b"1".to_vec())
            .effect(key("kept"), b"second".to_vec())
            .audit(NewAuditEntry::new(NOW, "exec", "never", json!({ "case": what })));
        batch.approval_transitions = transitions;
        let err = store.commit_effects(batch).unwrap_err();
        let expected = match what {
            "lost compare-and-set" => {
                matches!(
                    err,
                    CommitError::Approval(ApprovalError::AlreadyDecided { expected: Pending, current: Approved, .. })
                )
            }
            "second transition refused" => {
                matches!(
                    err,
                    CommitError::Approval(ApprovalError::AlreadyDecided { expected: Executing, current: Approved, .. })
                )
            }
            "unknown approval" => matches!(err, CommitError::Approval(ApprovalError::NotFound { .. })),
            _ => matches!(err, CommitError::Invalid { .. }),
        };
        assert!(expected, "{what}: unexpected error {err}");
        assert_eq!(store.effect(&key("started")).unwrap(), None, "{what}: the refused batch wrote its effect");
        assert_eq!(store.effect(&key("kept")).unwrap().as_deref(), Some(&b"first"[..]), "{what}");
        assert_eq!(store.effect_keys("t", 0).unwrap(), [key("kept")], "{what}");
        let after = audit();
        assert_eq!(after.len(), before.len(), "{what}: the refused batch appended to the audit log: {after:?}");
        assert_eq!(store.approval("a1").unwrap().unwrap().status, Approved, "{what}");
        assert_eq!(store.approval("a2").unwrap().unwrap().status, Approved, "{what}");
        assert_eq!(store.approval("b1").unwrap().unwrap().status, Pending, "{what}");
        assert_eq!(store.list_audit("u").unwrap().len(), 1, "{what}");
    }

    // The same parts, once the transition is right, are all written.
    let batch = EffectBatch::new("t")
        .effect(key("started"), b"1".to_vec())
        .transition(transition("a1", Approved, Executing))
        .audit(NewAuditEntry::new(NOW, "exec", "claimed", json!({})));
    assert_eq!(store.commit_effects(batch).unwrap(), [EffectOutcome::Recorded]);
    assert_eq!(store.effect(&key("started")).unwrap().as_deref(), Some(&b"1"[..]));
    let kinds: Vec<String> = audit().into_iter().map(|e| e.kind).collect();
    assert_eq!(kinds[before.len()..], ["approval.executing", "claimed"]);
}

/// A batch fenced by a holder ([`EffectBatch::fenced_by`]) is written only while that holder
/// has an unexpired lease on the thread: another holder's lease, an expired one or none refuses
/// it with [`CommitError::LeaseLost`] (naming the current lease), and none of it is written
/// (not its effect, its approval's claim, nor its audit entry). An unfenced batch is written
/// whoever holds the lease.
pub fn effect_batch_fenced_by_the_lease(store: &dyn Store) {
    use ApprovalStatus::{Approved, Executing, Pending};
    let key = |k: &str| EffectKey { thread: "t".into(), seq: 0, node: "n".into(), key: k.into() };
    let claim =
        || ApprovalTransition { id: "a1".into(), from: Approved, to: Executing, patch: ApprovalPatch::by("exec", NOW) };
    store.put_approval(approval("a1", "t"), "agent").unwrap();
    store.transition_approval("a1", Pending, Approved, ApprovalPatch::by("alice", NOW)).unwrap();
    let audit_len = || store.list_audit("t").unwrap().len();
    let before = audit_len();
    let batch = |holder: &str, now: u64| {
        EffectBatch::new("t")
            .effect(key("started"), b"1".to_vec())
            .transition(claim())
            .audit(NewAuditEntry::new(NOW, "exec", "started", json!({})))
            .fenced_by(holder, now)
    };
    // No lease at all.
    let err = store.commit_effects(batch("w1", NOW)).unwrap_err();
    assert!(matches!(&err, CommitError::LeaseLost { holder, current: None, .. } if holder == "w1"), "{err}");
    // Another holder's lease.
    store.acquire_lease("t", "w2", 60_000, NOW).unwrap();
    let err = store.commit_effects(batch("w1", NOW + 1)).unwrap_err();
    assert!(
        matches!(&err, CommitError::LeaseLost { current: Some(l), .. } if l.holder == "w2"),
        "another holder's lease: {err}"
    );
    // Its own lease, expired at the batch's `now`.
    let err = store.commit_effects(batch("w2", NOW + 60_000)).unwrap_err();
    assert!(matches!(err, CommitError::LeaseLost { .. }), "an expired lease: {err}");
    assert_eq!(store.effect(&key("started")).unwrap(), None, "a refused batch wrote its effect");
    assert_eq!(store.approval("a1").unwrap().unwrap().status, Approved, "a refused batch claimed its approval");
    assert_eq!(audit_len(), before, "a refused batch appended to the audit log");
    // Its own unexpired lease, but a parent's lease it is also fenced by is another holder's
    // (a subgraph child's run whose parent lost its thread), or missing: refused, naming the
    // parent's thread.
    store.acquire_lease("p", "thief", 60_000, NOW).unwrap();
    let parents = |holder: &str| vec![("p".to_string(), holder.to_string()), ("q".to_string(), "wq".to_string())];
    let err = store.commit_effects(batch("w2", NOW + 2).fenced_by_parents(parents("wp"))).unwrap_err();
    assert!(
        matches!(&err, CommitError::LeaseLost { thread, current: Some(l), .. } if thread == "p" && l.holder == "thief"),
        "a parent's lease lost: {err}"
    );
    store.release_lease("p", "thief").unwrap();
    store.acquire_lease("p", "wp", 60_000, NOW).unwrap();
    let err = store.commit_effects(batch("w2", NOW + 2).fenced_by_parents(parents("wp"))).unwrap_err();
    assert!(matches!(&err, CommitError::LeaseLost { thread, .. } if thread == "q"), "a grandparent's lease: {err}");
    assert_eq!(store.effect(&key("started")).unwrap(), None, "a refused batch wrote its effect");
    store.acquire_lease("q", "wq", 60_000, NOW).unwrap();
    // Its own unexpired lease and its parents': all of it is written.
    let fenced = batch("w2", NOW + 2).fenced_by_parents(parents("wp"));
    assert_eq!(store.commit_effects(fenced).unwrap(), [EffectOutcome::Recorded]);
    assert_eq!(store.approval("a1").unwrap().unwrap().status, Executing);
    // Unfenced, under another holder's lease: written (a result is a fact, whoever records it).
    let result = EffectBatch::new("t").effect(key("result"), b"done".to_vec());
    assert_eq!(store.commit_effects(result).unwrap(), [EffectOutcome::Recorded]);
}

/// A subgraph child's step commit fenced by its parents' leases
/// ([`StepCommit::fenced_by_parents`]) is refused, naming the parent's thread and writing
/// nothing, unless every one of them is held by its holder, unexpired at the commit's `now`:
/// a one-checkpoint commit (which PostgreSQL sends in one round trip) and one with an audit
/// entry (checked statement by statement) alike.
pub fn step_commit_fenced_by_parent_leases(store: &dyn Store) {
    store.acquire_lease("c", "wc", 600_000, NOW).unwrap();
    let parents = vec![("p".to_string(), "wp".to_string()), ("q".to_string(), "wq".to_string())];
    let plain = |now: u64| {
        StepCommit::new(thread("c"))
            .with_checkpoint(root("c", 0, b"S"))
            .fenced_by("wc", now)
            .fenced_by_parents(parents.clone())
    };
    let audited = |now: u64| {
        let mut commit = plain(now);
        commit.audit.push(NewAuditEntry::new(NOW, "exec", "child.step", json!({})));
        commit
    };
    let written = || store.thread("c").unwrap().is_some() || store.latest_checkpoint("c").unwrap().is_some();
    // The parent's thread taken by another holder.
    store.acquire_lease("p", "thief", 60_000, NOW).unwrap();
    for commit in [plain(NOW + 1), audited(NOW + 1)] {
        let err = store.commit_step(commit).unwrap_err();
        assert!(
            matches!(&err, CommitError::LeaseLost { thread, current: Some(l), .. } if thread == "p" && l.holder == "thief"),
            "a parent's lease lost: {err}"
        );
        assert!(!written(), "a refused child commit wrote its thread");
    }
    // The parent's lease back with its run; the grandparent's missing.
    store.release_lease("p", "thief").unwrap();
    store.acquire_lease("p", "wp", 60_000, NOW).unwrap();
    for commit in [plain(NOW + 2), audited(NOW + 2)] {
        let err = store.commit_step(commit).unwrap_err();
        assert!(matches!(&err, CommitError::LeaseLost { thread, .. } if thread == "q"), "a grandparent's lease: {err}");
        assert!(!written(), "a refused child commit wrote its thread");
    }
    store.acquire_lease("q", "wq", 60_000, NOW).unwrap();
    // Both held, but expired at the commit's `now`.
    for commit in [plain(NOW + 60_000), audited(NOW + 60_000)] {
        let err = store.commit_step(commit).unwrap_err();
        assert!(
            matches!(&err, CommitError::LeaseLost { thread, .. } if thread == "p"),
            "an expired parent lease: {err}"
        );
        assert!(!written(), "a refused child commit wrote its thread");
    }
    // Every lease held: written.
    store.commit_step(audited(NOW + 3)).unwrap();
    assert_eq!(store.latest_checkpoint("c").unwrap().map(|cp| cp.seq), Some(0));
    // The parents' checks do not hide the commit's own refusal (here a seq taken already).
    let err = store.commit_step(audited(NOW + 4)).unwrap_err();
    assert!(matches!(err, CommitError::SeqNotIncreasing { .. }), "{err}");
    let next = StepCommit::new(thread("c"))
        .with_checkpoint(step("c", 1, 0, &[b"+1"]))
        .fenced_by("wc", NOW + 4)
        .fenced_by_parents(parents.clone());
    store.commit_step(next).unwrap();
    assert_eq!(store.latest_checkpoint("c").unwrap().map(|cp| cp.seq), Some(1));
}

/// [`EffectBatch::new_approvals`]: a batch creates its records as `put_approval` does, with an
/// `approval.requested` entry by the requester, fenced like the rest of the batch; an id that
/// exists already refuses the whole batch.
pub fn effect_batch_creates_records(store: &dyn Store) {
    use ApprovalStatus::{OutcomeUnknown, Pending};
    let key = EffectKey { thread: "t".into(), seq: 0, node: "n".into(), key: "k".into() };
    let unknown = ApprovalRecord { status: OutcomeUnknown, ..approval("u1", "t") };
    let requested = || store.list_audit("t").unwrap().into_iter().filter(|e| e.kind == "approval.requested").count();
    // Fenced: without the lease, nothing is created.
    let err =
        store.commit_effects(EffectBatch::new("t").new_approval(unknown.clone()).fenced_by("w1", NOW)).unwrap_err();
    assert!(matches!(err, CommitError::LeaseLost { .. }), "{err}");
    assert!(store.approval("u1").unwrap().is_none());
    // Under the lease: created, listed for a human, audited by its requester.
    store.acquire_lease("t", "w1", 60_000, NOW).unwrap();
    let batch = EffectBatch::new("t").new_approval(unknown.clone()).fenced_by("w1", NOW + 1);
    store.commit_effects(batch).unwrap();
    assert_eq!(store.approval("u1").unwrap().map(|a| a.status), Some(OutcomeUnknown));
    assert!(store.list_pending_approvals().unwrap().iter().any(|a| a.id == "u1"));
    assert_eq!(requested(), 1);
    let entry = store.list_audit("t").unwrap().into_iter().find(|e| e.kind == "approval.requested").unwrap();
    assert_eq!(entry.actor, unknown.requester);
    // The same id again: the batch is refused as a whole (its effect not written either).
    let again = EffectBatch::new("t").effect(key.clone(), b"r".to_vec()).new_approval(unknown.clone());
    let err = store.commit_effects(again).unwrap_err();
    assert!(matches!(err, CommitError::Approval(ApprovalError::AlreadyExists { .. })), "{err}");
    assert_eq!(store.effect(&key).unwrap(), None);
    assert_eq!(requested(), 1);
    // A record of another thread, or one that is not waiting: refused.
    let err = store.commit_effects(EffectBatch::new("t").new_approval(approval("o1", "other"))).unwrap_err();
    assert!(matches!(err, CommitError::Invalid { .. }), "{err}");
    let decided = ApprovalRecord { status: ApprovalStatus::Approved, ..approval("d1", "t") };
    assert!(store.commit_effects(EffectBatch::new("t").new_approval(decided)).is_err());
    assert!(store.approval("o1").unwrap().is_none() && store.approval("d1").unwrap().is_none());
    // A pending approval created and moved on in one batch.
    let claim = ApprovalTransition {
        id: "p1".into(),
        from: Pending,
        to: ApprovalStatus::Rejected,
        patch: ApprovalPatch::by("bob", NOW),
    };
    store.commit_effects(EffectBatch::new("t").new_approval(approval("p1", "t")).transition(claim)).unwrap();
    assert_eq!(store.approval("p1").unwrap().map(|a| a.status), Some(ApprovalStatus::Rejected));
}

/// A `commit_effects` batch that is not refused is written as one: the outcomes answer its
/// effects in order (an existing result, or an earlier effect of the batch under the same key,
/// is kept and returned), and a reader never sees part of it: once an effect of the batch is
/// visible, so is its approval's new status.
pub fn effect_batch_applies_every_part_together(store: &dyn Store) {
    use ApprovalStatus::{Approved, Executing, Pending};
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let key = |k: &str| EffectKey { thread: "t".into(), seq: 0, node: "n".into(), key: k.into() };
    let transition =
        |id: &str, from, to| ApprovalTransition { id: id.into(), from, to, patch: ApprovalPatch::by("exec", NOW) };
    store.put_approval(approval("a1", "t"), "agent").unwrap();
    store.transition_approval("a1", Pending, Approved, ApprovalPatch::by("alice", NOW)).unwrap();
    assert_eq!(store.record_effect(&key("old"), b"kept").unwrap(), EffectOutcome::Recorded);

    let batch = EffectBatch::new("t")
        .effect(key("new"), b"v1".to_vec())
        .effect(key("old"), b"replaced?".to_vec())
        .effect(key("new"), b"v2".to_vec())
        .transition(transition("a1", Approved, Executing))
        .audit(NewAuditEntry::new(NOW, "exec", "tool.started", json!({ "n": 1 })));
    let outcomes = store.commit_effects(batch).unwrap();
    assert_eq!(
        outcomes,
        [
            EffectOutcome::Recorded,
            EffectOutcome::AlreadyRecorded(b"kept".to_vec()),
            EffectOutcome::AlreadyRecorded(b"v1".to_vec()),
        ]
    );
    assert_eq!(store.effect(&key("new")).unwrap().as_deref(), Some(&b"v1"[..]));
    assert_eq!(store.effect(&key("old")).unwrap().as_deref(), Some(&b"kept"[..]));
    let a1 = store.approval("a1").unwrap().unwrap();
    assert_eq!((a1.status, a1.updated_at), (Executing, NOW));
    let log = store.list_audit("t").unwrap();
    let kinds: Vec<&str> = log.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds, ["approval.requested", "approval.approved", "approval.executing", "tool.started"]);
    assert_eq!(log.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2, 3, 4]);
    assert_eq!(log[2].detail["from"], "APPROVED");
    assert_eq!(log[3].detail, json!({ "n": 1 }));

    // Claims raced by a reader: it reads a claim's started marker, then its approval; a
    // marker without the claim means the batch became visible in parts.
    const ROUNDS: usize = 24;
    for i in 0..ROUNDS {
        let id = format!("c{i}");
        store.put_approval(approval(&id, "t"), "agent").unwrap();
        store.transition_approval(&id, Pending, Approved, ApprovalPatch::by("alice", NOW)).unwrap();
    }
    /// Stops the reader also when the writer panics.
    struct Stop<'a>(&'a AtomicBool);
    impl Drop for Stop<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Release);
        }
    }
    let (current, done) = (AtomicUsize::new(0), AtomicBool::new(false));
    std::thread::scope(|s| {
        let reader = s.spawn(|| {
            while !done.load(Ordering::Acquire) {
                let id = format!("c{}", current.load(Ordering::Acquire));
                if store.effect(&key(&id)).unwrap().is_some() {
                    let status = store.approval(&id).unwrap().unwrap().status;
                    assert_eq!(status, Executing, "{id}: the started marker is visible without the claim");
                }
            }
        });
        let stop = Stop(&done);
        for i in 0..ROUNDS {
            let id = format!("c{i}");
            current.store(i, Ordering::Release);
            // Give the reader a moment on this round's keys before the batch lands.
            std::thread::sleep(std::time::Duration::from_millis(2));
            let batch =
                EffectBatch::new("t").effect(key(&id), b"1".to_vec()).transition(transition(&id, Approved, Executing));
            assert_eq!(store.commit_effects(batch).unwrap(), [EffectOutcome::Recorded]);
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        drop(stop);
        reader.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
    });
}
