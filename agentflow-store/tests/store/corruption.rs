//! Damaged, foreign and locked files give typed errors that name the path, never a panic.

use crate::common;

use std::path::Path;

use agentflow_store::conformance::{self, approval, root, step, thread};
use agentflow_store::{
    ApprovalError, ApprovalPatch, ApprovalStatus, CommitError, OpenError, ReadError, RedbStore, StepCommit,
    StorageError, Store, tables,
};
use common::TempDir;
use redb::{Database, TableDefinition};

/// A store with one thread, three checkpoints, an approval and an audit entry, closed.
fn populated(path: &Path) {
    let store = RedbStore::open(path).unwrap();
    conformance::commit(&store, root("t", 0, b"S"));
    conformance::commit(&store, step("t", 1, 0, &[b"a"]));
    conformance::commit(&store, step("t", 2, 1, &[b"b"]));
    store.put_approval(approval("a1", "t"), "agent").unwrap();
    store.close().unwrap();
}

/// Deterministic pseudo-random bytes (xorshift).
fn noise(len: usize, mut seed: u64) -> Vec<u8> {
    (0..len)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed as u8
        })
        .collect()
}

fn assert_names_path(message: &str, path: &Path) {
    assert!(message.contains(&path.display().to_string()), "message does not name {}: {message}", path.display());
}

#[test]
fn random_bytes_are_not_a_store() {
    let dir = TempDir::new("random");
    for (i, len) in [1usize, 17, 512, 4096, 65_536, 1 << 20].into_iter().enumerate() {
        let path = dir.file(&format!("random-{len}.redb"));
        std::fs::write(&path, noise(len, 0x9e37_79b9_7f4a_7c15 + i as u64)).unwrap();
        let err = RedbStore::open(&path).unwrap_err();
        assert!(matches!(err, OpenError::NotAStore { .. } | OpenError::Corrupted { .. }), "{len} bytes: {err:?}");
        assert_names_path(&err.to_string(), &path);
    }
}

#[test]
fn text_file_is_not_a_store() {
    let dir = TempDir::new("text");
    let path = dir.file("notes.txt");
    std::fs::write(&path, "# meeting notes\n".repeat(400)).unwrap();
    let err = RedbStore::open(&path).unwrap_err();
    assert!(matches!(err, OpenError::NotAStore { .. }), "{err:?}");
    let message = err.to_string();
    assert_names_path(&message, &path);
    assert!(message.contains("not an agentflow store"), "{message}");
}

#[test]
fn truncated_file_is_an_error() {
    let dir = TempDir::new("truncated");
    let original = dir.file("original.redb");
    populated(&original);
    let bytes = std::fs::read(&original).unwrap();
    for cut in [10, 100, 600, 4096, bytes.len() / 2, bytes.len() - 1] {
        let path = dir.file(&format!("cut-{cut}.redb"));
        std::fs::write(&path, &bytes[..cut]).unwrap();
        match RedbStore::open(&path) {
            Err(err) => assert_names_path(&err.to_string(), &path),
            // redb may repair a file cut past its last commit; it must then still read.
            Ok(store) => {
                let _ = store.list_checkpoints("t");
                let _ = store.state_chain("t", 2);
            }
        }
    }
}

#[test]
fn damaged_pages_are_reported() {
    let dir = TempDir::new("damaged");
    let original = dir.file("original.redb");
    populated(&original);
    let bytes = std::fs::read(&original).unwrap();
    let mut seen_error = false;
    for (i, offset) in (4096..bytes.len()).step_by(4096).enumerate() {
        let path = dir.file(&format!("damaged-{offset}.redb"));
        let mut damaged = bytes.clone();
        let end = (offset + 4096).min(damaged.len());
        damaged[offset..end].copy_from_slice(&noise(end - offset, 7 + i as u64));
        std::fs::write(&path, &damaged).unwrap();
        match RedbStore::open(&path) {
            Err(err) => {
                seen_error = true;
                assert_names_path(&err.to_string(), &path);
            }
            // A page that holds nothing live is not read; the data must still be usable.
            Ok(store) => {
                let _ = store.list_checkpoints("t");
                let _ = store.state_chain("t", 2);
            }
        }
    }
    assert!(seen_error, "no damaged page was detected");
}

#[test]
fn unverified_open_of_damaged_pages_never_panics() {
    let dir = TempDir::new("unverified");
    let original = dir.file("original.redb");
    populated(&original);
    let bytes = std::fs::read(&original).unwrap();
    for (i, offset) in (4096..bytes.len()).step_by(4096).enumerate() {
        let path = dir.file(&format!("damaged-{offset}.redb"));
        let mut damaged = bytes.clone();
        let end = (offset + 4096).min(damaged.len());
        damaged[offset..end].copy_from_slice(&noise(end - offset, 11 + i as u64));
        std::fs::write(&path, &damaged).unwrap();
        // Without verification redb panics on some damaged pages; the store turns that into
        // `OpenError::Corrupted` or a read error.
        let Ok(store) = RedbStore::builder().verify_on_open(false).open(&path) else {
            continue;
        };
        // Any outcome but a panic is acceptable; errors must name the file.
        if let Err(e) = store.list_checkpoints("t") {
            assert_names_path(&e.to_string(), &path);
        }
        if let Err(e) = store.state_chain("t", 2) {
            assert_names_path(&e.to_string(), &path);
        }
        let _ = store.thread("t");
        let _ = store.list_pending_approvals();
        if let Err(e) = store.commit_step(StepCommit::new(thread("t")).with_checkpoint(step("t", 3, 2, &[b"c"]))) {
            assert_names_path(&e.to_string(), &path);
        }
        let _ = store.acquire_lease("t", "w", 10, 1);
    }
}

#[test]
fn foreign_redb_file_is_refused() {
    let dir = TempDir::new("foreign");
    let path = dir.file("other.redb");
    {
        let db = Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let users: TableDefinition<&str, u64> = TableDefinition::new("users");
            let mut table = txn.open_table(users).unwrap();
            table.insert("alice", &1).unwrap();
        }
        txn.commit().unwrap();
    }
    let err = RedbStore::open(&path).unwrap_err();
    assert!(matches!(&err, OpenError::Foreign { tables, .. } if tables == &["users"]), "{err:?}");
    assert_names_path(&err.to_string(), &path);
}

/// Rewrites the store format version recorded in the file.
fn set_format(path: &Path, format: u32) {
    let db = Database::create(path).unwrap();
    let txn = db.begin_write().unwrap();
    txn.open_table(tables::META).unwrap().insert("format", format.to_le_bytes().as_slice()).unwrap();
    txn.commit().unwrap();
}

#[test]
fn newer_store_format_is_refused() {
    let dir = TempDir::new("format");
    let path = dir.file("store.redb");
    populated(&path);
    set_format(&path, 99);
    let err = RedbStore::open(&path).unwrap_err();
    assert!(matches!(err, OpenError::UnsupportedFormat { .. }), "{err:?}");
    assert!(err.to_string().contains("upgrade agentflow-store"), "{err}");
    assert_names_path(&err.to_string(), &path);
}

#[test]
fn older_store_format_is_refused() {
    // 1 and 2: before every stored value carried a checksum.
    for format in [1u32, 2] {
        let dir = TempDir::new("format-old");
        let path = dir.file("store.redb");
        populated(&path);
        set_format(&path, format);
        let err = RedbStore::open(&path).unwrap_err();
        assert!(
            matches!(err, OpenError::UnsupportedFormat { ref found, .. } if *found == format.to_string()),
            "{err:?}"
        );
        assert!(err.to_string().contains("older agentflow-store"), "{err}");
        assert!(err.to_string().contains("it reads format 3 to 10"), "{err}");
        assert!(!err.to_string().contains("upgrade agentflow-store"), "{err}");
    }
}

#[test]
fn a_missing_snapshot_is_a_decode_error() {
    let dir = TempDir::new("no-snapshot");
    let path = dir.file("store.redb");
    populated(&path);
    {
        let t = thread_number(&path, "t");
        let db = Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        assert!(txn.open_table(tables::SNAPSHOTS).unwrap().remove((t, 0)).unwrap().is_some());
        txn.commit().unwrap();
    }
    let store = RedbStore::open(&path).unwrap();
    for err in [store.checkpoint("t", 0).unwrap_err(), store.state_chain("t", 2).unwrap_err()] {
        read_decode_error(err, &path);
    }
    let message = store.state_chain("t", 1).unwrap_err().to_string();
    assert!(message.contains("agentflow.snapshots") && message.contains("snapshot is missing"), "{message}");
    // The checkpoints themselves are intact: listing them works.
    assert_eq!(store.list_checkpoints("t").unwrap().len(), 3);
}

#[test]
fn leases_do_not_outlive_the_open_file() {
    let dir = TempDir::new("leases");
    let path = dir.file("store.redb");
    populated(&path);
    let store = RedbStore::open(&path).unwrap();
    store.acquire_lease("t", "first", 60_000, 1).unwrap();
    assert_eq!(store.thread("t").unwrap().unwrap().lease.map(|l| l.holder).as_deref(), Some("first"));
    drop(store);
    // The process that held the file is gone (here: the handle): the thread is free.
    let store = RedbStore::open(&path).unwrap();
    assert_eq!(store.thread("t").unwrap().unwrap().lease, None);
    assert_eq!(store.acquire_lease("t", "second", 60_000, 2).unwrap().holder, "second");
}

#[test]
fn second_open_is_already_open() {
    let dir = TempDir::new("locked");
    let path = dir.file("store.redb");
    let first = RedbStore::open(&path).unwrap();
    let err = RedbStore::open(&path).unwrap_err();
    assert!(matches!(err, OpenError::AlreadyOpen { .. }), "{err:?}");
    let message = err.to_string();
    assert_names_path(&message, &path);
    assert!(message.contains("another process has this store open; stop it or use another file"), "{message}");
    drop(first);
    let again = RedbStore::open(&path).unwrap();
    assert!(again.list_threads().unwrap().is_empty());
}

#[test]
fn reopen_keeps_everything() {
    let dir = TempDir::new("reopen");
    let path = dir.file("store.redb");
    populated(&path);
    let store = RedbStore::open(&path).unwrap();
    assert_eq!(store.list_checkpoints("t").unwrap().len(), 3);
    assert_eq!(conformance::concat(&store.state_chain("t", 2).unwrap().unwrap()), b"Sab");
    assert_eq!(store.list_pending_approvals().unwrap().len(), 1);
}

/// The number the file gave `thread`, the first part of its checkpoint and snapshot keys.
fn thread_number(path: &Path, thread: &str) -> u64 {
    use redb::ReadableDatabase;
    let db = Database::create(path).unwrap();
    let txn = db.begin_read().unwrap();
    let numbers = txn.open_table(tables::THREAD_NUMBERS).unwrap();
    numbers.get(thread).unwrap().expect("the thread has checkpoints, so a number").value()
}

/// Writes `garbage` under `key` of `table`, bypassing the store.
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

fn decode_error(err: &StorageError, path: &Path) {
    assert!(matches!(err, StorageError::Decode { .. }), "{err:?}");
    assert_names_path(&err.to_string(), path);
}

fn read_decode_error(err: ReadError, path: &Path) {
    match err {
        ReadError::Storage(e) => decode_error(&e, path),
        other => panic!("expected a decode error, got {other:?}"),
    }
}

#[test]
fn garbage_records_are_decode_errors() {
    let dir = TempDir::new("garbage");
    let path = dir.file("store.redb");
    populated(&path);
    let t = thread_number(&path, "t");
    inject(&path, tables::CHECKPOINTS, (t, 1), b"\x01\xff\xff");
    inject(&path, tables::SNAPSHOTS, (t, 0), b"\x07garbage");
    inject(&path, tables::THREADS, "t", b"");
    inject(&path, tables::APPROVALS, "a1", &noise(40, 3));
    inject(&path, tables::AUDIT, ("t", 1), b"\x01\x01t\x01");

    let store = RedbStore::open(&path).unwrap();
    read_decode_error(store.checkpoint("t", 1).unwrap_err(), &path);
    read_decode_error(store.checkpoint("t", 0).unwrap_err(), &path);
    read_decode_error(store.list_checkpoints("t").unwrap_err(), &path);
    read_decode_error(store.state_chain("t", 2).unwrap_err(), &path);
    read_decode_error(store.thread("t").unwrap_err(), &path);
    read_decode_error(store.list_threads().unwrap_err(), &path);
    read_decode_error(store.approval("a1").unwrap_err(), &path);
    read_decode_error(store.list_pending_approvals().unwrap_err(), &path);
    read_decode_error(store.list_audit("t").unwrap_err(), &path);
    // Untouched records still read.
    assert!(store.checkpoint("t", 2).unwrap().is_some());

    // Writes that need a garbage record fail with the same error and write nothing.
    let err = store
        .transition_approval("a1", ApprovalStatus::Pending, ApprovalStatus::Approved, ApprovalPatch::by("x", 1))
        .unwrap_err();
    match err {
        ApprovalError::Storage(e) => decode_error(&e, &path),
        other => panic!("{other:?}"),
    }
    // Leases live in memory beside the open file: a reopened file has none,
    // so the thread can be taken again.
    let err = store.commit_step(StepCommit::new(thread("t")).fenced_by("w", 1)).unwrap_err();
    assert!(matches!(err, CommitError::LeaseLost { current: None, .. }), "{err:?}");
    assert_eq!(store.acquire_lease("t", "w", 10, 1).unwrap().holder, "w");

    // The message says what to do.
    let message = store.checkpoint("t", 1).unwrap_err().to_string();
    assert!(message.contains("agentflow.checkpoints"), "{message}");
    assert!(message.contains("restore it from a backup"), "{message}");
}

/// Two threads, `a` (checkpoints 0 and 1) and `b` (checkpoint 0), closed.
fn two_threads(path: &Path) {
    let store = RedbStore::open(path).unwrap();
    conformance::commit(&store, root("a", 0, b"A"));
    conformance::commit(&store, step("a", 1, 0, &[b"+a1"]));
    conformance::commit(&store, root("b", 0, b"B"));
    store.close().unwrap();
}

/// Everything the store reads of thread `id`'s history, to compare before and after.
fn history_of(store: &RedbStore, id: &str) -> (Vec<u64>, Vec<u8>) {
    let seqs = store.list_checkpoints(id).unwrap().iter().map(|s| s.seq).collect();
    let latest = store.latest_checkpoint(id).unwrap().unwrap().seq;
    (seqs, conformance::concat(&store.state_chain(id, latest).unwrap().unwrap()))
}

#[test]
fn a_lost_thread_number_counter_refuses_a_new_thread_instead_of_giving_it_another_threads_rows() {
    let dir = TempDir::new("lost-counter");
    let path = dir.file("store.redb");
    two_threads(&path);
    {
        let db = Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        assert!(txn.open_table(tables::META).unwrap().remove("next_thread_number").unwrap().is_some());
        txn.commit().unwrap();
    }
    let store = RedbStore::open(&path).unwrap();
    let err = store.commit_step(StepCommit::new(thread("c")).with_checkpoint(root("c", 0, b"C"))).unwrap_err();
    let message = err.to_string();
    assert!(
        matches!(&err, CommitError::Storage(StorageError::Corrupted { .. })) && message.contains("\"c\""),
        "{err:?}"
    );
    assert!(message.contains("the counter is damaged"), "{message}");
    // Nothing was written: `a` reads as it was, `c` has no checkpoint.
    assert_eq!(history_of(&store, "a"), (vec![0, 1], b"A+a1".to_vec()));
    assert_eq!(store.list_checkpoints("c").unwrap(), vec![]);
    // The same for a thread moved in with `restore_thread`.
    let mut dump = store.dump_thread("b").unwrap().unwrap();
    dump.thread.id = "d".into();
    for cp in &mut dump.checkpoints {
        cp.thread = "d".into();
    }
    assert!(store.restore_thread(dump).unwrap_err().to_string().contains("the counter is damaged"));
    assert_eq!(history_of(&store, "b"), (vec![0], b"B".to_vec()));
}

#[test]
fn a_damaged_thread_number_is_a_decode_error_never_another_threads_history() {
    let dir = TempDir::new("damaged-number");
    let path = dir.file("store.redb");
    two_threads(&path);
    {
        let db = Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            use redb::ReadableTable;
            let mut numbers = txn.open_table(tables::THREAD_NUMBERS).unwrap();
            let a = numbers.get("a").unwrap().unwrap().value();
            let b = numbers.get("b").unwrap().unwrap().value();
            // `a`'s number becomes `b`'s.
            numbers.insert("a", b).unwrap();
            assert_ne!(a, b);
        }
        txn.commit().unwrap();
    }
    let store = RedbStore::builder().verify_on_open(false).open(&path).unwrap();
    let damaged = |err: ReadError| {
        let message = err.to_string();
        assert!(message.contains("of thread \"b\"") && message.contains("thread numbers"), "{message}");
    };
    damaged(store.latest_checkpoint("a").unwrap_err());
    damaged(store.list_checkpoints("a").unwrap_err());
    damaged(store.checkpoint("a", 0).unwrap_err());
    damaged(store.state_chain("a", 0).unwrap_err());
    // A step of `a` is refused, not written among `b`'s checkpoints.
    let err = store.commit_step(StepCommit::new(thread("a")).with_checkpoint(step("a", 2, 1, &[b"+a2"]))).unwrap_err();
    assert!(err.to_string().contains("thread numbers"), "{err:?}");
    assert_eq!(history_of(&store, "b"), (vec![0], b"B".to_vec()));
}
