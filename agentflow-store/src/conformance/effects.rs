//! The effect journal: results recorded once per key, listed per checkpoint and per thread,
//! and effect batches written all or nothing.

use serde_json::json;

use crate::conformance::fixtures::{NOW, approval, commit, concat, root, step, thread};
use crate::{
    ApprovalError, ApprovalPatch, ApprovalStatus, ApprovalTransition, CommitError, EffectBatch, EffectKey,
    EffectOutcome, NewAuditEntry, PendingWrite, StateChain, StepCommit, Store, ThreadStatus,
};

/// The effect journal never replaces a recorded result.
pub fn effects_never_overwrite(store: &dyn Store) {
    let key = EffectKey::new("t", 3, "fix", "call-1");
    assert_eq!(store.effect(&key).unwrap(), None);
    assert_eq!(store.record_effect(&key, b"first").unwrap(), EffectOutcome::Recorded);
    assert_eq!(store.record_effect(&key, b"second").unwrap(), EffectOutcome::AlreadyRecorded(b"first".to_vec()));
    assert_eq!(store.effect(&key).unwrap(), Some(b"first".to_vec()));
    let other = EffectKey::new("t", 4, "fix", "call-1");
    assert_eq!(store.effect(&other).unwrap(), None);

    let mut c = StepCommit::new(thread("t"));
    c.effects = vec![(key.clone(), b"third".to_vec()), (other.clone(), b"other".to_vec())];
    store.commit_step(c).unwrap();
    assert_eq!(store.effect(&key).unwrap(), Some(b"first".to_vec()));
    assert_eq!(store.effect(&other).unwrap(), Some(b"other".to_vec()));
}

/// `effect_keys` lists the keys of one (thread, seq), in node then key byte order, and no other.
pub fn effect_keys_of_one_checkpoint(store: &dyn Store) {
    assert!(store.effect_keys("t", 5).unwrap().is_empty());
    let mark = "charge\u{1f}started\u{1f}1";
    for (thread, seq, node, key) in [
        ("t", 5, "pay", "b"),
        ("t", 5, "pay", mark),
        ("t", 5, "ask", "z"),
        ("t", 4, "pay", "a"),
        ("t", 6, "pay", "a"),
        ("t-2", 5, "pay", "a"),
        ("s", 5, "pay", "a"),
    ] {
        store.record_effect(&EffectKey::new(thread, seq, node, key), b"r").unwrap();
    }
    let mut c = StepCommit::new(thread("t"));
    c.effects = vec![(EffectKey::new("t", 5, "pay", "Z-upper"), b"s".to_vec())];
    store.commit_step(c).unwrap();
    assert_eq!(
        store.effect_keys("t", 5).unwrap(),
        vec![
            EffectKey::new("t", 5, "ask", "z"),
            EffectKey::new("t", 5, "pay", "Z-upper"),
            EffectKey::new("t", 5, "pay", "b"),
            EffectKey::new("t", 5, "pay", mark),
        ]
    );
    assert_eq!(store.effect_keys("t-2", 5).unwrap(), vec![EffectKey::new("t-2", 5, "pay", "a")]);
    assert!(store.effect_keys("u", 5).unwrap().is_empty());
    assert!(store.effect_keys("t", u64::MAX).unwrap().is_empty());
}

/// `thread_effects` lists every effect of one thread with its result, ordered by seq, node and
/// key (byte order): the journal of checkpoints compacted away and of the last seq too, and
/// nothing of another thread (whose id may start like this one's).
pub fn thread_effects_lists_the_whole_journal(store: &dyn Store) {
    assert!(store.thread_effects("t").unwrap().is_empty());
    store.commit_step(StepCommit::new(thread("t")).with_checkpoint(root("t", 0, b"s"))).unwrap();
    for seq in 1..=6 {
        commit(store, step("t", seq, seq - 1, &[b"x"]));
    }
    let last = crate::record::MAX_CHECKPOINT_SEQ;
    let mark = "charge\u{1f}started\u{1f}1";
    for (thread, seq, node, key) in [
        ("t", 5, "pay", "b"),
        ("t", 5, "pay", mark),
        ("t", 0, "ask", "z"),
        ("t", 6, "ask", "a"),
        ("t", last, "refund", "r"),
        ("t", 2, "pay", "a"),
        ("t-2", 5, "pay", "a"),
        ("t!", 1, "pay", "a"),
        ("s", 5, "pay", "a"),
    ] {
        store.record_effect(&EffectKey::new(thread, seq, node, key), format!("{seq}{key}").as_bytes()).unwrap();
    }
    let mut c = StepCommit::new(thread("t"));
    c.effects = vec![(EffectKey::new("t", 5, "pay", "Z-upper"), b"5Z-upper".to_vec())];
    store.commit_step(c).unwrap();
    let expected: Vec<(EffectKey, Vec<u8>)> = [
        (0, "ask", "z"),
        (2, "pay", "a"),
        (5, "pay", "Z-upper"),
        (5, "pay", "b"),
        (5, "pay", mark),
        (6, "ask", "a"),
        (last, "refund", "r"),
    ]
    .into_iter()
    .map(|(seq, node, key)| (EffectKey::new("t", seq, node, key), format!("{seq}{key}").into_bytes()))
    .collect();
    assert_eq!(store.thread_effects("t").unwrap(), expected);
    // Compacting the checkpoints of a thread that can still resume keeps their journal, listed.
    let mut failed = thread("t");
    failed.status = ThreadStatus::Failed;
    store.commit_step(StepCommit::new(failed)).unwrap();
    store.compact("t", 1, &|chain: &StateChain| Ok(concat(chain))).unwrap();
    assert_eq!(store.list_checkpoints("t").unwrap().len(), 1);
    assert_eq!(store.thread_effects("t").unwrap(), expected);
    // Another thread's listing has none of this one's (whether it lists effects of a thread
    // without checkpoints is the backend's: the default reads the seqs of checkpoints).
    assert!(store.thread_effects("t-2").unwrap().iter().all(|(k, _)| k.thread == "t-2"));
    assert!(store.thread_effects("u").unwrap().is_empty());
}

/// `commit_effects`: effects, then approval compare-and-sets (with their audit entries), then
/// audit entries; a lost compare-and-set or a part of another thread refuses the batch, which
/// leaves nothing of it written, not even the effects before the refused part.
pub fn effect_batch_all_or_nothing(store: &dyn Store) {
    use ApprovalStatus::{Approved, Executing, Pending, Succeeded};
    let key = |k: &str| EffectKey { thread: "t".into(), seq: 0, node: "n".into(), key: k.into() };
    let transition = |from, to| ApprovalTransition { id: "a1".into(), from, to, patch: ApprovalPatch::by("exec", NOW) };
    store.put_approval(approval("a1", "t"), "agent").unwrap();
    store.transition_approval("a1", Pending, Approved, ApprovalPatch::by("alice", NOW)).unwrap();
    let audit_len = || store.list_audit("t").unwrap().len();
    assert_eq!(audit_len(), 2);

    // The claim and the started marker, together.
    let claim = EffectBatch::new("t").effect(key("started"), b"1".to_vec()).transition(transition(Approved, Executing));
    assert_eq!(store.commit_effects(claim.clone()).unwrap(), [EffectOutcome::Recorded]);
    assert_eq!(store.approval("a1").unwrap().unwrap().status, Executing);
    assert_eq!(store.effect(&key("started")).unwrap().as_deref(), Some(&b"1"[..]));
    assert_eq!(store.list_audit("t").unwrap().last().unwrap().kind, "approval.executing");

    // A second claim loses the compare-and-set: none of it is written, neither its started
    // marker (before the compare-and-set) nor its audit entry (after it).
    let again = EffectBatch::new("t")
        .effect(key("started-again"), b"2".to_vec())
        .transition(transition(Approved, Executing))
        .audit(NewAuditEntry::new(NOW, "exec", "never", json!({})));
    let err = store.commit_effects(again).unwrap_err();
    assert!(matches!(err, CommitError::Approval(ApprovalError::AlreadyDecided { current: Executing, .. })), "{err}");
    assert_eq!(store.effect(&key("started-again")).unwrap(), None, "a refused batch wrote its effect");
    assert_eq!(audit_len(), 3);
    assert_eq!(store.approval("a1").unwrap().unwrap().status, Executing);

    // A part of another thread refuses the batch before anything is written.
    let foreign = EffectBatch::new("t")
        .effect(EffectKey { thread: "u".into(), ..key("x") }, b"x".to_vec())
        .audit(NewAuditEntry::new(NOW, "exec", "never", json!({})));
    assert!(matches!(store.commit_effects(foreign).unwrap_err(), CommitError::Invalid { .. }));
    assert_eq!(store.effect(&EffectKey { thread: "u".into(), ..key("x") }).unwrap(), None);
    assert_eq!(audit_len(), 3);

    // The result with the settling transition and an audit entry; an existing effect is kept.
    let settle = EffectBatch::new("t")
        .effect(key("started"), b"2".to_vec())
        .effect(key("result"), b"ok".to_vec())
        .transition(transition(Executing, Succeeded))
        .audit(NewAuditEntry::new(NOW, "exec", "tool.done", json!({ "ok": true })));
    let outcomes = store.commit_effects(settle).unwrap();
    assert_eq!(outcomes, [EffectOutcome::AlreadyRecorded(b"1".to_vec()), EffectOutcome::Recorded]);
    assert_eq!(store.effect(&key("started")).unwrap().as_deref(), Some(&b"1"[..]));
    assert_eq!(store.effect(&key("result")).unwrap().as_deref(), Some(&b"ok"[..]));
    assert_eq!(store.approval("a1").unwrap().unwrap().status, Succeeded);
    let kinds: Vec<String> = store.list_audit("t").unwrap().into_iter().map(|e| e.kind).collect();
    assert_eq!(kinds[3..], ["approval.succeeded", "tool.done"]);
}

/// `commit_effects` keeps a batch's pending writes as a step commit would (a write under a
/// stored key replaces it), fenced by the batch's lease: a batch refused for a lost lease keeps
/// none of them, and the next step commit from their checkpoint drops them.
pub fn effect_batch_keeps_pending_writes(store: &dyn Store) {
    commit(store, root("t", 0, b"S"));
    let write =
        |seq, node: &str, idx, value: &[u8]| PendingWrite { seq, node: node.to_string(), idx, value: value.to_vec() };
    store.acquire_lease("t", "w1", 60_000, NOW).unwrap();
    let batch = |holder: &str, writes: Vec<PendingWrite>| {
        writes.into_iter().fold(EffectBatch::new("t").fenced_by(holder, NOW + 1), EffectBatch::pending_write)
    };
    assert!(store.commit_effects(batch("w1", vec![write(0, "work", 3, b"i3")])).unwrap().is_empty());
    assert_eq!(store.pending_writes("t", 0).unwrap(), vec![write(0, "work", 3, b"i3")]);
    // Two together, one of them replacing the stored one.
    store.commit_effects(batch("w1", vec![write(0, "work", 0, b"i0"), write(0, "work", 3, b"i3'")])).unwrap();
    assert_eq!(store.pending_writes("t", 0).unwrap(), vec![write(0, "work", 0, b"i0"), write(0, "work", 3, b"i3'")]);
    // Another holder's batch keeps nothing.
    let err = store.commit_effects(batch("w2", vec![write(0, "work", 5, b"i5")])).unwrap_err();
    assert!(matches!(err, CommitError::LeaseLost { .. }), "another holder's batch: {err}");
    assert_eq!(store.pending_writes("t", 0).unwrap().len(), 2, "a refused batch kept its pending write");
    // The step's own commit, from checkpoint 0, drops them.
    commit(store, step("t", 1, 0, &[b"i0", b"i3'"]));
    assert!(store.pending_writes("t", 0).unwrap().is_empty(), "the step's commit left its pending writes");
}
