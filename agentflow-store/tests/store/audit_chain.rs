//! A tampered audit log is found: an entry's detail edited, an entry removed, two entries
//! swapped, each written straight into the store (a valid record or row, as someone with
//! access to the file or the database could write it), and `Store::verify_audit` names the
//! first broken entry and why. On a redb file and on PostgreSQL; and a PostgreSQL schema of
//! version 8 gets its logs chained when it moves to version 9.

use crate::common;

use agentflow_store::{AuditEntry, BrokenReason, NewAuditEntry, RedbStore, Store, tables};
use common::TempDir;
use redb::{Database, ReadableTable};
use serde_json::json;

/// Five entries in thread `t-1`, and one in `t-2`.
fn fill(store: &dyn Store) {
    for i in 1..=5u64 {
        let detail = json!({ "i": i, "note": format!("entry {i}") });
        store.append_audit("t-1", NewAuditEntry::new(1_000 + i, "alice", "note", detail)).unwrap();
    }
    store.append_audit("t-2", NewAuditEntry::new(1_000, "bob", "note", json!(null))).unwrap();
}

/// The first broken link of `thread`'s log.
fn broken(store: &dyn Store, thread: &str) -> (u64, BrokenReason) {
    let b = store.verify_audit(thread).unwrap().expect_err("the log was tampered with");
    assert_eq!(b.thread, thread);
    (b.seq, b.reason)
}

/// Rewrites the redb file's audit table with `edit`, which gets the stored entries of `t-1` and
/// answers those to write back (re-encoded as valid records).
fn tamper(path: &std::path::Path, edit: impl FnOnce(&mut Vec<AuditEntry>)) {
    let db = Database::create(path).unwrap();
    let txn = db.begin_write().unwrap();
    {
        let mut audit = txn.open_table(tables::AUDIT).unwrap();
        let keys: Vec<u64> =
            audit.range(("t-1", 0)..=("t-1", u64::MAX)).unwrap().map(|e| e.unwrap().0.value().1).collect();
        let mut entries: Vec<AuditEntry> = keys
            .iter()
            .map(|&k| AuditEntry::decode_stored(audit.get(("t-1", k)).unwrap().unwrap().value()).unwrap())
            .collect();
        for k in keys {
            audit.remove(("t-1", k)).unwrap();
        }
        edit(&mut entries);
        // Written back under the keys 1, 2, .. in the order given: a swapped pair keeps the
        // seqs written inside them.
        for (i, e) in entries.iter().enumerate() {
            audit.insert(("t-1", i as u64 + 1), e.encode_stored().as_slice()).unwrap();
        }
    }
    txn.commit().unwrap();
}

fn redb_case(tag: &str, edit: impl FnOnce(&mut Vec<AuditEntry>)) -> (TempDir, RedbStore) {
    let dir = TempDir::new(tag);
    let path = dir.file("store.redb");
    {
        let store = RedbStore::open(&path).unwrap();
        fill(&store);
        assert_eq!(store.verify_audit("t-1").unwrap().unwrap().entries, 5);
        store.close().unwrap();
    }
    tamper(&path, edit);
    let store = RedbStore::open(&path).unwrap();
    // The other thread's log is untouched.
    assert_eq!(store.verify_audit("t-2").unwrap().unwrap().entries, 1);
    (dir, store)
}

#[test]
fn redb_an_edited_detail_is_found() {
    let (_dir, store) =
        redb_case("chain-edit", |entries| entries[3].detail = json!({ "i": 4, "note": "nothing to see" }));
    assert_eq!(broken(&store, "t-1"), (4, BrokenReason::DetailChanged));
    let message = store.verify_audit("t-1").unwrap().unwrap_err().to_string();
    assert_eq!(message, "thread t-1, entry 4: its details were changed after it was written");
}

#[test]
fn redb_a_removed_entry_is_found() {
    // Removed and the later ones moved up to close the gap, or removed leaving the gap.
    let (_dir, store) = redb_case("chain-remove", |entries| {
        entries.remove(2);
    });
    assert_eq!(broken(&store, "t-1"), (3, BrokenReason::EntryMissing));
    let (_dir, store) = redb_case("chain-remove-first", |entries| {
        entries.remove(0);
    });
    assert_eq!(broken(&store, "t-1"), (1, BrokenReason::EntryMissing));
}

#[test]
fn redb_swapped_entries_are_found() {
    let (_dir, store) = redb_case("chain-swap", |entries| entries.swap(1, 2));
    assert_eq!(broken(&store, "t-1"), (2, BrokenReason::OutOfOrder { found: 3 }));
}

#[cfg(feature = "postgres")]
mod postgres {
    use super::{broken, fill};
    use crate::pg_common::{self, Schema};
    use agentflow_store::{BrokenReason, NewAuditEntry, Store};
    use serde_json::json;

    /// A filled schema with `sql` run on it (`{s}`: the quoted schema name).
    fn case(tag: &str, sql: &str) -> Option<(Schema, agentflow_store::PostgresStore)> {
        let url = pg_common::url()?;
        let schema = Schema::new(&url, tag);
        let store = schema.open();
        fill(&store);
        assert_eq!(store.verify_audit("t-1").unwrap().unwrap().entries, 5);
        pg_common::sql(&url, &sql.replace("{s}", &format!("\"{}\"", schema.name)));
        assert_eq!(store.verify_audit("t-2").unwrap().unwrap().entries, 1);
        Some((schema, store))
    }

    #[test]
    fn postgres_an_edited_detail_is_found() {
        let sql = r#"UPDATE {s}.audit SET detail = '{"i":4,"note":"nothing to see"}' WHERE thread = 't-1' AND seq = 4"#;
        let Some((_schema, store)) = case("chain_edit", sql) else { return };
        assert_eq!(broken(&store, "t-1"), (4, BrokenReason::DetailChanged));
    }

    #[test]
    fn postgres_a_removed_entry_is_found() {
        let Some((_schema, store)) = case("chain_rm", "DELETE FROM {s}.audit WHERE thread = 't-1' AND seq = 3") else {
            return;
        };
        assert_eq!(broken(&store, "t-1"), (3, BrokenReason::EntryMissing));
        // Closing the gap by renumbering breaks the links instead.
        let Some((_schema, store)) = case(
            "chain_rm2",
            "DELETE FROM {s}.audit WHERE thread = 't-1' AND seq = 3; \
             UPDATE {s}.audit SET seq = seq - 1 WHERE thread = 't-1' AND seq > 3",
        ) else {
            return;
        };
        assert_eq!(broken(&store, "t-1").0, 3);
    }

    #[test]
    fn postgres_swapped_entries_are_found() {
        let sql = "UPDATE {s}.audit SET seq = -2 WHERE thread = 't-1' AND seq = 2; \
                   UPDATE {s}.audit SET seq = 2 WHERE thread = 't-1' AND seq = 4; \
                   UPDATE {s}.audit SET seq = 4 WHERE thread = 't-1' AND seq = -2";
        let Some((_schema, store)) = case("chain_swap", sql) else { return };
        assert_eq!(broken(&store, "t-1"), (2, BrokenReason::OutOfOrder { found: 4 }));
    }

    /// A schema of version 8 (no tenant, no hashes): its logs are chained as they stand when it
    /// moves to version 9, and appends go on from there.
    #[test]
    fn a_schema_of_version_8_gets_its_audit_logs_chained() {
        let Some(url) = pg_common::url() else { return };
        let schema = Schema::new(&url, "v8");
        fill(&schema.open());
        let s = format!("\"{}\"", schema.name);
        pg_common::sql(
            &url,
            &format!(
                "ALTER TABLE {s}.threads DROP COLUMN tenant; \
                 ALTER TABLE {s}.audit DROP COLUMN detail_hash; \
                 ALTER TABLE {s}.audit DROP COLUMN link; \
                 ALTER TABLE {s}.audit_heads DROP COLUMN link; \
                 DELETE FROM {s}.schema_version WHERE version > 8"
            ),
        );
        let store = schema.open();
        let log = store.list_audit("t-1").unwrap();
        assert!(log.iter().all(|e| e.link.len() == 64 && e.detail_hash.len() == 64));
        assert_eq!(log[2].detail, json!({ "i": 3, "note": "entry 3" }));
        assert_eq!(store.verify_audit("t-1").unwrap().unwrap().entries, 5);
        assert_eq!(store.append_audit("t-1", NewAuditEntry::new(2_000, "bob", "note", json!(1))).unwrap(), 6);
        assert_eq!(store.verify_audit("t-1").unwrap().unwrap().entries, 6);
        assert_eq!(store.verify_audit("t-2").unwrap().unwrap().entries, 1);
    }
}
