//! The suite every [`Store`] implementation must pass (feature `testing`).
//!
//! Each case takes a fresh, empty store and panics on a failed expectation. States in the suite
//! are byte strings and applying a delta appends its blobs, so a chain is checked by
//! concatenation:
//!
//! ```
//! # #[cfg(feature = "testing")] {
//! use agentflow_store::{conformance, RedbStore, Store};
//! conformance::run_all(&|| Box::new(RedbStore::in_memory().unwrap()) as Box<dyn Store>);
//! # }
//! ```

use std::collections::BTreeSet;
use std::sync::Barrier;

use serde_json::{Value, json};

use crate::{
    ApprovalArgs, ApprovalError, ApprovalPatch, ApprovalRecord, ApprovalStatus, ApprovalTransition, BoxError,
    BreakerOp, BreakerRule, BreakerState, BreakerUpdate, Checkpoint, CheckpointMetadata, CheckpointSource, CommitError,
    CompactError, Durability, EffectBatch, EffectKey, EffectOutcome, LeaseError, NewAuditEntry, NewRun, PendingWrite,
    QueueError, RunControl, RunWait, Settle, StateChain, StepCommit, Store, ThreadRecord, ThreadStatus,
};

/// A fixed clock for the suite (unix millis).
pub const NOW: u64 = 1_700_000_000_000;

/// One case of the suite: it gets a fresh, empty store.
pub type Case = fn(&dyn Store);

/// Every case, by name.
pub const CASES: &[(&str, Case)] = &[
    ("threads_roundtrip", threads_roundtrip),
    ("child_threads_follow_the_parent_field", child_threads_follow_the_parent_field),
    ("checkpoints_roundtrip", checkpoints_roundtrip),
    ("commit_rules", commit_rules),
    ("state_chain_and_forks", state_chain_and_forks),
    ("pending_writes_lifecycle", pending_writes_lifecycle),
    ("effects_never_overwrite", effects_never_overwrite),
    ("effect_keys_of_one_checkpoint", effect_keys_of_one_checkpoint),
    ("thread_effects_lists_the_whole_journal", thread_effects_lists_the_whole_journal),
    ("audit_is_append_only", audit_is_append_only),
    ("approvals_state_machine", approvals_state_machine),
    ("approvals_in_step_commit", approvals_in_step_commit),
    ("effect_batch_all_or_nothing", effect_batch_all_or_nothing),
    ("effect_batch_refusal_writes_nothing", effect_batch_refusal_writes_nothing),
    ("effect_batch_applies_every_part_together", effect_batch_applies_every_part_together),
    ("effect_batch_fenced_by_the_lease", effect_batch_fenced_by_the_lease),
    ("effect_batch_keeps_pending_writes", effect_batch_keeps_pending_writes),
    ("step_commit_fenced_by_parent_leases", step_commit_fenced_by_parent_leases),
    ("effect_batch_creates_records", effect_batch_creates_records),
    ("approval_cas_race", approval_cas_race),
    ("approvals_outcome_unknown", approvals_outcome_unknown),
    ("lease_rules", lease_rules),
    ("lease_race", lease_race),
    ("group_commit_concurrent", group_commit_concurrent),
    ("eventual_then_flush", eventual_then_flush),
    ("compaction_keeps_retained_readable", compaction_keeps_retained_readable),
    ("compaction_keeps_the_journal_of_a_resumable_thread", compaction_keeps_the_journal_of_a_resumable_thread),
    (
        "compaction_after_a_resume_drops_the_journal_kept_for_it",
        compaction_after_a_resume_drops_the_journal_kept_for_it,
    ),
    ("run_queue_lifecycle", run_queue_lifecycle),
    ("run_queue_parks_for_approvals", run_queue_parks_for_approvals),
    ("run_queue_parks_for_named_approvals", run_queue_parks_for_named_approvals),
    ("run_queue_parks_for_answers", run_queue_parks_for_answers),
    ("run_queue_settle_answers_control_requests", run_queue_settle_answers_control_requests),
    ("run_queue_claim_race", run_queue_claim_race),
    ("timers_follow_the_status", timers_follow_the_status),
    ("breaker_transitions", breaker_transitions),
    ("breaker_race", breaker_race),
    ("graph_descriptions_by_fingerprint", graph_descriptions_by_fingerprint),
    ("restore_thread_writes_a_dump_as_it_was", restore_thread_writes_a_dump_as_it_was),
    ("restore_refuses_what_would_not_read_back", restore_refuses_what_would_not_read_back),
    ("restore_threads_writes_all_or_none", restore_threads_writes_all_or_none),
];

/// Runs every case on a fresh store from `make`, printing each case's name first.
pub fn run_all(make: &dyn Fn() -> Box<dyn Store>) {
    for (name, case) in CASES {
        eprintln!("conformance: {name}");
        let store = make();
        case(store.as_ref());
    }
}

/// A running thread record.
pub fn thread(id: &str) -> ThreadRecord {
    ThreadRecord::new(id, "owner", "fingerprint", 1, NOW)
}

/// A root checkpoint with a snapshot.
pub fn root(thread: &str, seq: u64, snapshot: &[u8]) -> Checkpoint {
    Checkpoint {
        thread: thread.to_string(),
        seq,
        parent: None,
        cursor: vec!["start".to_string()],
        snapshot: Some(snapshot.to_vec()),
        delta: Vec::new(),
        metadata: CheckpointMetadata::new(0, CheckpointSource::Input, Vec::new()),
        created_at: NOW,
    }
}

/// A loop checkpoint with a delta and no snapshot.
pub fn step(thread: &str, seq: u64, parent: u64, delta: &[&[u8]]) -> Checkpoint {
    Checkpoint {
        thread: thread.to_string(),
        seq,
        parent: Some(parent),
        cursor: vec![format!("node{seq}")],
        snapshot: None,
        delta: delta.iter().map(|d| d.to_vec()).collect(),
        metadata: CheckpointMetadata {
            step: seq,
            source: CheckpointSource::Loop,
            nodes: vec![format!("node{parent}")],
            extra: json!({ "seq": seq }),
        },
        created_at: NOW + seq,
    }
}

/// Commits `checkpoint` with the thread record of its thread.
pub fn commit(store: &dyn Store, checkpoint: Checkpoint) {
    let t = thread(&checkpoint.thread);
    store.commit_step(StepCommit::new(t).with_checkpoint(checkpoint)).expect("commit");
}

/// The suite's fold: the state is the snapshot followed by every delta blob.
pub fn concat(chain: &StateChain) -> Vec<u8> {
    let mut state = chain.snapshot.clone();
    for step in &chain.steps {
        for blob in &step.delta {
            state.extend_from_slice(blob);
        }
    }
    state
}

fn state_at(store: &dyn Store, thread: &str, seq: u64) -> Vec<u8> {
    concat(&store.state_chain(thread, seq).unwrap().expect("chain"))
}

/// A pending approval of `thread`.
pub fn approval(id: &str, thread: &str) -> ApprovalRecord {
    ApprovalRecord {
        id: id.to_string(),
        thread: thread.to_string(),
        node: "refund".to_string(),
        tool: "process_refund".to_string(),
        args: r#"{"amount":299}"#.to_string(),
        args_hash: "h299".to_string(),
        risk: "irreversible".to_string(),
        requester: "agent".to_string(),
        reason: "refund over limit".to_string(),
        created_at: NOW,
        expires_at: NOW + 60_000,
        status: ApprovalStatus::Pending,
        decided_by: None,
        decision_note: None,
        conditions: None,
        updated_at: NOW,
    }
}

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

/// Audit entries get consecutive seqs per thread.
pub fn audit_is_append_only(store: &dyn Store) {
    for i in 0..3u64 {
        let seq = store.append_audit("t", NewAuditEntry::new(NOW + i, "alice", "note", json!({ "i": i }))).unwrap();
        assert_eq!(seq, i + 1);
    }
    assert_eq!(store.append_audit("u", NewAuditEntry::new(NOW, "bob", "note", json!(null))).unwrap(), 1);
    let mut c = StepCommit::new(thread("t"));
    c.audit = vec![
        NewAuditEntry::new(NOW, "exec", "update_state", json!({ "field": "x" })),
        NewAuditEntry::new(NOW, "exec", "fork", json!({})),
    ];
    let receipt = store.commit_step(c).unwrap();
    assert_eq!(receipt.audit_seqs, [4, 5]);
    let log = store.list_audit("t").unwrap();
    assert_eq!(log.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2, 3, 4, 5]);
    assert_eq!(log[1].detail, json!({ "i": 1 }));
    assert_eq!(log[3].kind, "update_state");
    assert_eq!(store.list_audit("u").unwrap().len(), 1);
}

/// The approval state machine: legal moves only, compare-and-set, audit per transition.
pub fn approvals_state_machine(store: &dyn Store) {
    use ApprovalStatus::{Approved, Cancelled, Executing, Expired, Failed, Pending, Rejected, Succeeded};
    store.put_approval(approval("a1", "t"), "agent").unwrap();
    store.put_approval(approval("a2", "t"), "agent").unwrap();
    store.put_approval(approval("b1", "u"), "agent").unwrap();
    assert!(matches!(store.put_approval(approval("a1", "t"), "agent"), Err(ApprovalError::AlreadyExists { .. })));
    let mut approved = approval("a3", "t");
    approved.status = Approved;
    assert!(matches!(store.put_approval(approved, "agent"), Err(ApprovalError::NotPending { .. })));
    assert_eq!(store.approval("a1").unwrap(), Some(approval("a1", "t")));
    assert_eq!(store.approval("zz").unwrap(), None);
    let ids = |v: Vec<ApprovalRecord>| v.into_iter().map(|a| a.id).collect::<Vec<_>>();
    assert_eq!(ids(store.list_approvals("t").unwrap()), ["a1", "a2"]);
    assert_eq!(ids(store.list_pending_approvals().unwrap()), ["a1", "a2", "b1"]);

    // Every pair outside the state machine is refused.
    for from in [Pending, Approved, Rejected, Expired, Cancelled, Executing, Succeeded, Failed] {
        for to in [Pending, Approved, Rejected, Expired, Cancelled, Executing, Succeeded, Failed] {
            if !from.can_move_to(to) {
                let err = store.transition_approval("a1", from, to, ApprovalPatch::by("x", NOW)).unwrap_err();
                assert!(matches!(err, ApprovalError::IllegalTransition { .. }), "{err}");
            }
        }
    }
    let err = store.transition_approval("a1", Approved, Executing, ApprovalPatch::by("x", NOW)).unwrap_err();
    assert!(matches!(err, ApprovalError::AlreadyDecided { current: Pending, .. }), "{err}");
    let err = store.transition_approval("nope", Pending, Approved, ApprovalPatch::by("x", NOW)).unwrap_err();
    assert!(matches!(err, ApprovalError::NotFound { .. }), "{err}");

    let mut patch = ApprovalPatch::by("reviewer", NOW + 5);
    patch.decided_by = Some("carol".to_string());
    patch.note = Some("lower the amount".to_string());
    patch.conditions = Some(json!({ "max": 199 }));
    patch.args = Some(ApprovalArgs { canonical: r#"{"amount":199}"#.to_string(), hash: "h199".to_string() });
    let rec = store.transition_approval("a1", Pending, Approved, patch).unwrap();
    assert_eq!(rec.status, Approved);
    assert_eq!(rec.args_hash, "h199");
    assert_eq!(rec.decided_by.as_deref(), Some("carol"));
    assert_eq!(store.approval("a1").unwrap(), Some(rec));
    assert_eq!(ids(store.list_pending_approvals().unwrap()), ["a2", "b1"]);
    let err = store.transition_approval("a1", Pending, Rejected, ApprovalPatch::by("x", NOW)).unwrap_err();
    assert!(matches!(err, ApprovalError::AlreadyDecided { current: Approved, .. }), "{err}");
    store.transition_approval("a1", Approved, Executing, ApprovalPatch::by("exec", NOW + 6)).unwrap();
    let done = store.transition_approval("a1", Executing, Succeeded, ApprovalPatch::by("exec", NOW + 7)).unwrap();
    assert!(done.status.is_final());
    assert_eq!(done.decision_note.as_deref(), Some("lower the amount"));
    store.transition_approval("a2", Pending, Rejected, ApprovalPatch::by("carol", NOW)).unwrap();

    let kinds: Vec<String> = store.list_audit("t").unwrap().into_iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        [
            "approval.requested",
            "approval.requested",
            "approval.approved",
            "approval.executing",
            "approval.succeeded",
            "approval.rejected"
        ]
    );
    let approved_entry = &store.list_audit("t").unwrap()[2];
    assert_eq!(approved_entry.actor, "reviewer");
    assert_eq!(approved_entry.detail["from"], "PENDING");
    assert_eq!(approved_entry.detail["args_hash"], "h199");

    // Null conditions are no conditions: stored, returned and read back as `None` (a JSON form
    // of the record, an export, could not tell them apart).
    let mut null = approval("n1", "v");
    null.conditions = Some(Value::Null);
    store.put_approval(null, "agent").unwrap();
    assert_eq!(store.approval("n1").unwrap().unwrap().conditions, None);
    let mut patch = ApprovalPatch::by("carol", NOW + 1);
    patch.conditions = Some(Value::Null);
    let rec = store.transition_approval("n1", Pending, Approved, patch).unwrap();
    assert_eq!(rec.conditions, None);
    assert_eq!(store.approval("n1").unwrap(), Some(rec));
}

/// Approvals created and moved inside a step commit, all or nothing.
pub fn approvals_in_step_commit(store: &dyn Store) {
    let mut c = StepCommit::new(thread("t")).with_checkpoint(root("t", 0, b"S"));
    c.thread.status = ThreadStatus::Interrupted;
    c.new_approvals.push(approval("a1", "t"));
    let receipt = store.commit_step(c).unwrap();
    assert_eq!(receipt.audit_seqs, [1]);
    assert_eq!(store.approval("a1").unwrap().unwrap().status, ApprovalStatus::Pending);

    let transition =
        |from, to| ApprovalTransition { id: "a1".to_string(), from, to, patch: ApprovalPatch::by("exec", NOW) };
    // A lost compare-and-set refuses the whole commit.
    let mut c = StepCommit::new(thread("t")).with_checkpoint(step("t", 1, 0, &[b"x"]));
    c.approval_transitions.push(transition(ApprovalStatus::Approved, ApprovalStatus::Executing));
    let err = store.commit_step(c).unwrap_err();
    assert!(matches!(err, CommitError::Approval(ApprovalError::AlreadyDecided { .. })), "{err}");
    assert_eq!(store.latest_checkpoint("t").unwrap().unwrap().seq, 0);

    // Two moves of one approval in one commit apply in order.
    let mut c = StepCommit::new(thread("t")).with_checkpoint(step("t", 1, 0, &[b"x"]));
    c.approval_transitions = vec![
        transition(ApprovalStatus::Pending, ApprovalStatus::Approved),
        transition(ApprovalStatus::Approved, ApprovalStatus::Executing),
    ];
    let receipt = store.commit_step(c).unwrap();
    assert_eq!(receipt.audit_seqs, [2, 3]);
    assert_eq!(store.approval("a1").unwrap().unwrap().status, ApprovalStatus::Executing);
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

/// Uncertain outcomes: EXECUTING -> OUTCOME_UNKNOWN, a record created OUTCOME_UNKNOWN, both
/// listed as waiting for a human until decided (succeeded, failed, or approved to run again).
pub fn approvals_outcome_unknown(store: &dyn Store) {
    use ApprovalStatus::{Approved, Executing, Failed, OutcomeUnknown, Pending, Succeeded};
    let ids = |v: Vec<ApprovalRecord>| v.into_iter().map(|a| a.id).collect::<Vec<_>>();
    store.put_approval(approval("a1", "t"), "agent").unwrap();
    store.transition_approval("a1", Pending, Approved, ApprovalPatch::by("alice", NOW)).unwrap();
    store.transition_approval("a1", Approved, Executing, ApprovalPatch::by("exec", NOW)).unwrap();
    store.transition_approval("a1", Executing, OutcomeUnknown, ApprovalPatch::by("exec", NOW)).unwrap();
    let mut effect = approval("e1", "t");
    effect.status = OutcomeUnknown;
    store.put_approval(effect, "exec").unwrap();
    assert_eq!(ids(store.list_pending_approvals().unwrap()), ["a1", "e1"]);
    let err = store.transition_approval("a1", OutcomeUnknown, Executing, ApprovalPatch::by("x", NOW)).unwrap_err();
    assert!(matches!(err, ApprovalError::IllegalTransition { .. }), "{err}");
    store.transition_approval("a1", OutcomeUnknown, Approved, ApprovalPatch::by("bob", NOW)).unwrap();
    let patch = ApprovalPatch { note: Some("{}".into()), ..ApprovalPatch::by("bob", NOW) };
    store.transition_approval("e1", OutcomeUnknown, Succeeded, patch).unwrap();
    assert!(store.list_pending_approvals().unwrap().is_empty());
    assert_eq!(store.approval("e1").unwrap().unwrap().decision_note.as_deref(), Some("{}"));
    let err = store.transition_approval("e1", OutcomeUnknown, Failed, ApprovalPatch::by("x", NOW)).unwrap_err();
    assert!(matches!(err, ApprovalError::AlreadyDecided { current: Succeeded, .. }), "{err}");
    let kinds: Vec<String> = store.list_audit("t").unwrap().into_iter().map(|e| e.kind).collect();
    assert!(kinds.contains(&"approval.outcome_unknown".to_string()), "{kinds:?}");
}

/// 32 threads race PENDING -> APPROVED on one approval: exactly one wins.
pub fn approval_cas_race(store: &dyn Store) {
    store.put_approval(approval("a", "t"), "agent").unwrap();
    let barrier = Barrier::new(32);
    let results: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..32)
            .map(|i| {
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    let mut patch = ApprovalPatch::by(format!("reviewer{i}"), NOW);
                    patch.decided_by = Some(format!("reviewer{i}"));
                    store.transition_approval("a", ApprovalStatus::Pending, ApprovalStatus::Approved, patch)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let winners: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    assert_eq!(winners.len(), 1, "exactly one transition wins");
    let lost = results
        .iter()
        .filter(|r| matches!(r, Err(ApprovalError::AlreadyDecided { current: ApprovalStatus::Approved, .. })))
        .count();
    assert_eq!(lost, 31, "every other caller sees AlreadyDecided");
    let stored = store.approval("a").unwrap().unwrap();
    assert_eq!(stored.decided_by, winners[0].decided_by);
    let approvals_logged = store.list_audit("t").unwrap().iter().filter(|e| e.kind == "approval.approved").count();
    assert_eq!(approvals_logged, 1);
}

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

/// Compaction keeps the newest checkpoints rebuildable and refuses unfinished threads.
pub fn compaction_keeps_retained_readable(store: &dyn Store) {
    commit(store, root("t", 0, b"S"));
    for seq in 1..10u64 {
        commit(store, step("t", seq, seq - 1, &[format!("{seq}").as_bytes()]));
    }
    // A fork from an old checkpoint is among the newest.
    commit(store, step("t", 10, 2, &[b"f"]));
    let mut pending = StepCommit::new(thread("t"));
    pending.pending_writes.push(PendingWrite { seq: 1, node: "n".to_string(), idx: 0, value: b"w".to_vec() });
    pending.audit.push(NewAuditEntry::new(NOW, "exec", "k", json!(null)));
    store.commit_step(pending).unwrap();
    store.record_effect(&EffectKey::new("t", 1, "n", "k"), b"r").unwrap();
    let before: Vec<Vec<u8>> = (0..=10).map(|s| state_at(store, "t", s)).collect();

    let fold = |chain: &StateChain| Ok::<_, BoxError>(concat(chain));
    let err = store.compact("t", 3, &fold).unwrap_err();
    assert!(matches!(err, CompactError::NotFinished { .. }), "{err}");
    assert!(matches!(store.compact("none", 3, &fold), Err(CompactError::UnknownThread { .. })));

    let mut done = thread("t");
    done.status = ThreadStatus::Completed;
    store.commit_step(StepCommit::new(done)).unwrap();
    let failing = |_: &StateChain| Err::<Vec<u8>, BoxError>("no".into());
    let err = store.compact("t", 3, &failing).unwrap_err();
    assert!(matches!(err, CompactError::Fold { .. }), "{err}");
    assert_eq!(store.list_checkpoints("t").unwrap().len(), 11);

    let report = store.compact("t", 3, &fold).unwrap();
    assert_eq!(report.dropped, 8);
    assert_eq!(report.folded, 2, "seq 8 and the fork 10 need a snapshot; 9 follows 8");
    let kept: Vec<u64> = store.list_checkpoints("t").unwrap().iter().map(|c| c.seq).collect();
    assert_eq!(kept, [8, 9, 10]);
    for seq in [8, 9, 10] {
        assert_eq!(state_at(store, "t", seq), before[seq as usize], "seq {seq}");
    }
    assert_eq!(store.checkpoint("t", 3).unwrap(), None);
    assert!(store.pending_writes("t", 1).unwrap().is_empty());
    assert_eq!(store.effect(&EffectKey::new("t", 1, "n", "k")).unwrap(), None);
    assert_eq!(store.list_audit("t").unwrap().len(), 1, "the audit log is kept");
    let again = store.compact("t", 3, &fold).unwrap();
    assert_eq!((again.dropped, again.folded), (0, 0));
}

/// Compaction of a thread that a resume may still run (`failed`, `cancelled`,
/// `budget_exhausted`) keeps the effects of the checkpoints it drops: the next step of such a
/// thread can look its journal up under an older checkpoint's seq (after an update of its
/// state). Pending writes of dropped checkpoints go as usual, and a `completed` or
/// `compensated` thread loses the effects of its dropped checkpoints too.
pub fn compaction_keeps_the_journal_of_a_resumable_thread(store: &dyn Store) {
    let fold = |chain: &StateChain| Ok::<_, BoxError>(concat(chain));
    let cases = [
        ("failed", ThreadStatus::Failed, true),
        ("cancelled", ThreadStatus::Cancelled, true),
        ("budget", ThreadStatus::BudgetExhausted, true),
        ("completed", ThreadStatus::Completed, false),
        ("compensated", ThreadStatus::Compensated, false),
    ];
    for (id, status, resumable) in cases {
        commit(store, root(id, 0, b"S"));
        for seq in 1..4u64 {
            commit(store, step(id, seq, seq - 1, &[format!("{seq}").as_bytes()]));
        }
        let mut pending = StepCommit::new(thread(id));
        pending.pending_writes.push(PendingWrite { seq: 1, node: "n".to_string(), idx: 0, value: b"w".to_vec() });
        store.commit_step(pending).unwrap();
        // Seq 3's step journaled under seq 1, and an effect of seq 2's own step.
        let (old, mid, head) =
            (EffectKey::new(id, 1, "n", "k"), EffectKey::new(id, 2, "n", "k"), EffectKey::new(id, 3, "m", "k"));
        for (key, result) in [(&old, b"r1"), (&mid, b"r2"), (&head, b"r3")] {
            assert_eq!(store.record_effect(key, result).unwrap(), EffectOutcome::Recorded);
        }
        let mut ended = thread(id);
        ended.status = status;
        store.commit_step(StepCommit::new(ended)).unwrap();
        assert_eq!(status.is_resumable(), resumable, "{status}");

        let report = store.compact(id, 1, &fold).unwrap();
        assert_eq!((report.dropped, report.folded), (3, 1), "{status}");
        let kept: Vec<u64> = store.list_checkpoints(id).unwrap().iter().map(|c| c.seq).collect();
        assert_eq!(kept, [3], "{status}");
        assert_eq!(state_at(store, id, 3), b"S123", "{status}");
        assert!(store.pending_writes(id, 1).unwrap().is_empty(), "{status}: pending writes of dropped checkpoints go");
        assert_eq!(store.effect(&head).unwrap(), Some(b"r3".to_vec()), "{status}");
        let journal = |key: &EffectKey| store.effect(key).unwrap();
        if resumable {
            assert_eq!(journal(&old), Some(b"r1".to_vec()), "{status}: the journal of a resumable thread is kept");
            assert_eq!(journal(&mid), Some(b"r2".to_vec()), "{status}");
            assert_eq!(store.effect_keys(id, 1).unwrap(), vec![old.clone()], "{status}");
            // An export carries the kept journal, and a compensation's (the last seq).
            let saga = EffectKey::new(id, crate::record::MAX_CHECKPOINT_SEQ, "saga", "k");
            assert_eq!(store.record_effect(&saga, b"undone").unwrap(), EffectOutcome::Recorded);
            let dump = store.dump_thread(id).unwrap().expect("the thread");
            let dumped: Vec<&EffectKey> = dump.effects.iter().map(|(k, _)| k).collect();
            assert_eq!(dumped, [&old, &mid, &head, &saga], "{status}: the export carries the whole journal");
            // Still journaled once: recording again keeps the first result.
            assert_eq!(store.record_effect(&old, b"again").unwrap(), EffectOutcome::AlreadyRecorded(b"r1".to_vec()));
        } else {
            assert_eq!(journal(&old), None, "{status}: a finished thread's dropped journal goes");
            assert_eq!(journal(&mid), None, "{status}");
            assert!(store.effect_keys(id, 1).unwrap().is_empty(), "{status}");
        }
        let again = store.compact(id, 1, &fold).unwrap();
        assert_eq!((again.dropped, again.folded), (0, 0), "{status}");
    }
}

/// Not in [`CASES`]: for a backend that reads [`Store::dump_thread`] in one snapshot (the
/// default reads part by part, and fails this). While another thread commits `steps` steps,
/// each with an effect of its own in the same commit, dumps of the thread taken meanwhile are
/// each the thread at one moment: the effects are those of its checkpoints, its record's
/// `updated_at` is its latest checkpoint's, and its pending writes are its latest
/// checkpoint's. Answers how many dumps were read while the steps were committed.
pub fn dump_is_one_moment(store: &dyn Store, steps: u64) -> usize {
    let id = "moment";
    let at = |seq: u64| {
        let mut t = thread(id);
        t.updated_at = NOW + seq;
        let mut c = StepCommit::new(t);
        c.pending_writes.push(PendingWrite { seq, node: "n".into(), idx: 0, value: seq.to_string().into_bytes() });
        c.effects.push((EffectKey::new(id, seq, "n", "k"), b"r".to_vec()));
        c
    };
    store.commit_step(at(0).with_checkpoint(root(id, 0, b"S"))).unwrap();
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            for seq in 1..=steps {
                store.commit_step(at(seq).with_checkpoint(step(id, seq, seq - 1, &[b"x"]))).unwrap();
            }
            done.store(true, std::sync::atomic::Ordering::SeqCst);
        });
        let mut dumps = 0;
        while !done.load(std::sync::atomic::Ordering::SeqCst) {
            let dump = store.dump_thread(id).unwrap().expect("the thread");
            let seqs: Vec<u64> = dump.checkpoints.iter().map(|c| c.seq).collect();
            let effects: Vec<u64> = dump.effects.iter().map(|(k, _)| k.seq).collect();
            assert_eq!(effects, seqs, "the effects are those of the checkpoints");
            let latest = *seqs.last().expect("checkpoint 0");
            assert_eq!(dump.thread.updated_at, NOW + latest, "the record is that of the latest checkpoint");
            let writes: Vec<u64> = dump.pending_writes.iter().map(|w| w.seq).collect();
            assert_eq!(writes, [latest], "the pending writes are those of the latest checkpoint");
            dumps += 1;
        }
        dumps
    })
}

/// A thread compacted while it could still be resumed keeps its whole journal. Once it was
/// resumed and completed, the next compaction drops the journal below its oldest retained
/// checkpoint, even when it drops no checkpoint itself; a compensation's effects (the last
/// seq) stay.
pub fn compaction_after_a_resume_drops_the_journal_kept_for_it(store: &dyn Store) {
    let fold = |chain: &StateChain| Ok::<_, BoxError>(concat(chain));
    let id = "r";
    commit(store, root(id, 0, b"S"));
    for seq in 1..4u64 {
        commit(store, step(id, seq, seq - 1, &[format!("{seq}").as_bytes()]));
    }
    let early = EffectKey::new(id, 1, "n", "k");
    assert_eq!(store.record_effect(&early, b"r1").unwrap(), EffectOutcome::Recorded);
    let mut failed = thread(id);
    failed.status = ThreadStatus::Failed;
    store.commit_step(StepCommit::new(failed)).unwrap();
    assert_eq!(store.compact(id, 2, &fold).unwrap().dropped, 2);
    assert_eq!(store.effect(&early).unwrap(), Some(b"r1".to_vec()), "kept for a resume");

    // Resumed: one more step with an effect of its own, and a compensation's; then completed.
    commit(store, step(id, 4, 3, &[b"4"]));
    let late = EffectKey::new(id, 4, "n", "k");
    let saga = EffectKey::new(id, crate::record::MAX_CHECKPOINT_SEQ, "saga", "k");
    for (key, result) in [(&late, b"r4".as_slice()), (&saga, b"undone".as_slice())] {
        assert_eq!(store.record_effect(key, result).unwrap(), EffectOutcome::Recorded);
    }
    let mut done = thread(id);
    done.status = ThreadStatus::Completed;
    store.commit_step(StepCommit::new(done)).unwrap();
    // Checkpoints 2, 3 and 4, all three kept: nothing to drop, the kept journal goes all the same.
    let report = store.compact(id, 3, &fold).unwrap();
    assert_eq!((report.dropped, report.folded), (0, 0));
    assert_eq!(store.effect(&early).unwrap(), None, "the journal kept for the resume went");
    assert_eq!(store.effect(&late).unwrap(), Some(b"r4".to_vec()));
    assert_eq!(store.effect(&saga).unwrap(), Some(b"undone".to_vec()));
    let keys: Vec<EffectKey> = store.thread_effects(id).unwrap().into_iter().map(|(k, _)| k).collect();
    assert_eq!(keys, [late.clone(), saga.clone()]);
    // Down to the last checkpoint: its own journal stays.
    assert_eq!(store.compact(id, 1, &fold).unwrap().dropped, 2);
    assert_eq!(store.effect(&late).unwrap(), Some(b"r4".to_vec()), "seq 4 is retained");
    assert_eq!(state_at(store, id, 4), b"S1234");
}

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

fn breaker_update(op: BreakerOp, holder: &str, now: u64, thread: &str) -> BreakerUpdate {
    BreakerUpdate::new("flaky", op, holder, BreakerRule::new(3, 1_000, 500), now, thread, "executor:n")
}

/// Circuit breakers: a streak of failures opens the breaker (and a success breaks the streak);
/// it refuses calls during the cool-down, admits one probe after it, closes on the probe's
/// success and opens again on its failure; each change of state is audited in the thread whose
/// call caused it, and the breaker is per tool.
pub fn breaker_transitions(store: &dyn Store) {
    let up =
        |op, holder: &str, now, thread: &str| store.update_breaker(breaker_update(op, holder, now, thread)).unwrap();
    assert_eq!(store.breaker("flaky").unwrap(), None, "no record: closed");
    assert!(up(BreakerOp::Admit, "c1", NOW, "a").admitted);
    up(BreakerOp::Failed, "c1", NOW, "a");
    up(BreakerOp::Failed, "c2", NOW, "a");
    assert_eq!(up(BreakerOp::Succeeded, "c3", NOW, "a").record.failures, 0, "a success breaks the streak");
    up(BreakerOp::Failed, "c4", NOW, "a");
    up(BreakerOp::Failed, "c5", NOW, "b");
    let opened = up(BreakerOp::Failed, "c6", NOW + 1, "b");
    assert_eq!((opened.from, opened.record.state), (BreakerState::Closed, BreakerState::Open));
    assert_eq!(opened.record.open_until, NOW + 1 + 1_000);
    let stored = store.breaker("flaky").unwrap().unwrap();
    assert_eq!((stored.state, stored.failures), (BreakerState::Open, 3));
    assert_eq!(store.breaker("other").unwrap(), None, "breakers are per tool");
    // Refused during the cool-down, by any caller.
    let refused = up(BreakerOp::Admit, "c7", NOW + 1_000, "a");
    assert!(!refused.admitted && refused.record.state == BreakerState::Open);
    // One probe after it; the others are refused while it runs.
    let probe = up(BreakerOp::Admit, "p1", NOW + 1_001, "a");
    assert!(probe.admitted && probe.probe);
    assert_eq!(probe.record.state, BreakerState::HalfOpen);
    assert!(!up(BreakerOp::Admit, "p2", NOW + 1_002, "b").admitted);
    // The probe fails: open again for a whole cool-down.
    let reopened = up(BreakerOp::Failed, "p1", NOW + 1_100, "a");
    assert_eq!((reopened.from, reopened.record.state), (BreakerState::HalfOpen, BreakerState::Open));
    assert_eq!(reopened.record.open_until, NOW + 2_100);
    assert!(!up(BreakerOp::Admit, "p2", NOW + 2_099, "b").admitted);
    let probe = up(BreakerOp::Admit, "p2", NOW + 2_100, "b");
    assert!(probe.admitted && probe.probe);
    let closed = up(BreakerOp::Succeeded, "p2", NOW + 2_200, "b");
    assert_eq!(
        (closed.from, closed.record.state, closed.record.failures),
        (BreakerState::HalfOpen, BreakerState::Closed, 0)
    );
    assert!(up(BreakerOp::Admit, "c8", NOW + 2_201, "a").admitted);
    // The audit: each change, in the log of the thread whose call made it.
    let kinds = |thread: &str| -> Vec<String> {
        store
            .list_audit(thread)
            .unwrap()
            .into_iter()
            .filter(|e| e.kind.starts_with("breaker."))
            .map(|e| e.kind)
            .collect()
    };
    assert_eq!(kinds("a"), ["breaker.half_open", "breaker.open"]);
    assert_eq!(kinds("b"), ["breaker.open", "breaker.half_open", "breaker.closed"]);
    let entry = store.list_audit("b").unwrap().into_iter().find(|e| e.kind == "breaker.open").unwrap();
    assert_eq!(entry.actor, "executor:n");
    assert_eq!(entry.detail["tool"], json!("flaky"));
    assert_eq!(entry.detail["from"], json!("CLOSED"));
    assert_eq!(entry.detail["failures"], json!(3));
}

/// Circuit breakers under concurrency: failures reported at once all count, and of callers
/// asking at once after the cool-down exactly one gets the probe.
pub fn breaker_race(store: &dyn Store) {
    let rule = BreakerRule::new(1_000, 1_000, 60_000);
    let barrier = Barrier::new(16);
    std::thread::scope(|s| {
        for i in 0..16 {
            let barrier = &barrier;
            s.spawn(move || {
                barrier.wait();
                for j in 0..5 {
                    let holder = format!("c{i}-{j}");
                    let u = BreakerUpdate::new("flaky", BreakerOp::Failed, &holder, rule, NOW, "t", "executor:n");
                    store.update_breaker(u).unwrap();
                }
            });
        }
    });
    assert_eq!(store.breaker("flaky").unwrap().unwrap().failures, 80, "every failure counts");
    // Open it (the threshold is 80 now), then race 16 callers for the probe.
    let rule = BreakerRule::new(80, 1_000, 60_000);
    let u = BreakerUpdate::new("flaky", BreakerOp::Failed, "last", rule, NOW, "t", "executor:n");
    assert_eq!(store.update_breaker(u).unwrap().record.state, BreakerState::Open);
    let barrier = Barrier::new(16);
    let answers: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..16)
            .map(|i| {
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    let holder = format!("p{i}");
                    let u =
                        BreakerUpdate::new("flaky", BreakerOp::Admit, &holder, rule, NOW + 1_000, "t", "executor:n");
                    store.update_breaker(u).unwrap()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let probes: Vec<_> = answers.iter().filter(|a| a.admitted).collect();
    assert_eq!(probes.len(), 1, "exactly one caller probes");
    assert!(probes[0].probe);
    let stored = store.breaker("flaky").unwrap().unwrap();
    assert_eq!(stored.state, BreakerState::HalfOpen);
    assert_eq!(stored.probe, probes[0].record.probe);
    let half_opens = store.list_audit("t").unwrap().iter().filter(|e| e.kind == "breaker.half_open").count();
    assert_eq!(half_opens, 1);
}

/// A graph's description is kept by fingerprint, read back as written, and replaced by a later
/// write under the same fingerprint; another fingerprint has none.
pub fn graph_descriptions_by_fingerprint(store: &dyn Store) {
    assert_eq!(store.graph_description("f1").unwrap(), None);
    let text = "{\"mermaid\": \"flowchart TD\\n    a --> b\\n\", \"name\": \"g\u{e9}\"}";
    store.put_graph_description("f1", text).unwrap();
    assert_eq!(store.graph_description("f1").unwrap().as_deref(), Some(text));
    assert_eq!(store.graph_description("f2").unwrap(), None);
    store.put_graph_description("f1", "second").unwrap();
    assert_eq!(store.graph_description("f1").unwrap().as_deref(), Some("second"));
}

/// A thread's dump (checkpoints with a fork, a pending write, an effect, audit entries, a
/// decided and a waiting approval, a timer) restored under another id reads back as the same
/// dump; restoring over an existing thread, or an approval id already present, is refused and
/// writes nothing.
pub fn restore_thread_writes_a_dump_as_it_was(store: &dyn Store) {
    let mut t = thread("t");
    store.commit_step(StepCommit::new(t.clone()).with_checkpoint(root("t", 0, b"s"))).unwrap();
    commit(store, step("t", 1, 0, &[b"a"]));
    commit(store, step("t", 2, 1, &[b"b", b"c"]));
    commit(store, step("t", 3, 1, &[b"d"]));
    store.record_effect(&EffectKey::new("t", 3, "n", "k1"), b"result").unwrap();
    store.put_approval(approval("a1", "t"), "agent").unwrap();
    let patch = ApprovalPatch { decided_by: Some("alice".into()), ..ApprovalPatch::by("alice", NOW + 1) };
    store.transition_approval("a1", ApprovalStatus::Pending, ApprovalStatus::Approved, patch).unwrap();
    store.put_approval(approval("a2", "t"), "agent").unwrap();
    store.append_audit("t", NewAuditEntry::new(NOW + 2, "bob", "note", json!({"x": [1, 2]}))).unwrap();
    t.status = ThreadStatus::Sleeping;
    t.detail = "asleep".into();
    let mut last = StepCommit::new(t).with_wake_at(NOW + 500);
    last.pending_writes.push(PendingWrite { seq: 3, node: "__interrupts__".into(), idx: 0, value: b"[1]".to_vec() });
    store.commit_step(last).unwrap();

    let dump = store.dump_thread("t").unwrap().expect("dump");
    assert_eq!(dump.checkpoints.len(), 4);
    assert_eq!(dump.pending_writes.len(), 1);
    assert_eq!(dump.effects.len(), 1);
    assert_eq!(dump.approvals.len(), 2);
    assert_eq!(dump.audit.len(), 4);
    assert_eq!(dump.wake_at, Some(NOW + 500));

    // Over itself: refused, nothing changes.
    assert!(matches!(store.restore_thread(dump.clone()), Err(CommitError::Invalid { .. })));
    // A checkpoint seq past `i64::MAX` (from an edited export file, say): refused, nothing written.
    let mut huge = dump.clone();
    huge.thread.id = "h".into();
    for cp in &mut huge.checkpoints {
        cp.thread = "h".into();
    }
    huge.checkpoints.last_mut().expect("checkpoints").seq = u64::MAX;
    huge.pending_writes.clear();
    huge.effects.clear();
    huge.audit.clear();
    huge.approvals.clear();
    let err = store.restore_thread(huge).unwrap_err();
    assert!(matches!(&err, CommitError::Invalid { reason, .. } if reason.contains("too large")), "{err}");
    assert!(store.thread("h").unwrap().is_none());
    assert_eq!(store.dump_thread("t").unwrap().as_ref(), Some(&dump));

    // JSON the store reads back itself, nested deeper than a commit accepts (an edited export
    // file): refused, nothing written, the thread could not have been read.
    let nested = |depth: usize| (0..depth).fold(json!(0), |inner, _| json!([inner]));
    let deep = |edit: &dyn Fn(&mut crate::ThreadDump)| {
        let mut d = dump.clone();
        d.thread.id = "deep".into();
        for cp in &mut d.checkpoints {
            cp.thread = "deep".into();
        }
        d.pending_writes.clear();
        d.effects.clear();
        d.approvals.clear();
        for e in &mut d.audit {
            e.thread = "deep".into();
        }
        edit(&mut d);
        d
    };
    let err = store
        .restore_thread(deep(&|d| d.checkpoints[1].metadata.extra = json!({ "x": nested(crate::MAX_DOCUMENT_DEPTH) })))
        .unwrap_err();
    assert!(
        matches!(&err, CommitError::TooDeep { source, .. } if source.path.starts_with("checkpoint 1: metadata.extra.x")),
        "{err}"
    );
    let err = store.restore_thread(deep(&|d| d.audit[0].detail = nested(crate::MAX_DOCUMENT_DEPTH + 1))).unwrap_err();
    assert!(
        matches!(&err, CommitError::TooDeep { source, .. } if source.path.starts_with("audit entry 1: detail")),
        "{err}"
    );
    let mut approval = dump.approvals[0].clone();
    approval.thread = "deep".into();
    approval.id = "deep-approval".into();
    approval.conditions = Some(nested(crate::MAX_JSON_DEPTH + 1));
    let err = store.restore_thread(deep(&|d| d.approvals = vec![approval.clone()])).unwrap_err();
    assert!(matches!(&err, CommitError::Approval(ApprovalError::TooDeep { id, .. }) if id == "deep-approval"), "{err}");
    assert!(store.thread("deep").unwrap().is_none());
    assert!(store.approval("deep-approval").unwrap().is_none());
    // At the limits, the same dump is restored and reads back.
    let fits = deep(&|d| {
        d.checkpoints[1].metadata.extra = json!({ "x": nested(crate::MAX_DOCUMENT_DEPTH - 1) });
        d.audit[0].detail = nested(crate::MAX_DOCUMENT_DEPTH);
    });
    store.restore_thread(fits.clone()).unwrap();
    assert_eq!(store.dump_thread("deep").unwrap(), Some(fits));

    // Under another id (approval ids too): the same dump reads back.
    let renamed = |id: &str| format!("{id}-copy");
    let mut copy = dump.clone();
    copy.thread.id = "u".into();
    for cp in &mut copy.checkpoints {
        cp.thread = "u".into();
    }
    for (k, _) in &mut copy.effects {
        k.thread = "u".into();
    }
    for e in &mut copy.audit {
        e.thread = "u".into();
    }
    for a in &mut copy.approvals {
        a.thread = "u".into();
        a.id = renamed(&a.id);
    }
    // One approval id already present: refused as a whole.
    let mut clash = copy.clone();
    clash.approvals[0].id = "a1".into();
    assert!(matches!(store.restore_thread(clash), Err(CommitError::Invalid { .. })));
    assert!(store.thread("u").unwrap().is_none());

    store.restore_thread(copy.clone()).unwrap();
    let back = store.dump_thread("u").unwrap().expect("restored");
    assert_eq!(back, copy);
    assert_eq!(state_at(store, "u", 2), b"sabc".to_vec());
    assert_eq!(state_at(store, "u", 3), b"sad".to_vec());
    let waiting: Vec<String> = store.list_pending_approvals().unwrap().into_iter().map(|a| a.id).collect();
    assert!(waiting.contains(&"a2-copy".to_string()) && !waiting.contains(&"a1-copy".to_string()));
    assert!(store.due_timers(NOW + 500, 10).unwrap().iter().any(|t| t.thread == "u"));
    // The audit log goes on after the restored entries.
    assert_eq!(store.append_audit("u", NewAuditEntry::new(NOW + 3, "bob", "after", json!(null))).unwrap(), 5);

    // A subgraph child comes back with its parent; a parent its id does not extend is refused.
    let child_dump = |id: &str, parent: &str| {
        let mut d = crate::ThreadDump::new(thread(id).child_of(parent));
        d.checkpoints.push(root(id, 0, b"c"));
        d
    };
    for (id, parent) in [("v", "u"), ("uu/settle.0.0.pay", "u"), ("u/settle.0.0.pay", "")] {
        let err = store.restore_thread(child_dump(id, parent)).unwrap_err();
        assert!(
            matches!(&err, CommitError::Invalid { reason, .. } if reason.contains("not a prefix of its id")),
            "{err}"
        );
        assert!(store.thread(id).unwrap().is_none());
    }
    store.restore_thread(child_dump("u/settle.0.0.pay", "u")).unwrap();
    assert_eq!(store.thread("u/settle.0.0.pay").unwrap().unwrap().parent.as_deref(), Some("u"));
}

/// A dump to restore as thread `id`: a root checkpoint, a step, one pending write of the step,
/// one effect, two audit entries and one pending approval.
fn dump_of(id: &str) -> crate::ThreadDump {
    let mut d = crate::ThreadDump::new(thread(id));
    d.checkpoints.push(root(id, 0, b"s"));
    d.checkpoints.push(step(id, 1, 0, &[b"a"]));
    d.pending_writes.push(PendingWrite { seq: 1, node: "n".into(), idx: 0, value: b"w".to_vec() });
    d.effects.push((EffectKey::new(id, 1, "n", "k"), b"r".to_vec()));
    for (seq, kind) in [(1, "one"), (2, "two")] {
        d.audit.push(crate::AuditEntry {
            thread: id.into(),
            seq,
            at: NOW,
            actor: "bob".into(),
            kind: kind.into(),
            detail: json!(null),
        });
    }
    d.approvals.push(approval(&format!("{id}-a"), id));
    d
}

/// What an edited or hostile dump could hold that would not read back as it was, or read
/// back differently on another backend, or leave a thread no commit could go on from: each
/// refused with [`CommitError::Invalid`] saying why, nothing written.
pub fn restore_refuses_what_would_not_read_back(store: &dyn Store) {
    type Edit = fn(&mut crate::ThreadDump);
    let cases: [(&str, Edit, &str); 13] = [
        ("an audit seq past the last", |d| d.audit[1].seq = u64::MAX, "without gaps"),
        ("a gap in the audit seqs", |d| d.audit[1].seq = 3, "without gaps"),
        ("an audit log not from 1", |d| d.audit.remove(0).seq = 0, "without gaps"),
        ("an approval twice", |d| d.approvals.push(d.approvals[0].clone()), "comes twice"),
        ("a pending write twice", |d| d.pending_writes.push(d.pending_writes[0].clone()), "comes twice"),
        ("an effect twice", |d| d.effects.push(d.effects[0].clone()), "comes twice"),
        ("a pending write of no checkpoint", |d| d.pending_writes[0].seq = 7, "not in the dump"),
        ("a NUL byte in the owner", |d| d.thread.owner = "o\0wner".into(), "NUL"),
        ("a NUL byte in an effect key", |d| d.effects[0].0.key = "k\0".into(), "NUL"),
        ("a NUL byte in an audit actor", |d| d.audit[0].actor = "b\0b".into(), "NUL"),
        ("a time past i64::MAX", |d| d.thread.updated_at = u64::MAX, "largest time"),
        ("a parent that is no earlier checkpoint", |d| d.checkpoints[1].parent = Some(1), "not an earlier one"),
        ("a sleeping thread without its timer", |d| d.thread.status = ThreadStatus::Sleeping, "no timer"),
    ];
    for (what, edit, says) in cases {
        let mut d = dump_of("r");
        edit(&mut d);
        let err = store.restore_thread(d).unwrap_err();
        assert!(matches!(&err, CommitError::Invalid { reason, .. } if reason.contains(says)), "{what}: {err}");
        assert!(store.thread("r").unwrap().is_none(), "{what}: written");
        assert!(store.approval("r-a").unwrap().is_none(), "{what}: its approval written");
    }
    // The dump itself is restored, and its log goes on after its last entry.
    let d = dump_of("r");
    store.restore_thread(d.clone()).unwrap();
    assert_eq!(store.dump_thread("r").unwrap(), Some(d));
    assert_eq!(store.append_audit("r", NewAuditEntry::new(NOW + 1, "bob", "after", json!(null))).unwrap(), 3);
}

/// [`Store::restore_threads`] writes a parent and its children as one: a refusal of any of
/// them (here a child whose id exists already) writes none of them.
pub fn restore_threads_writes_all_or_none(store: &dyn Store) {
    let child = |id: &str, parent: &str| {
        let mut d = crate::ThreadDump::new(thread(id).child_of(parent));
        d.checkpoints.push(root(id, 0, b"c"));
        d
    };
    store
        .commit_step(StepCommit::new(thread("p/n.0.0.g").child_of("p")).with_checkpoint(root("p/n.0.0.g", 0, b"x")))
        .unwrap();
    let family = vec![dump_of("p"), child("p/n.0.0.g", "p")];
    let err = store.restore_threads(family).unwrap_err();
    assert!(matches!(&err, CommitError::Invalid { reason, .. } if reason.contains("exists already")), "{err}");
    assert!(store.thread("p").unwrap().is_none(), "the parent was written without its child");
    assert!(store.approval("p-a").unwrap().is_none());
    let family = vec![dump_of("q"), child("q/n.0.0.g", "q"), child("q/n.0.0.g/m.0.0.h", "q/n.0.0.g")];
    store.restore_threads(family.clone()).unwrap();
    for d in family {
        assert_eq!(store.dump_thread(&d.thread.id).unwrap(), Some(d));
    }

    // A thread named twice is refused as such, and nothing is written.
    let err = store.restore_threads(vec![dump_of("w"), dump_of("w")]).unwrap_err();
    assert!(matches!(&err, CommitError::Invalid { reason, .. } if reason.contains("twice")), "{err}");
    assert!(store.thread("w").unwrap().is_none());

    // Records of the thread stored without its record (a run submitted to a worker writes its
    // audit entry and queue row first): the dump is refused, not merged into them.
    let submitted = NewRun::new("s", "graph", Some(b"{}".to_vec()), "owner", NOW);
    store.enqueue_run_audited(submitted, NewAuditEntry::new(NOW, "owner", "run.submitted", json!({}))).unwrap();
    let err = store.restore_threads(vec![dump_of("s")]).unwrap_err();
    assert!(matches!(&err, CommitError::Invalid { reason, .. } if reason.contains("holds audit entries")), "{err}");
    assert!(store.thread("s").unwrap().is_none());
    assert_eq!(store.list_audit("s").unwrap().len(), 1, "the submitted run's entry is as it was");
    let mut journaled = crate::ThreadDump::new(thread("j"));
    journaled.checkpoints.push(root("j", 0, b"j"));
    store.record_effect(&EffectKey::new("j", 0, "node", "key"), b"done").unwrap();
    let err = store.restore_thread(journaled).unwrap_err();
    assert!(matches!(&err, CommitError::Invalid { reason, .. } if reason.contains("journaled results")), "{err}");
}
