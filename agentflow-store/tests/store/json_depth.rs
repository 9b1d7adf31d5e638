//! The store writes only JSON it reads back: audit details, checkpoint
//! metadata and approval conditions nested too deep are refused, typed, and
//! nothing is written. Every case runs on a redb file, and on PostgreSQL
//! (feature `postgres`) against the server at `AGENTFLOW_PG_URL` (skipped with
//! one line when it is unset): both backends refuse the same inputs.

use crate::common;
#[cfg(feature = "postgres")]
use crate::pg_common;

use agentflow_store::conformance::{self, approval, root, step, thread};
use agentflow_store::{
    ApprovalError, ApprovalPatch, ApprovalStatus, ApprovalTransition, AuditError, CommitError, EffectBatch, EffectKey,
    MAX_DOCUMENT_DEPTH, MAX_JSON_DEPTH, NewAuditEntry, NewRun, QueueError, RedbStore, RunControl, StepCommit, Store,
};
use common::TempDir;
use serde_json::{Value, json};

fn nested(depth: usize) -> Value {
    (0..depth).fold(json!(0), |inner, _| json!([inner]))
}

/// Opens the store a case runs on, again after `close`: what was written reads back from a new
/// instance (the redb file reopened; on PostgreSQL, a store with a pool of its own).
struct Backend<S> {
    open: Box<dyn Fn() -> S>,
    close: fn(S),
}

/// A case, on a backend.
type Case<S> = fn(&Backend<S>);

fn on_redb(tag: &str, case: Case<RedbStore>) {
    let dir = TempDir::new(tag);
    let file = dir.file("store.redb");
    case(&Backend { open: Box::new(move || RedbStore::open(&file).unwrap()), close: |s| s.close().unwrap() });
}

#[cfg(feature = "postgres")]
fn on_postgres(tag: &str, case: Case<agentflow_store::PostgresStore>) {
    let Some(url) = pg_common::url() else { return };
    let schema = std::rc::Rc::new(pg_common::Schema::new(&url, tag));
    let opened = std::rc::Rc::clone(&schema);
    case(&Backend { open: Box::new(move || opened.open()), close: drop });
}

/// Each case on redb, and on PostgreSQL when the feature is on.
macro_rules! on_both {
    ($($case:ident => $redb:ident, $postgres:ident;)*) => {$(
        #[test]
        fn $redb() {
            on_redb(stringify!($case), $case);
        }

        #[cfg(feature = "postgres")]
        #[test]
        fn $postgres() {
            on_postgres("depth", $case);
        }
    )*};
}

on_both! {
    audit_detail => an_audit_detail_deeper_than_the_reader_is_refused,
        an_audit_detail_deeper_than_the_reader_is_refused_on_postgres;
    approval_conditions => approval_conditions_deeper_than_the_limit_are_refused,
        approval_conditions_deeper_than_the_limit_are_refused_on_postgres;
    step_commit => a_step_commit_with_deep_json_writes_nothing,
        a_step_commit_with_deep_json_writes_nothing_on_postgres;
    effect_batch => an_effect_batch_with_deep_json_journals_nothing,
        an_effect_batch_with_deep_json_journals_nothing_on_postgres;
    queue_audit => a_queue_operation_with_a_deep_audit_detail_changes_nothing,
        a_queue_operation_with_a_deep_audit_detail_changes_nothing_on_postgres;
}

fn audit_detail<S: Store>(b: &Backend<S>) {
    let store = (b.open)();
    conformance::commit(&store, root("t", 0, b"S"));
    let err =
        store.append_audit("t", NewAuditEntry::new(1, "ops", "note", nested(MAX_DOCUMENT_DEPTH + 1))).unwrap_err();
    assert!(matches!(&err, AuditError::TooDeep { source, .. } if source.limit == MAX_DOCUMENT_DEPTH), "{err:?}");
    assert!(err.to_string().contains("`detail[0]"), "{err}");
    store.append_audit("t", NewAuditEntry::new(2, "ops", "note", nested(MAX_DOCUMENT_DEPTH))).unwrap();
    let mut commit = StepCommit::new(thread("t"));
    commit.audit.push(NewAuditEntry::new(3, "ops", "deep", json!({ "x": nested(MAX_DOCUMENT_DEPTH) })));
    let err = store.commit_step(commit).unwrap_err();
    assert!(matches!(err, CommitError::TooDeep { .. }), "{err:?}");
    (b.close)(store);
    // What was written reads back.
    let store = (b.open)();
    let log = store.list_audit("t").unwrap();
    assert_eq!(log.iter().map(|e| e.kind.as_str()).collect::<Vec<_>>(), ["note"]);
    assert_eq!(log[0].detail, nested(MAX_DOCUMENT_DEPTH));
}

fn approval_conditions<S: Store>(b: &Backend<S>) {
    let store = (b.open)();
    conformance::commit(&store, root("t", 0, b"S"));
    let mut deep = approval("a0", "t");
    deep.conditions = Some(nested(MAX_JSON_DEPTH + 1));
    assert!(matches!(store.put_approval(deep, "agent").unwrap_err(), ApprovalError::TooDeep { .. }));
    store.put_approval(approval("a1", "t"), "agent").unwrap();
    // 127 levels of conditions: alone they read back, but not inside the audit entry.
    let patch = ApprovalPatch { conditions: Some(nested(127)), ..ApprovalPatch::by("alice", 5) };
    let err = store.transition_approval("a1", ApprovalStatus::Pending, ApprovalStatus::Approved, patch).unwrap_err();
    assert!(matches!(&err, ApprovalError::TooDeep { id, source } if id == "a1" && source.limit == MAX_JSON_DEPTH));
    // Within 2 levels of what the audit reader takes, still refused: conditions come from outside.
    let patch = ApprovalPatch { conditions: Some(nested(125)), ..ApprovalPatch::by("alice", 5) };
    let err = store.transition_approval("a1", ApprovalStatus::Pending, ApprovalStatus::Approved, patch).unwrap_err();
    assert!(matches!(&err, ApprovalError::TooDeep { id, .. } if id == "a1"), "{err:?}");
    assert_eq!(store.approval("a1").unwrap().unwrap().status, ApprovalStatus::Pending);
    let patch = ApprovalPatch { conditions: Some(nested(MAX_JSON_DEPTH)), ..ApprovalPatch::by("alice", 6) };
    store.transition_approval("a1", ApprovalStatus::Pending, ApprovalStatus::Approved, patch).unwrap();
    (b.close)(store);
    let store = (b.open)();
    assert_eq!(store.approval("a1").unwrap().unwrap().conditions, Some(nested(MAX_JSON_DEPTH)));
    assert!(store.approval("a0").unwrap().is_none());
    let kinds: Vec<String> = store.list_audit("t").unwrap().into_iter().map(|e| e.kind).collect();
    assert_eq!(kinds, ["approval.requested", "approval.approved"]);
}

/// Checkpoint metadata, audit details, new approvals' and transitions' conditions of a step
/// commit: each refused, and none of the commit's other parts written.
fn step_commit<S: Store>(b: &Backend<S>) {
    let store = (b.open)();
    conformance::commit(&store, root("t", 0, b"S"));
    store.put_approval(approval("a1", "t"), "agent").unwrap();
    let next = || {
        let mut c = StepCommit::new(thread("t")).with_checkpoint(step("t", 1, 0, &[b"x"]));
        c.audit.push(NewAuditEntry::new(7, "exec", "step", json!({ "ok": true })));
        c
    };

    let mut c = next();
    c.checkpoint.as_mut().unwrap().metadata.extra = json!({ "deep": nested(MAX_DOCUMENT_DEPTH) });
    let err = store.commit_step(c).unwrap_err();
    assert!(
        matches!(&err, CommitError::TooDeep { thread, source }
            if thread == "t" && source.path.starts_with("metadata.extra.deep") && source.limit == MAX_DOCUMENT_DEPTH),
        "{err:?}"
    );
    // A checkpoint alone takes the same refusal (on PostgreSQL, its one-round-trip path).
    let mut c = StepCommit::new(thread("t")).with_checkpoint(step("t", 1, 0, &[b"x"]));
    c.checkpoint.as_mut().unwrap().metadata.extra = nested(MAX_DOCUMENT_DEPTH + 1);
    assert!(matches!(store.commit_step(c).unwrap_err(), CommitError::TooDeep { .. }));

    let mut c = next();
    c.audit.push(NewAuditEntry::new(8, "exec", "deep", nested(MAX_DOCUMENT_DEPTH + 1)));
    let err = store.commit_step(c).unwrap_err();
    assert!(matches!(&err, CommitError::TooDeep { source, .. } if source.path.starts_with("detail[0]")), "{err:?}");

    let mut c = next();
    let mut deep = approval("a2", "t");
    deep.conditions = Some(nested(MAX_JSON_DEPTH + 1));
    c.new_approvals.push(deep);
    let err = store.commit_step(c).unwrap_err();
    assert!(matches!(&err, CommitError::Approval(ApprovalError::TooDeep { id, .. }) if id == "a2"), "{err:?}");

    let mut c = next();
    c.approval_transitions.push(ApprovalTransition {
        id: "a1".to_string(),
        from: ApprovalStatus::Pending,
        to: ApprovalStatus::Approved,
        patch: ApprovalPatch { conditions: Some(nested(126)), ..ApprovalPatch::by("alice", 9) },
    });
    let err = store.commit_step(c).unwrap_err();
    assert!(matches!(&err, CommitError::Approval(ApprovalError::TooDeep { id, .. }) if id == "a1"), "{err:?}");

    (b.close)(store);
    let store = (b.open)();
    assert_eq!(store.latest_checkpoint("t").unwrap().unwrap().seq, 0, "no checkpoint was written");
    assert!(store.approval("a2").unwrap().is_none());
    assert_eq!(store.approval("a1").unwrap().unwrap().status, ApprovalStatus::Pending);
    let kinds: Vec<String> = store.list_audit("t").unwrap().into_iter().map(|e| e.kind).collect();
    assert_eq!(kinds, ["approval.requested"]);
    // The same commit within the limits goes through.
    store.commit_step(next()).unwrap();
    assert_eq!(store.latest_checkpoint("t").unwrap().unwrap().seq, 1);
}

/// An effect batch with a deep audit detail or deep conditions journals no effect.
fn effect_batch<S: Store>(b: &Backend<S>) {
    let store = (b.open)();
    conformance::commit(&store, root("t", 0, b"S"));
    store.put_approval(approval("a1", "t"), "agent").unwrap();
    let key = EffectKey::new("t", 0, "n", "k");
    let batch = || EffectBatch::new("t").effect(key.clone(), b"r".to_vec());

    let err = store.commit_effects(batch().audit(NewAuditEntry::new(5, "exec", "deep", nested(128)))).unwrap_err();
    assert!(matches!(err, CommitError::TooDeep { .. }), "{err:?}");
    let transition = ApprovalTransition {
        id: "a1".to_string(),
        from: ApprovalStatus::Pending,
        to: ApprovalStatus::Approved,
        patch: ApprovalPatch { conditions: Some(nested(126)), ..ApprovalPatch::by("alice", 6) },
    };
    let err = store.commit_effects(batch().transition(transition)).unwrap_err();
    assert!(matches!(&err, CommitError::Approval(ApprovalError::TooDeep { id, .. }) if id == "a1"), "{err:?}");

    (b.close)(store);
    let store = (b.open)();
    assert_eq!(store.effect(&key).unwrap(), None, "no effect was journaled");
    assert_eq!(store.approval("a1").unwrap().unwrap().status, ApprovalStatus::Pending);
    let kinds: Vec<String> = store.list_audit("t").unwrap().into_iter().map(|e| e.kind).collect();
    assert_eq!(kinds, ["approval.requested"]);
}

/// Enqueueing, waking or stopping a run with a deep audit entry: refused, nothing changed.
fn queue_audit<S: Store>(b: &Backend<S>) {
    let store = (b.open)();
    let deep = || NewAuditEntry::new(5, "ops", "run.submitted", json!({ "why": nested(MAX_DOCUMENT_DEPTH) }));
    let err = store.enqueue_run_audited(NewRun::new("q", "g", None, "alice", 1), deep()).unwrap_err();
    assert!(matches!(err, QueueError::Audit(AuditError::TooDeep { .. })), "{err:?}");
    assert!(store.list_runs().unwrap().is_empty(), "the run was not queued");
    store.enqueue_run(NewRun::new("q", "g", None, "alice", 1)).unwrap();
    let err = store.control_run_audited("q", RunControl::Cancel, deep()).unwrap_err();
    assert!(matches!(err, QueueError::Audit(AuditError::TooDeep { .. })), "{err:?}");
    (b.close)(store);
    let store = (b.open)();
    let runs = store.list_runs().unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].control, None, "no control request was set");
    assert!(store.list_audit("q").unwrap().is_empty());
}
