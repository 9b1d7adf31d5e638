//! The audit log: append only, numbered per thread, and chained (see [`crate::audit_chain`]).

use serde_json::json;

use crate::conformance::fixtures::{NOW, approval, thread};
use crate::conformance::restore::dump_of;
use crate::{ApprovalPatch, ApprovalStatus, NewAuditEntry, StepCommit, Store};

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

/// Every way of appending (one entry, a step commit's entries, an approval and its decision)
/// chains the entry to the one before it: the log verifies, each entry carries the hashes
/// [`crate::audit_chain`] computes, and a restored log keeps a dump's hashes and chains the
/// entries of a dump that has none (an export of an older build).
pub fn audit_log_is_chained(store: &dyn Store) {
    let empty = store.verify_audit("t").unwrap().unwrap();
    assert_eq!((empty.entries, empty.head.as_str()), (0, ""));
    store.append_audit("t", NewAuditEntry::new(NOW, "alice", "note", json!({ "b": 1, "a": [true, null] }))).unwrap();
    let mut c = StepCommit::new(thread("t"));
    c.audit = vec![NewAuditEntry::new(NOW + 1, "exec", "update_state", json!({ "field": "x" }))];
    store.commit_step(c).unwrap();
    store.put_approval(approval("a1", "t"), "agent").unwrap();
    let patch = ApprovalPatch { decided_by: Some("alice".into()), ..ApprovalPatch::by("alice", NOW + 2) };
    store.transition_approval("a1", ApprovalStatus::Pending, ApprovalStatus::Approved, patch).unwrap();
    store.append_audit("u", NewAuditEntry::new(NOW, "bob", "note", json!("other thread"))).unwrap();

    let log = store.list_audit("t").unwrap();
    assert_eq!(log.len(), 4);
    let mut prev = String::new();
    for e in &log {
        assert_eq!(e.detail_hash, crate::audit_chain::detail_hash(&e.detail), "entry {}", e.seq);
        let link = crate::audit_chain::link(&prev, "t", e.seq, e.at, &e.actor, &e.kind, &e.detail_hash);
        assert_eq!(e.link, link, "entry {}", e.seq);
        prev.clone_from(&e.link);
    }
    let report = store.verify_audit("t").unwrap().unwrap();
    assert_eq!((report.thread.as_str(), report.entries, report.purged), ("t", 4, 0));
    assert_eq!(report.head, log[3].link);
    assert_eq!(store.verify_audit("u").unwrap().unwrap().entries, 1);

    // A dump with its hashes: restored as they are, and the log goes on after them.
    let chained = dump_of("r");
    store.restore_thread(chained.clone()).unwrap();
    assert_eq!(store.list_audit("r").unwrap(), chained.audit);
    store.append_audit("r", NewAuditEntry::new(NOW + 5, "bob", "after", json!(null))).unwrap();
    assert_eq!(store.verify_audit("r").unwrap().unwrap().entries, 3);

    // A dump without them (an older build's export): chained on restore.
    let mut old = dump_of("o");
    for e in &mut old.audit {
        e.detail_hash.clear();
        e.link.clear();
    }
    store.restore_thread(old.clone()).unwrap();
    let restored = store.list_audit("o").unwrap();
    assert!(restored.iter().all(|e| e.link.len() == 64 && e.detail_hash.len() == 64));
    assert_eq!(
        restored.iter().map(|e| &e.detail).collect::<Vec<_>>(),
        old.audit.iter().map(|e| &e.detail).collect::<Vec<_>>()
    );
    assert_eq!(store.verify_audit("o").unwrap().unwrap().entries, 2);
}
