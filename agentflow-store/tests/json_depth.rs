//! The store writes only JSON it reads back: audit details, checkpoint
//! metadata and approval conditions nested too deep are refused, typed, and
//! nothing is written.

mod common;

use agentflow_store::conformance::{self, approval, root, thread};
use agentflow_store::{
    ApprovalError, ApprovalPatch, ApprovalStatus, AuditError, CommitError, MAX_DOCUMENT_DEPTH, MAX_JSON_DEPTH,
    NewAuditEntry, RedbStore, StepCommit, Store,
};
use common::TempDir;
use serde_json::{Value, json};

fn nested(depth: usize) -> Value {
    (0..depth).fold(json!(0), |inner, _| json!([inner]))
}

fn reopened(dir: &TempDir) -> RedbStore {
    RedbStore::open(dir.file("store.redb")).unwrap()
}

#[test]
fn an_audit_detail_deeper_than_the_reader_is_refused() {
    let dir = TempDir::new("depth-audit");
    let store = reopened(&dir);
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
    store.close().unwrap();
    // What was written reads back from the file.
    let store = reopened(&dir);
    let log = store.list_audit("t").unwrap();
    assert_eq!(log.iter().map(|e| e.kind.as_str()).collect::<Vec<_>>(), ["note"]);
    assert_eq!(log[0].detail, nested(MAX_DOCUMENT_DEPTH));
}

#[test]
fn approval_conditions_deeper_than_the_limit_are_refused() {
    let dir = TempDir::new("depth-conditions");
    let store = reopened(&dir);
    conformance::commit(&store, root("t", 0, b"S"));
    let mut deep = approval("a0", "t");
    deep.conditions = Some(nested(MAX_JSON_DEPTH + 1));
    assert!(matches!(store.put_approval(deep, "agent").unwrap_err(), ApprovalError::TooDeep { .. }));
    store.put_approval(approval("a1", "t"), "agent").unwrap();
    // 127 levels of conditions: alone they read back, but not inside the audit entry.
    let patch = ApprovalPatch { conditions: Some(nested(127)), ..ApprovalPatch::by("alice", 5) };
    let err = store.transition_approval("a1", ApprovalStatus::Pending, ApprovalStatus::Approved, patch).unwrap_err();
    assert!(matches!(&err, ApprovalError::TooDeep { id, source } if id == "a1" && source.limit == MAX_JSON_DEPTH));
    let patch = ApprovalPatch { conditions: Some(nested(MAX_JSON_DEPTH)), ..ApprovalPatch::by("alice", 6) };
    store.transition_approval("a1", ApprovalStatus::Pending, ApprovalStatus::Approved, patch).unwrap();
    store.close().unwrap();
    let store = reopened(&dir);
    assert_eq!(store.approval("a1").unwrap().unwrap().conditions, Some(nested(MAX_JSON_DEPTH)));
    assert!(store.approval("a0").unwrap().is_none());
    let kinds: Vec<String> = store.list_audit("t").unwrap().into_iter().map(|e| e.kind).collect();
    assert_eq!(kinds, ["approval.requested", "approval.approved"]);
}
