//! The audit log: append only, numbered per thread.

use serde_json::json;

use crate::conformance::fixtures::{NOW, thread};
use crate::{NewAuditEntry, StepCommit, Store};

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
