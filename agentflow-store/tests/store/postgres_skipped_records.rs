//! One damaged row does not hide the others on PostgreSQL either: the `scan_*` listings return
//! every row that decodes and report each one that does not (a thread status no version wrote,
//! an approval record whose bytes do not decode, an audit detail that is not JSON), with its
//! table and key; the strict `list_*` listings refuse the whole listing.

#![cfg(feature = "postgres")]

use crate::pg_common;

use agentflow_store::conformance::{self, approval, root, thread};
use agentflow_store::{EffectKey, NewAuditEntry, ReadError, StepCommit, StorageError, Store};
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

/// A queued run whose row this version cannot decode (a control it does not know, a time out of
/// range) is not claimed, as on redb, and reported by `list_runs`; the other runs are still
/// claimed, their heartbeats written and their control requests read. Such a row, being the
/// oldest, used to stop every claim of its graph.
#[test]
fn a_queue_row_that_does_not_decode_stops_no_other_run() {
    use agentflow_store::{NewRun, QueueError, RunControl};
    let Some(url) = pg_common::url() else { return };
    let schema = Schema::new(&url, "queue");
    let store = schema.open();
    let s = &schema.name;
    // Damaged after it was claimed: the worker's heartbeat and control reads go on.
    store.enqueue_run(NewRun::new("held-bad", "g", None, "", 1)).unwrap();
    store.enqueue_run(NewRun::new("held-good", "g", None, "", 2)).unwrap();
    assert_eq!(store.claim_runs("g", "w", 60_000, 10, 10).unwrap().len(), 2);
    pg_common::sql(&url, &format!("UPDATE \"{s}\".run_queue SET control = 'RESTART' WHERE thread = 'held-bad';"));
    assert!(store.control_run("held-good", RunControl::Cancel).unwrap());
    assert_eq!(store.heartbeat_runs("w", 20).unwrap(), [("held-good".to_string(), RunControl::Cancel)]);
    assert_eq!(store.run_controls("w", 30).unwrap(), [("held-good".to_string(), RunControl::Cancel)]);

    // Damaged before any claim, and the oldest rows of their graph: the claim takes the others.
    for (i, t) in ["bad-control", "bad-time", "good-1", "good-2"].into_iter().enumerate() {
        store.enqueue_run(NewRun::new(t, "h", None, "", 100 + i as u64)).unwrap();
    }
    pg_common::sql(
        &url,
        &format!(
            "UPDATE \"{s}\".run_queue SET control = 'RESTART' WHERE thread = 'bad-control'; \
             UPDATE \"{s}\".run_queue SET enqueued_at = -5 WHERE thread = 'bad-time';"
        ),
    );
    let claimed = store.claim_runs("h", "w2", 60_000, 40, 1).unwrap();
    assert_eq!(claimed.iter().map(|r| r.thread.as_str()).collect::<Vec<_>>(), ["good-1"]);
    let claimed = store.claim_runs("h", "w2", 60_000, 40, 10).unwrap();
    assert_eq!(claimed.iter().map(|r| r.thread.as_str()).collect::<Vec<_>>(), ["good-2"]);
    // Nothing of the damaged rows was claimed: no lease taken, no claim counted.
    let rows = pg_common::sql(
        &url,
        &format!(
            "SELECT q.thread || ':' || q.claims || ':' || COALESCE(l.holder, '-') FROM \"{s}\".run_queue q \
             LEFT JOIN \"{s}\".leases l ON l.thread = q.thread WHERE q.graph = 'h' ORDER BY q.thread"
        ),
    );
    let rows: Vec<String> = rows.into_iter().flatten().collect();
    assert_eq!(rows, ["bad-control:0:-", "bad-time:0:-", "good-1:1:w2", "good-2:1:w2"]);

    // The listing reports a damaged row, naming it.
    match store.list_runs() {
        Err(QueueError::Storage(StorageError::Decode { table, key, .. })) => {
            assert_eq!(table, "run_queue");
            assert!(["\"bad-control\"", "\"bad-time\"", "\"held-bad\""].contains(&key.as_str()), "{key}");
        }
        other => panic!("expected a decode error naming the row, got {other:?}"),
    }
    // The lenient listing lists the others and reports each damaged row.
    let runs = store.scan_runs().unwrap();
    let mut listed: Vec<&str> = runs.items.iter().map(|r| r.thread.as_str()).collect();
    listed.sort_unstable();
    assert_eq!(listed, ["good-1", "good-2", "held-good"]);
    let mut skipped: Vec<String> = runs.skipped.iter().map(|e| skipped_key(e).1).collect();
    skipped.sort();
    assert_eq!(skipped, ["\"bad-control\"", "\"bad-time\"", "\"held-bad\""]);
}

/// A damaged schedule or webhook delivery row hides none of the others: `scan_schedules` and
/// `due_webhooks` list the rows that decode and report the damaged one, which takes no place in
/// the due deliveries' limit.
#[test]
fn schedule_and_webhook_listings_skip_a_damaged_row() {
    use agentflow_store::{NewRun, NewWebhookDelivery, ScheduleRecord, Settle};
    let Some(url) = pg_common::url() else { return };
    let schema = Schema::new(&url, "admission");
    let store = schema.open();
    for id in ["s1", "s2", "s3"] {
        store.put_schedule(ScheduleRecord::new(id, "g", "0 * * * *", b"{}".to_vec(), "alice", 100, 1)).unwrap();
    }
    for (i, t) in ["w1", "w2", "w3"].into_iter().enumerate() {
        let at = 1 + i as u64;
        store.enqueue_run(NewRun::new(t, "h", None, "alice", at).with_webhook("https://example.test/done")).unwrap();
        assert_eq!(store.claim_runs("h", "worker", 1000, at, 1).unwrap().len(), 1);
        let delivery = NewWebhookDelivery::new("https://example.test/done", b"{}".to_vec()).at(at);
        assert!(store.settle_run_and_release(t, "worker", &Settle::remove().with_webhook(delivery)).unwrap());
    }
    let first = store.list_webhooks("w1").unwrap()[0].id;
    let s = &schema.name;
    pg_common::sql(
        &url,
        &format!(
            "UPDATE \"{s}\".schedules SET created_at = -5 WHERE id = 's2'; \
             UPDATE \"{s}\".webhooks SET created_at = -5 WHERE id = {first};"
        ),
    );
    let schedules = store.scan_schedules().unwrap();
    assert_eq!(schedules.items.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(), ["s1", "s3"]);
    assert_eq!(schedules.skipped.iter().map(skipped_key).collect::<Vec<_>>(), [("schedules".into(), r#""s2""#.into())]);
    let due = store.due_webhooks(10, 2).unwrap();
    assert_eq!(due.items.iter().map(|d| d.thread.as_str()).collect::<Vec<_>>(), ["w2", "w3"]);
    assert_eq!(due.skipped.iter().map(skipped_key).collect::<Vec<_>>(), [("webhooks".into(), first.to_string())]);
}

/// The decode error behind a failed read, whatever family of errors carries it.
fn decode_table(e: &dyn std::fmt::Debug, table: &str) {
    let text = format!("{e:?}");
    assert!(
        text.contains("Decode") && text.contains(&format!("table: \"{table}\"")),
        "expected a decode error of `{table}`, got {text}"
    );
}

/// A column someone altered to another type (a migration of another program, a DBA's fix) is a
/// decode error naming its table when a read meets it, never a panic of the reading thread.
#[test]
fn a_column_altered_to_another_type_is_a_decode_error() {
    let Some(url) = pg_common::url() else { return };
    let schema = Schema::new(&url, "altered");
    let store = schema.open();
    conformance::commit(&store, root("t1", 0, b"S"));
    store.append_audit("t1", NewAuditEntry::new(1, "ops", "note", json!({}))).unwrap();
    store.record_effect(&EffectKey::new("t1", 0, "node", "key"), b"done").unwrap();
    store.put_graph_description("fp", "a graph").unwrap();
    let s = &schema.name;
    pg_common::sql(
        &url,
        &format!(
            "ALTER TABLE \"{s}\".audit ALTER COLUMN actor TYPE bytea USING convert_to(actor, 'UTF8'); \
             ALTER TABLE \"{s}\".effects ALTER COLUMN result TYPE text USING encode(result, 'hex'); \
             ALTER TABLE \"{s}\".graphs ALTER COLUMN description TYPE bytea USING convert_to(description, 'UTF8'); \
             ALTER TABLE \"{s}\".checkpoints ALTER COLUMN row TYPE text USING encode(row, 'hex');"
        ),
    );
    decode_table(&store.list_audit("t1").unwrap_err(), "audit");
    assert_eq!(store.scan_audit("t1").unwrap().skipped.len(), 1);
    decode_table(&store.effect(&EffectKey::new("t1", 0, "node", "key")).unwrap_err(), "effects");
    decode_table(&store.thread_effects("t1").unwrap_err(), "effects");
    decode_table(&store.graph_description("fp").unwrap_err(), "graphs");
    decode_table(&store.list_checkpoints("t1").unwrap_err(), "checkpoints");
    decode_table(&store.latest_checkpoint("t1").unwrap_err(), "checkpoints");
    decode_table(&store.dump_thread("t1").unwrap_err(), "checkpoints");
}

/// A `SQL_ASCII` database takes any bytes but NUL in a text column. Text that is not UTF-8 there
/// (written by another program) is refused by the server as it sends it: a read of it fails with
/// an error that says so, not a panic, and not the advice for a NUL byte in a write.
#[test]
fn text_that_is_not_utf8_in_a_sql_ascii_database_is_an_error_that_says_so() {
    let Some(url) = pg_common::url() else { return };
    let db = pg_common::fresh_schema("ascii");
    pg_common::sql(
        &url,
        &format!("CREATE DATABASE {db} ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0"),
    );
    let (base, query) = url.split_once('?').map_or((url.as_str(), None), |(b, q)| (b, Some(q)));
    let (server, _) = base.rsplit_once('/').expect("the URL names a database");
    let db_url = format!("{server}/{db}{}", query.map_or(String::new(), |q| format!("?{q}")));
    let outcome = std::panic::catch_unwind(|| {
        let schema = Schema::new(&db_url, "ascii");
        let store = schema.open();
        conformance::commit(&store, root("t1", 0, b"S"));
        store.append_audit("t1", NewAuditEntry::new(1, "ops", "note", json!({}))).unwrap();
        // What the store wrote reads back.
        assert_eq!(store.list_audit("t1").unwrap()[0].actor, "ops");
        let s = &schema.name;
        pg_common::sql(&db_url, &format!("UPDATE \"{s}\".audit SET actor = E'op\\xff';"));
        let e = store.list_audit("t1").unwrap_err();
        let message = e.to_string();
        assert!(message.contains("not UTF-8") && !message.contains("NUL"), "{message}");
        drop(store);
    });
    pg_common::sql(&url, &format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"));
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}
