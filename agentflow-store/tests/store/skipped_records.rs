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

/// One damaged row of the run queue, the schedules or the webhook deliveries hides none of the
/// others: `scan_runs`, `scan_schedules` and `due_webhooks` list every row that decodes and
/// report the damaged one by table and key (a due delivery that does not decode is not counted
/// in the limit); the strict `list_runs` refuses the whole listing.
#[test]
fn queue_schedule_and_webhook_listings_skip_a_damaged_row() {
    use agentflow_store::{NewRun, NewWebhookDelivery, QueueError, ScheduleRecord, Settle};
    let dir = TempDir::new("skip-admission");
    let path = dir.file("store.redb");
    {
        let store = RedbStore::open(&path).unwrap();
        for (i, t) in ["q1", "q2", "q3"].into_iter().enumerate() {
            store.enqueue_run(NewRun::new(t, "g", None, "alice", 10 + i as u64)).unwrap();
        }
        for id in ["s1", "s2", "s3"] {
            store.put_schedule(ScheduleRecord::new(id, "g", "0 * * * *", b"{}".to_vec(), "alice", 100, 1)).unwrap();
        }
        // Three deliveries, due at 1, 2 and 3 (ids 1, 2, 3), from the settles of runs of "h".
        for (i, t) in ["w1", "w2", "w3"].into_iter().enumerate() {
            let at = 1 + i as u64;
            store
                .enqueue_run(NewRun::new(t, "h", None, "alice", at).with_webhook("https://example.test/done"))
                .unwrap();
            assert_eq!(store.claim_runs("h", "worker", 1000, at, 1).unwrap().len(), 1);
            let delivery = NewWebhookDelivery::new("https://example.test/done", b"{}".to_vec()).at(at);
            assert!(store.settle_run_and_release(t, "worker", &Settle::remove().with_webhook(delivery)).unwrap());
        }
        store.close().unwrap();
    }
    inject(&path, tables::RUN_QUEUE, "q2", b"\x02garbage");
    inject(&path, tables::SCHEDULES, "s2", b"\x02");
    // The longest due delivery is the damaged one.
    inject(&path, tables::WEBHOOKS, 1u64, b"\x02\x00");
    let store = RedbStore::open(&path).unwrap();

    let runs = store.scan_runs().unwrap();
    assert_eq!(runs.items.iter().map(|r| r.thread.as_str()).collect::<Vec<_>>(), ["q1", "q3"]);
    assert_eq!(
        runs.skipped.iter().map(skipped_key).collect::<Vec<_>>(),
        [("agentflow.run_queue".into(), r#""q2""#.into())]
    );
    match store.list_runs() {
        Err(QueueError::Storage(StorageError::Decode { .. })) => {}
        other => panic!("expected a decode error, got {other:?}"),
    }

    let schedules = store.scan_schedules().unwrap();
    assert_eq!(schedules.items.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(), ["s1", "s3"]);
    assert_eq!(
        schedules.skipped.iter().map(skipped_key).collect::<Vec<_>>(),
        [("agentflow.schedules".into(), r#""s2""#.into())]
    );

    let due = store.due_webhooks(10, 2).unwrap();
    assert_eq!(due.items.iter().map(|d| d.id).collect::<Vec<_>>(), [2, 3], "the damaged one takes no place");
    assert_eq!(due.skipped.iter().map(skipped_key).collect::<Vec<_>>(), [("agentflow.webhooks".into(), "1".into())]);
    // The others are still held and settled as ever.
    assert!(store.claim_webhook(2, "d", 10, 100).unwrap());
}
