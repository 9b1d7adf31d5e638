//! A store file of format 3 (thread records without a parent) opens in this build, is moved to
//! format 4, and its threads get the parents their ids' shape gave them then.

mod common;

use agentflow_store::conformance::{self, root};
use agentflow_store::{RedbStore, StepCommit, Store, ThreadRecord, tables};
use common::TempDir;
use redb::{Database, ReadableDatabase, ReadableTable};

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

#[test]
fn a_format_3_file_opens_moves_to_format_4_and_its_children_keep_their_parents() {
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
    // Rewrite the file as format 3 wrote it: each thread record without its last field (the
    // parent, none here: one byte), under a new checksum.
    {
        let db = Database::create(&path).unwrap();
        assert_eq!(format_of(&db), 4, "this build writes format 4");
        let txn = db.begin_write().unwrap();
        {
            let mut threads = txn.open_table(tables::THREADS).unwrap();
            for id in ids {
                let record = threads.get(id).unwrap().unwrap().value().to_vec();
                let (body, _) = record.split_at(record.len() - 4);
                let (old, parent) = body.split_at(body.len() - 1);
                assert_eq!(parent, [0], "`{id}` was written without a parent");
                let mut old = old.to_vec();
                old.extend_from_slice(&crc32(&old).to_le_bytes());
                threads.insert(id, old.as_slice()).unwrap();
            }
            txn.open_table(tables::META).unwrap().insert("format", 3u32.to_le_bytes().as_slice()).unwrap();
        }
        txn.commit().unwrap();
    }
    let store = RedbStore::open(&path).unwrap();
    let parent = |id: &str| store.thread(id).unwrap().unwrap().parent;
    assert_eq!(parent("acct"), None);
    assert_eq!(parent("acct/write.0.0.review").as_deref(), Some("acct"));
    assert_eq!(parent("acct/write.0.0.review/check.2.1.0.vet").as_deref(), Some("acct/write.0.0.review"));
    assert_eq!(parent("acct/2"), None, "not the shape of a child");
    // A step commits the record in this build's layout, parent included (as the runtime does:
    // it carries the parent it read).
    let child = store.thread("acct/write.0.0.review").unwrap().unwrap();
    let step = conformance::step("acct/write.0.0.review", 1, 0, &[b"a"]);
    store.commit_step(StepCommit::new(ThreadRecord { lease: None, ..child }).with_checkpoint(step)).unwrap();
    store.close().unwrap();
    let db = Database::create(&path).unwrap();
    assert_eq!(format_of(&db), 4, "the file was moved to format 4");
    drop(db);
    let store = RedbStore::open(&path).unwrap();
    assert_eq!(store.thread("acct/write.0.0.review").unwrap().unwrap().parent.as_deref(), Some("acct"));
}
