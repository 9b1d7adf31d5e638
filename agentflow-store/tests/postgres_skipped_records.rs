//! One damaged row does not hide the others on PostgreSQL either: the `scan_*` listings return
//! every row that decodes and report each one that does not (a thread status no version wrote,
//! an approval record whose bytes do not decode, an audit detail that is not JSON), with its
//! table and key; the strict `list_*` listings refuse the whole listing.

#![cfg(feature = "postgres")]

mod pg_common;

use agentflow_store::conformance::{self, approval, root, thread};
use agentflow_store::{NewAuditEntry, ReadError, StepCommit, StorageError, Store};
use pg_common::Schema;
use serde_json::json;

/// The table and key a skipped row's decode error names.
fn skipped_key(e: &StorageError) -> (String, String) {
    match e {
        StorageError::Decode { table, key, .. } => (table.clone(), key.clone()),
        other => panic!("expected a decode error, got {other:?}"),
    }
}

fn strict_fails(result: Result<impl std::fmt::Debug, ReadError>) {
    match result {
        Err(ReadError::Storage(StorageError::Decode { .. })) => {}
        other => panic!("expected a decode error, got {other:?}"),
    }
}

#[test]
fn listings_skip_and_report_a_row_that_does_not_decode() {
    let Some(url) = pg_common::url() else { return };
    let schema = Schema::new(&url, "skip");
    let store = schema.open();
    for t in ["t1", "t2", "t3"] {
        conformance::commit(&store, root(t, 0, b"S"));
        store.commit_step(StepCommit::new(thread(t))).unwrap();
    }
    for (i, id) in ["a1", "a2", "a3"].into_iter().enumerate() {
        store.put_approval(approval(id, "t1"), "agent").unwrap();
        store.append_audit("t2", NewAuditEntry::new(i as u64, "ops", "note", json!({ "n": i }))).unwrap();
    }
    let s = &schema.name;
    pg_common::sql(
        &url,
        &format!(
            "UPDATE \"{s}\".threads SET status = 'exploded' WHERE id = 't2'; \
             UPDATE \"{s}\".approvals SET record = '\\x02ff'::bytea WHERE id = 'a2'; \
             UPDATE \"{s}\".audit SET detail = '{{not json' WHERE thread = 't2' AND seq = 2;"
        ),
    );

    let threads = store.scan_threads().unwrap();
    assert_eq!(threads.items.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(), ["t1", "t3"]);
    assert_eq!(threads.skipped.iter().map(skipped_key).collect::<Vec<_>>(), [("threads".into(), r#""t2""#.into())]);
    assert!(!threads.is_complete());
    strict_fails(store.list_threads());

    let pending = store.scan_pending_approvals().unwrap();
    assert_eq!(pending.items.iter().map(|a| a.id.as_str()).collect::<Vec<_>>(), ["a1", "a3"]);
    assert_eq!(pending.skipped.iter().map(skipped_key).collect::<Vec<_>>(), [("approvals".into(), r#""a2""#.into())]);
    strict_fails(store.list_pending_approvals());
    let of_thread = store.scan_approvals("t1").unwrap();
    assert_eq!(of_thread.items.iter().map(|a| a.id.as_str()).collect::<Vec<_>>(), ["a1", "a3"]);
    assert_eq!(of_thread.skipped.len(), 1);
    strict_fails(store.list_approvals("t1"));

    let audit = store.scan_audit("t2").unwrap();
    assert_eq!(audit.items.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 3]);
    assert_eq!(audit.skipped.iter().map(skipped_key).collect::<Vec<_>>(), [("audit".into(), r#"("t2", 2)"#.into())]);
    let message = audit.skipped[0].to_string();
    assert!(message.contains("cannot be decoded"), "{message}");
    strict_fails(store.list_audit("t2"));

    // Undamaged listings are complete.
    assert!(store.scan_audit("t1").unwrap().is_complete());
    assert!(store.scan_approvals("t2").unwrap().is_complete());
}
