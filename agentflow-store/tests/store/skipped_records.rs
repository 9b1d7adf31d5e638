//! One undecodable record does not hide the others: the `scan_*` listings
//! return every record that decodes and report each one that does not, with
//! its table and key; the strict `list_*` listings refuse the whole listing.

use crate::common;

use std::path::Path;

use agentflow_store::conformance::{self, approval, root, thread};
use agentflow_store::{NewAuditEntry, ReadError, RedbStore, StepCommit, StorageError, Store, tables};
use common::TempDir;
use redb::{Database, TableDefinition};
use serde_json::json;

fn populated(path: &Path) {
    let store = RedbStore::open(path).unwrap();
    for t in ["t1", "t2", "t3"] {
        conformance::commit(&store, root(t, 0, b"S"));
        store.commit_step(StepCommit::new(thread(t))).unwrap();
    }
    for (i, id) in ["a1", "a2", "a3"].into_iter().enumerate() {
        store.put_approval(approval(id, "t1"), "agent").unwrap();
        store.append_audit("t2", NewAuditEntry::new(i as u64, "ops", "note", json!({ "n": i }))).unwrap();
    }
    store.close().unwrap();
}

fn inject<K: redb::Key + 'static>(
    path: &Path,
    table: TableDefinition<K, &'static [u8]>,
    key: K::SelfType<'_>,
    garbage: &[u8],
) {
    let db = Database::create(path).unwrap();
    let txn = db.begin_write().unwrap();
    txn.open_table(table).unwrap().insert(key, garbage).unwrap();
    txn.commit().unwrap();
}

/// The key a skipped record's decode error names.
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
fn listings_skip_and_report_a_record_that_does_not_decode() {
    let dir = TempDir::new("skip");
    let path = dir.file("store.redb");
    populated(&path);
    inject(&path, tables::THREADS, "t2", b"\x02garbage");
    inject(&path, tables::APPROVALS, "a2", b"");
    inject(&path, tables::AUDIT, ("t2", 2), b"\x02\x01");
    let store = RedbStore::open(&path).unwrap();

    let threads = store.scan_threads().unwrap();
    assert_eq!(threads.items.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(), ["t1", "t3"]);
    assert_eq!(
        threads.skipped.iter().map(skipped_key).collect::<Vec<_>>(),
        [("agentflow.threads".into(), r#""t2""#.into())]
    );
    assert!(!threads.is_complete());
    strict_fails(store.list_threads());

    let pending = store.scan_pending_approvals().unwrap();
    assert_eq!(pending.items.iter().map(|a| a.id.as_str()).collect::<Vec<_>>(), ["a1", "a3"]);
    assert_eq!(
        pending.skipped.iter().map(skipped_key).collect::<Vec<_>>(),
        [("agentflow.approvals".into(), r#""a2""#.into())]
    );
    strict_fails(store.list_pending_approvals());
    let of_thread = store.scan_approvals("t1").unwrap();
    assert_eq!(of_thread.items.len(), 2);
    assert_eq!(of_thread.skipped.len(), 1);
    strict_fails(store.list_approvals("t1"));

    let audit = store.scan_audit("t2").unwrap();
    assert_eq!(audit.items.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 3]);
    assert_eq!(
        audit.skipped.iter().map(skipped_key).collect::<Vec<_>>(),
        [("agentflow.audit".into(), r#"("t2", 2)"#.into())]
    );
    let message = audit.skipped[0].to_string();
    assert!(message.contains("cannot be decoded") && message.contains("restore it from a backup"), "{message}");
    strict_fails(store.list_audit("t2"));

    // Undamaged listings are complete.
    assert!(store.scan_audit("t1").unwrap().is_complete());
}
