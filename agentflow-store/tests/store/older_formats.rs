//! Store files of older formats open in this build and are moved to its format (10):
//! - format 3 wrote thread records without a parent: its threads get the parents their ids'
//!   shape gave them then;
//! - formats 3 and 4 keyed checkpoints and snapshots by thread id: each thread with a
//!   checkpoint gets a number and its rows move under it, history and state unchanged;
//! - their queue rows and circuit breakers were plain JSON, their wake times bare numbers: each
//!   gets a checksum;
//! - formats 3 to 5 wrote audit entries without their hash chain and thread records without a
//!   tenant: each thread's log is chained as it stands, and the threads have no tenant;
//! - formats 3 to 7 wrote thread records without a trace context: the threads have none, and
//!   gain the first one a commit brings.
//! - formats 3 to 8 had no event logs nor idempotency keys: their tables are created, and the
//!   threads' logs start at seq 1.

use crate::common;

use agentflow_store::conformance::{self, root};
use agentflow_store::{
    AuditEntry, BreakerOp, BreakerRule, BreakerState, BreakerUpdate, NewAuditEntry, NewRun, RedbStore, StepCommit,
    Store, ThreadRecord, ThreadStatus, tables,
};
use common::TempDir;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use serde_json::json;

/// CRC-32 (IEEE), as the store checks its records with.
fn crc32(bytes: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in bytes {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = if c & 1 == 1 { (c >> 1) ^ 0xEDB8_8320 } else { c >> 1 };
        }
    }
    !c
}

fn format_of(db: &Database) -> u32 {
    let txn = db.begin_read().unwrap();
    let meta = txn.open_table(tables::META).unwrap();
    u32::from_le_bytes(meta.get("format").unwrap().unwrap().value().try_into().unwrap())
}

/// The checkpoint and snapshot tables as formats 3 and 4 laid them out: keyed by thread id.
const BY_ID_CHECKPOINTS: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("agentflow.checkpoints");
const BY_ID_SNAPSHOTS: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("agentflow.snapshots");

/// Rewrites a file of this build as format 5 wrote it: audit entries without `detail_hash` and
/// `link`, thread records without the tenant and the trace context (none here: two bytes before
/// the checksum).
/// Returns how many audit entries were rewritten.
fn write_as_format_5(path: &std::path::Path) -> usize {
    let db = Database::create(path).unwrap();
    assert_eq!(format_of(&db), 10, "this build writes format 10");
    let txn = db.begin_write().unwrap();
    let rewritten;
    {
        let mut audit = txn.open_table(tables::AUDIT).unwrap();
        let entries: Vec<AuditEntry> =
            audit.iter().unwrap().map(|e| AuditEntry::decode_stored(e.unwrap().1.value()).unwrap()).collect();
        rewritten = entries.len();
        for e in entries {
            assert_eq!(e.link.len(), 64, "this build chains every entry");
            audit.insert((e.thread.as_str(), e.seq), e.encode_format_5().as_slice()).unwrap();
        }
        let mut threads = txn.open_table(tables::THREADS).unwrap();
        let records: Vec<(String, Vec<u8>)> = threads
            .iter()
            .unwrap()
            .map(|e| e.unwrap())
            .map(|(k, v)| (k.value().to_string(), v.value().to_vec()))
            .collect();
        for (id, record) in records {
            let (body, _) = record.split_at(record.len() - 4);
            let (old, tenant_and_trace) = body.split_at(body.len() - 2);
            assert_eq!(tenant_and_trace, [0, 0], "`{id}` was written without a tenant and a trace");
            let mut old = old.to_vec();
            old.extend_from_slice(&crc32(&old).to_le_bytes());
            threads.insert(id.as_str(), old.as_slice()).unwrap();
        }
        txn.open_table(tables::META).unwrap().insert("format", 5u32.to_le_bytes().as_slice()).unwrap();
    }
    txn.commit().unwrap();
    rewritten
}

/// Rewrites a file of this build as format 4 wrote it (first as format 5): checkpoints and
/// snapshots keyed by thread id, no thread numbers. Returns how many checkpoint rows moved.
fn write_as_format_4(path: &std::path::Path) -> usize {
    write_as_format_5(path);
    let db = Database::create(path).unwrap();
    assert_eq!(format_of(&db), 5, "rewritten as format 5");
    let txn = db.begin_write().unwrap();
    let moved;
    {
        let numbers: Vec<(u64, String)> = {
            let table = txn.open_table(tables::THREAD_NUMBERS).unwrap();
            table.iter().unwrap().map(|e| e.unwrap()).map(|(k, v)| (v.value(), k.value().to_string())).collect()
        };
        let id_of = |n: u64| numbers.iter().find(|(m, _)| *m == n).map(|(_, id)| id.clone()).unwrap();
        let read = |table: TableDefinition<(u64, u64), &[u8]>| -> Vec<(String, u64, Vec<u8>)> {
            let table = txn.open_table(table).unwrap();
            table
                .iter()
                .unwrap()
                .map(|e| e.unwrap())
                .map(|(k, v)| (id_of(k.value().0), k.value().1, v.value().to_vec()))
                .collect()
        };
        let (checkpoints, snapshots) = (read(tables::CHECKPOINTS), read(tables::SNAPSHOTS));
        moved = checkpoints.len();
        assert!(txn.delete_table(tables::CHECKPOINTS).unwrap());
        assert!(txn.delete_table(tables::SNAPSHOTS).unwrap());
        assert!(txn.delete_table(tables::THREAD_NUMBERS).unwrap());
        for (table, rows) in [(BY_ID_CHECKPOINTS, checkpoints), (BY_ID_SNAPSHOTS, snapshots)] {
            let mut table = txn.open_table(table).unwrap();
            for (id, seq, value) in rows {
                table.insert((id.as_str(), seq), value.as_slice()).unwrap();
            }
        }
        // Queue rows and breakers were plain JSON: unwrap each from its record (a version byte,
        // a varint length, the bytes, a CRC-32).
        for table in [tables::RUN_QUEUE, tables::BREAKERS] {
            let mut table = txn.open_table(table).unwrap();
            let rows: Vec<(String, Vec<u8>)> = table
                .iter()
                .unwrap()
                .map(|e| e.unwrap())
                .map(|(k, v)| (k.value().to_string(), v.value().to_vec()))
                .collect();
            for (key, record) in rows {
                let (mut len, mut shift, mut at) = (0usize, 0, 1);
                loop {
                    let byte = record[at];
                    len |= usize::from(byte & 0x7f) << shift;
                    at += 1;
                    shift += 7;
                    if byte & 0x80 == 0 {
                        break;
                    }
                }
                let json = &record[at..at + len];
                assert_eq!(json.first(), Some(&b'{'), "`{key}` holds JSON");
                table.insert(key.as_str(), json).unwrap();
            }
        }
        // Wake times were bare numbers.
        let timers: Vec<(String, Vec<u8>)> = {
            let table = txn.open_table(tables::TIMER_OF).unwrap();
            table
                .iter()
                .unwrap()
                .map(|e| e.unwrap())
                .map(|(k, v)| (k.value().to_string(), v.value().to_vec()))
                .collect()
        };
        assert!(txn.delete_table(tables::TIMER_OF).unwrap());
        {
            let bare: TableDefinition<&str, u64> = TableDefinition::new("agentflow.timer_of");
            let mut table = txn.open_table(bare).unwrap();
            for (thread, record) in timers {
                // A version byte, the varint, a CRC-32.
                let (mut at, mut shift) = (0u64, 0);
                for &byte in &record[1..record.len() - 4] {
                    at |= u64::from(byte & 0x7f) << shift;
                    shift += 7;
                }
                table.insert(thread.as_str(), at).unwrap();
            }
        }
        let mut meta = txn.open_table(tables::META).unwrap();
        meta.remove("next_thread_number").unwrap();
        meta.insert("format", 4u32.to_le_bytes().as_slice()).unwrap();
    }
    txn.commit().unwrap();
    moved
}

/// Rewrites a file of format 4 as format 3 wrote it: each thread record without its last
/// field (the parent, none here: one byte), under a new checksum.
fn write_as_format_3(path: &std::path::Path, ids: &[&str]) {
    let db = Database::create(path).unwrap();
    assert_eq!(format_of(&db), 4);
    let txn = db.begin_write().unwrap();
    {
        let mut threads = txn.open_table(tables::THREADS).unwrap();
        for id in ids {
            let record = threads.get(*id).unwrap().unwrap().value().to_vec();
            let (body, _) = record.split_at(record.len() - 4);
            let (old, parent) = body.split_at(body.len() - 1);
            assert_eq!(parent, [0], "`{id}` was written without a parent");
            let mut old = old.to_vec();
            old.extend_from_slice(&crc32(&old).to_le_bytes());
            threads.insert(*id, old.as_slice()).unwrap();
        }
        txn.open_table(tables::META).unwrap().insert("format", 3u32.to_le_bytes().as_slice()).unwrap();
    }
    txn.commit().unwrap();
}

/// Everything the store reads of a thread's history: each checkpoint whole, and the state
/// chain of each.
fn history(store: &RedbStore, id: &str) -> Vec<String> {
    let mut out = Vec::new();
    for summary in store.list_checkpoints(id).unwrap() {
        let checkpoint = store.checkpoint(id, summary.seq).unwrap().unwrap();
        let chain = store.state_chain(id, summary.seq).unwrap().unwrap();
        out.push(format!("{summary:?} {checkpoint:?} {}", String::from_utf8_lossy(&conformance::concat(&chain))));
    }
    out.push(format!("{:?}", store.latest_checkpoint(id).unwrap()));
    out
}

fn number_of(path: &std::path::Path, id: &str) -> Option<u64> {
    let db = Database::create(path).unwrap();
    let txn = db.begin_read().unwrap();
    let numbers = txn.open_table(tables::THREAD_NUMBERS).unwrap();
    numbers.get(id).unwrap().map(|v| v.value())
}

/// A file with threads of one to four checkpoints, each with a snapshot at its root.
fn fill(store: &RedbStore, ids: &[&str]) {
    for (i, id) in ids.iter().enumerate() {
        conformance::commit(store, root(id, 0, format!("S{i}").as_bytes()));
        for seq in 1..=i as u64 {
            conformance::commit(store, conformance::step(id, seq, seq - 1, &[format!("+{seq}").as_bytes()]));
        }
    }
}

#[test]
fn a_format_4_file_opens_its_checkpoints_move_under_thread_numbers_and_read_as_before() {
    let dir = TempDir::new("format-4");
    let path = dir.file("store.redb");
    let ids = ["zeta", "alpha", "mid/2", "beta"];
    let before: Vec<Vec<String>> = {
        let store = RedbStore::open(&path).unwrap();
        fill(&store, &ids);
        store.enqueue_run(NewRun::new("queued", "g", Some(br#"{"n":1}"#.to_vec()), "maria", 7)).unwrap();
        let mut sleeping = conformance::thread("sleeper");
        sleeping.status = ThreadStatus::Sleeping;
        store.commit_step(StepCommit::new(sleeping).with_wake_at(1_900_000_000_123)).unwrap();
        let failed = BreakerUpdate::new(
            "send_email",
            BreakerOp::Failed,
            "call-1",
            BreakerRule::new(1, 60_000, 1_000),
            8,
            "zeta",
            "x",
        );
        assert_eq!(store.update_breaker(failed).unwrap().record.state, BreakerState::Open);
        let before = ids.iter().map(|id| history(&store, id)).collect();
        store.close().unwrap();
        before
    };
    assert_eq!(write_as_format_4(&path), 1 + 2 + 3 + 4);

    let store = RedbStore::open(&path).unwrap();
    for (id, before) in ids.iter().zip(&before) {
        assert_eq!(&history(&store, id), before, "`{id}` reads as it did");
    }
    assert_eq!(store.list_checkpoints("nobody").unwrap(), vec![]);
    // The queued run and the breaker read as they were, now under a checksum.
    let runs = store.list_runs().unwrap();
    assert_eq!(
        runs.iter().map(|r| (r.thread.as_str(), r.owner.as_str(), r.input.as_deref())).collect::<Vec<_>>(),
        [("queued", "maria", Some(br#"{"n":1}"#.as_slice()))]
    );
    assert_eq!(store.thread_timer("sleeper").unwrap(), Some(1_900_000_000_123));
    let due = store.due_timers(u64::MAX, 10).unwrap();
    assert_eq!(
        due.iter().map(|t| (t.thread.as_str(), t.wake_at)).collect::<Vec<_>>(),
        [("sleeper", 1_900_000_000_123)]
    );
    let breaker = store.breaker("send_email").unwrap().unwrap();
    assert_eq!((breaker.state, breaker.failures, breaker.updated_at), (BreakerState::Open, 1, 8));
    assert_eq!(store.latest_checkpoint("nobody").unwrap(), None);
    // A step on a moved thread, and a new thread, commit and read.
    conformance::commit(&store, conformance::step("beta", 4, 3, &[b"+4"]));
    conformance::commit(&store, root("aardvark", 0, b"N"));
    assert_eq!(conformance::concat(&store.state_chain("beta", 4).unwrap().unwrap()), b"S3+1+2+3+4");
    assert_eq!(conformance::concat(&store.state_chain("aardvark", 0).unwrap().unwrap()), b"N");
    store.close().unwrap();

    let db = Database::create(&path).unwrap();
    assert_eq!(format_of(&db), 10, "the file was moved to format 10");
    {
        let txn = db.begin_read().unwrap();
        let names: Vec<String> = txn.list_tables().unwrap().map(|t| redb::TableHandle::name(&t).to_string()).collect();
        assert!(!names.iter().any(|n| n.contains("keyed_by_thread_id")), "the old tables are gone: {names:?}");
    }
    drop(db);
    // Moved threads are numbered in the order of their ids; a new one after them all, though
    // its id sorts first.
    let numbers: Vec<u64> =
        ["alpha", "beta", "mid/2", "zeta", "aardvark"].map(|id| number_of(&path, id).unwrap()).into();
    assert_eq!(numbers, [0, 1, 2, 3, 4]);
    let store = RedbStore::open(&path).unwrap();
    assert_eq!(store.list_checkpoints("beta").unwrap().len(), 5);
    assert_eq!(history(&store, "zeta"), before[0]);
}

#[test]
fn a_new_threads_checkpoints_go_at_the_end_of_the_table_whatever_its_id() {
    let dir = TempDir::new("numbers");
    let path = dir.file("store.redb");
    {
        let store = RedbStore::open(&path).unwrap();
        for id in ["m", "z", "a", "k"] {
            conformance::commit(&store, root(id, 0, b"S"));
            conformance::commit(&store, conformance::step(id, 1, 0, &[b"x"]));
        }
        // A thread without a checkpoint has no number.
        store.commit_step(StepCommit::new(conformance::thread("no-checkpoint"))).unwrap();
        store.close().unwrap();
    }
    let db = Database::create(&path).unwrap();
    let txn = db.begin_read().unwrap();
    let numbers = txn.open_table(tables::THREAD_NUMBERS).unwrap();
    let of = |id: &str| numbers.get(id).unwrap().map(|v| v.value());
    assert_eq!(["m", "z", "a", "k"].map(of), [Some(0), Some(1), Some(2), Some(3)]);
    assert_eq!(of("no-checkpoint"), None);
    let checkpoints = txn.open_table(tables::CHECKPOINTS).unwrap();
    let keys: Vec<(u64, u64)> = checkpoints.iter().unwrap().map(|e| e.unwrap().0.value()).collect();
    assert_eq!(keys, [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1), (3, 0), (3, 1)], "in the order written");
}

#[test]
fn a_format_3_file_opens_moves_to_the_current_format_and_its_children_keep_their_parents() {
    let dir = TempDir::new("format-3");
    let path = dir.file("store.redb");
    let ids = ["acct", "acct/write.0.0.review", "acct/write.0.0.review/check.2.1.0.vet", "acct/2"];
    {
        let store = RedbStore::open(&path).unwrap();
        for id in ids {
            conformance::commit(&store, root(id, 0, b"S"));
        }
        store.close().unwrap();
    }
    write_as_format_4(&path);
    write_as_format_3(&path, &ids);
    let store = RedbStore::open(&path).unwrap();
    let parent = |id: &str| store.thread(id).unwrap().unwrap().parent;
    assert_eq!(parent("acct"), None);
    assert_eq!(parent("acct/write.0.0.review").as_deref(), Some("acct"));
    assert_eq!(parent("acct/write.0.0.review/check.2.1.0.vet").as_deref(), Some("acct/write.0.0.review"));
    assert_eq!(parent("acct/2"), None, "not the shape of a child");
    for id in ids {
        assert_eq!(conformance::concat(&store.state_chain(id, 0).unwrap().unwrap()), b"S", "`{id}`");
    }
    // A step commits the record in this build's layout, parent included (as the runtime does:
    // it carries the parent it read).
    let child = store.thread("acct/write.0.0.review").unwrap().unwrap();
    let step = conformance::step("acct/write.0.0.review", 1, 0, &[b"a"]);
    store.commit_step(StepCommit::new(ThreadRecord { lease: None, ..child }).with_checkpoint(step)).unwrap();
    store.close().unwrap();
    let db = Database::create(&path).unwrap();
    assert_eq!(format_of(&db), 10, "the file was moved to format 10");
    drop(db);
    let store = RedbStore::open(&path).unwrap();
    assert_eq!(store.thread("acct/write.0.0.review").unwrap().unwrap().parent.as_deref(), Some("acct"));
    assert_eq!(conformance::concat(&store.state_chain("acct/write.0.0.review", 1).unwrap().unwrap()), b"Sa");
}

/// Rewrites a file of this build as format 7 wrote it: thread records without the trace context
/// (none here: one byte before the checksum).
fn write_as_format_7(path: &std::path::Path) {
    let db = Database::create(path).unwrap();
    assert_eq!(format_of(&db), 10, "this build writes format 10");
    let txn = db.begin_write().unwrap();
    {
        let mut threads = txn.open_table(tables::THREADS).unwrap();
        let records: Vec<(String, Vec<u8>)> = threads
            .iter()
            .unwrap()
            .map(|e| e.unwrap())
            .map(|(k, v)| (k.value().to_string(), v.value().to_vec()))
            .collect();
        for (id, record) in records {
            let (body, _) = record.split_at(record.len() - 4);
            let (old, trace) = body.split_at(body.len() - 1);
            assert_eq!(trace, [0], "`{id}` was written without a trace");
            let mut old = old.to_vec();
            old.extend_from_slice(&crc32(&old).to_le_bytes());
            threads.insert(id.as_str(), old.as_slice()).unwrap();
        }
        txn.open_table(tables::META).unwrap().insert("format", 7u32.to_le_bytes().as_slice()).unwrap();
    }
    txn.commit().unwrap();
}

#[test]
fn a_format_7_file_opens_its_threads_have_no_trace_and_gain_the_first_one_committed() {
    const TRACE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let dir = TempDir::new("format-7");
    let path = dir.file("store.redb");
    let ids = ["a", "b"];
    {
        let store = RedbStore::open(&path).unwrap();
        fill(&store, &ids);
        store.commit_step(StepCommit::new(conformance::thread("c").with_tenant("acme"))).unwrap();
        store.close().unwrap();
    }
    write_as_format_7(&path);

    let store = RedbStore::open(&path).unwrap();
    let c = store.thread("c").unwrap().unwrap();
    assert_eq!((c.tenant.as_deref(), c.trace.as_deref()), (Some("acme"), None));
    assert_eq!(store.thread("b").unwrap().unwrap().trace, None);
    assert_eq!(conformance::concat(&store.state_chain("b", 1).unwrap().unwrap()), b"S1+1");
    // A commit without one adds none; the first that brings one stores it, and it stays.
    store.commit_step(StepCommit::new(conformance::thread("b"))).unwrap();
    assert_eq!(store.thread("b").unwrap().unwrap().trace, None);
    store.commit_step(StepCommit::new(conformance::thread("c").with_trace(TRACE))).unwrap();
    store.commit_step(StepCommit::new(conformance::thread("c"))).unwrap();
    let c = store.thread("c").unwrap().unwrap();
    assert_eq!((c.tenant.as_deref(), c.trace.as_deref()), (Some("acme"), Some(TRACE)));
    store.close().unwrap();
    let db = Database::create(&path).unwrap();
    assert_eq!(format_of(&db), 10, "the file was moved to format 10");
    drop(db);
    assert_eq!(RedbStore::open(&path).unwrap().thread("c").unwrap().unwrap().trace.as_deref(), Some(TRACE));
}

#[test]
fn a_format_5_file_opens_moves_to_the_current_format_and_its_audit_log_is_chained() {
    let dir = TempDir::new("format-5");
    let path = dir.file("store.redb");
    let ids = ["a", "b", "a/write.0.0.review"];
    let fields = |e: &AuditEntry| (e.seq, e.at, e.actor.clone(), e.kind.clone(), e.detail.clone());
    let before: Vec<Vec<_>> = {
        let store = RedbStore::open(&path).unwrap();
        fill(&store, &ids[..2]);
        let child = conformance::thread(ids[2]).child_of("a");
        store.commit_step(StepCommit::new(child).with_checkpoint(root(ids[2], 0, b"C"))).unwrap();
        for i in 0..3u64 {
            let detail = json!({ "i": i, "who": { "z": 1, "a": [i] } });
            store.append_audit("a", NewAuditEntry::new(10 + i, "alice", "note", detail)).unwrap();
        }
        let mut c = StepCommit::new(conformance::thread("b"));
        c.audit = vec![NewAuditEntry::new(20, "exec", "update_state", json!({ "field": "x" }))];
        store.commit_step(c).unwrap();
        store.put_approval(conformance::approval("ap", "b"), "agent").unwrap();
        let before = ids.iter().map(|id| store.list_audit(id).unwrap().iter().map(fields).collect()).collect();
        store.close().unwrap();
        before
    };
    assert_eq!(write_as_format_5(&path), 5);
    {
        // As format 5 left it: no hashes.
        let db = Database::create(&path).unwrap();
        let txn = db.begin_read().unwrap();
        let audit = txn.open_table(tables::AUDIT).unwrap();
        let entry = AuditEntry::decode_stored(audit.get(("a", 1)).unwrap().unwrap().value()).unwrap();
        assert_eq!((entry.detail_hash.as_str(), entry.link.as_str()), ("", ""));
    }

    let store = RedbStore::open(&path).unwrap();
    for (id, before) in ids.iter().zip(&before) {
        let log = store.list_audit(id).unwrap();
        assert_eq!(&log.iter().map(fields).collect::<Vec<_>>(), before, "`{id}` reads as it did");
        assert!(log.iter().all(|e| e.detail_hash.len() == 64 && e.link.len() == 64), "`{id}` is chained");
        let report = store.verify_audit(id).unwrap().unwrap();
        assert_eq!(report.entries, before.len() as u64);
        let thread = store.thread(id).unwrap().unwrap();
        assert_eq!(thread.tenant, None, "`{id}` has no tenant");
    }
    assert_eq!(store.thread(ids[2]).unwrap().unwrap().parent.as_deref(), Some("a"));
    // The log goes on after the chained entries; a thread created now keeps its tenant.
    assert_eq!(store.append_audit("a", NewAuditEntry::new(30, "bob", "note", json!(null))).unwrap(), 4);
    assert_eq!(store.verify_audit("a").unwrap().unwrap().entries, 4);
    store.commit_step(StepCommit::new(conformance::thread("n").with_tenant("acme"))).unwrap();
    store.commit_step(StepCommit::new(conformance::thread("b"))).unwrap();
    assert_eq!(store.thread("n").unwrap().unwrap().tenant.as_deref(), Some("acme"));
    assert_eq!(conformance::concat(&store.state_chain("b", 1).unwrap().unwrap()), b"S1+1");
    store.close().unwrap();
    let db = Database::create(&path).unwrap();
    assert_eq!(format_of(&db), 10, "the file was moved to format 10");
}

#[test]
fn a_format_8_file_opens_and_gains_the_tables_of_format_9() {
    use agentflow_store::{EventId, IdempotencyKey, NewEvent, QueueError};

    let dir = TempDir::new("format-8");
    let path = dir.file("store.redb");
    {
        let store = RedbStore::open(&path).unwrap();
        fill(&store, &["a", "b"]);
        store.close().unwrap();
    }
    // As format 8 left a file: without the new tables.
    {
        let db = Database::create(&path).unwrap();
        assert_eq!(format_of(&db), 10, "this build writes format 10");
        let txn = db.begin_write().unwrap();
        assert!(txn.delete_table(tables::EVENTS).unwrap());
        assert!(txn.delete_table(tables::EVENT_LOG_ENDS).unwrap());
        assert!(txn.delete_table(tables::IDEMPOTENCY_KEYS).unwrap());
        assert!(txn.delete_table(tables::IDEMPOTENCY_BY_TIME).unwrap());
        assert!(txn.delete_table(tables::IDEMPOTENCY_BY_THREAD).unwrap());
        assert!(txn.delete_table(tables::FOLLOW_UPS).unwrap());
        assert!(txn.delete_table(tables::SCHEDULES).unwrap());
        assert!(txn.delete_table(tables::WEBHOOKS).unwrap());
        assert!(txn.delete_table(tables::WEBHOOKS_BY_THREAD).unwrap());
        assert!(txn.delete_table(tables::WEBHOOKS_DUE).unwrap());
        txn.open_table(tables::META).unwrap().insert("format", 8u32.to_le_bytes().as_slice()).unwrap();
        txn.commit().unwrap();
    }

    let store = RedbStore::open(&path).unwrap();
    assert_eq!(conformance::concat(&store.state_chain("b", 1).unwrap().unwrap()), b"S1+1");
    assert_eq!(store.read_events("b", None, 10).unwrap().newest, None);
    let events = vec![NewEvent::new("step", b"{}".to_vec())];
    store.commit_step(StepCommit::new(conformance::thread("b")).with_events(events)).unwrap();
    assert_eq!(store.read_events("b", None, 10).unwrap().newest, Some(EventId::new(1, 0)));
    let start = |thread: &str| {
        NewRun::new(thread, "g", None, "alice", 1).with_idempotency(IdempotencyKey::new("alice", "k", "r"))
    };
    store.enqueue_run(start("q1")).unwrap();
    assert!(matches!(store.enqueue_run(start("q2")), Err(QueueError::KeyUsed { .. })));
    // Follow-ups, schedules and webhook deliveries have their tables too.
    let follow_up = NewRun::new("q1", "g", None, "alice", 2).as_follow_up(None);
    let entry = agentflow_store::NewAuditEntry::new(2, "alice", "run.submitted", serde_json::json!({}));
    let queued = store.enqueue_follow_up(follow_up, entry, agentflow_store::FollowUpPlace::Back).unwrap();
    assert_eq!(queued, agentflow_store::FollowUpQueued::Behind { ahead: 0 });
    let schedule = agentflow_store::ScheduleRecord::new("s", "g", "0 * * * *", b"{}".to_vec(), "alice", 5, 1);
    store.put_schedule(schedule.clone()).unwrap();
    assert_eq!(store.scan_schedules().unwrap().items, [schedule]);
    assert!(store.due_webhooks(u64::MAX, 10).unwrap().items.is_empty());
    store.close().unwrap();
    let db = Database::create(&path).unwrap();
    assert_eq!(format_of(&db), 10, "the file was moved to format 10");
}
