//! Group commit on a file: concurrent committers share transactions and none is lost, even when
//! some of them are refused.

use crate::common;

use std::sync::Barrier;

use agentflow_store::conformance::{NOW, root, step, thread};
use agentflow_store::{CommitError, Durability, RedbStore, StepCommit, Store};
use common::TempDir;

#[test]
fn concurrent_immediate_commits_share_transactions() {
    let dir = TempDir::new("group");
    let path = dir.file("store.redb");
    let store = RedbStore::open(&path).unwrap();
    let barrier = Barrier::new(16);
    let groups: Vec<usize> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..16)
            .map(|i| {
                let (store, barrier) = (&store, &barrier);
                s.spawn(move || {
                    let id = format!("t{i}");
                    let mut sizes = Vec::new();
                    barrier.wait();
                    let c = StepCommit::new(thread(&id)).with_checkpoint(root(&id, 0, b"S"));
                    sizes.push(store.commit_step(c).unwrap().group_size);
                    for seq in 1..8 {
                        let c = StepCommit::new(thread(&id)).with_checkpoint(step(&id, seq, seq - 1, &[b"x"]));
                        let receipt = store.commit_step(c).unwrap();
                        assert!(receipt.durable);
                        sizes.push(receipt.group_size);
                    }
                    sizes
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(groups.len(), 16 * 8);
    assert!(groups.iter().any(|&g| g > 1), "16 concurrent committers never shared a transaction");
    drop(store);

    // Everything is there after a reopen.
    let store = RedbStore::open(&path).unwrap();
    for i in 0..16 {
        assert_eq!(store.list_checkpoints(&format!("t{i}")).unwrap().len(), 8);
    }
}

#[test]
fn refused_commits_do_not_sink_their_group() {
    let store = RedbStore::in_memory().unwrap();
    for i in 0..16 {
        let id = format!("t{i}");
        store.commit_step(StepCommit::new(thread(&id)).with_checkpoint(root(&id, 0, b"S"))).unwrap();
    }
    let barrier = Barrier::new(16);
    let results: Vec<Result<_, CommitError>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..16)
            .map(|i| {
                let (store, barrier) = (&store, &barrier);
                s.spawn(move || {
                    let id = format!("t{i}");
                    // Odd threads reuse seq 0, which is refused.
                    let seq = if i % 2 == 0 { 1 } else { 0 };
                    barrier.wait();
                    store.commit_step(
                        StepCommit::new(thread(&id))
                            .with_checkpoint(step(&id, seq, 0, &[b"x"]))
                            .with_durability(Durability::Eventual),
                    )
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (i, result) in results.iter().enumerate() {
        let latest = store.latest_checkpoint(&format!("t{i}")).unwrap().unwrap().seq;
        if i % 2 == 0 {
            assert!(result.is_ok(), "t{i}: {result:?}");
            assert_eq!(latest, 1);
        } else {
            assert!(matches!(result, Err(CommitError::SeqNotIncreasing { .. })), "t{i}: {result:?}");
            assert_eq!(latest, 0);
        }
    }
}

#[test]
fn eventual_commits_survive_close() {
    let dir = TempDir::new("eventual");
    let path = dir.file("store.redb");
    {
        let store = RedbStore::builder().flush_interval(None).open(&path).unwrap();
        for seq in 0..20u64 {
            let c = if seq == 0 { root("t", 0, b"S") } else { step("t", seq, seq - 1, &[b"x"]) };
            let receipt = store
                .commit_step(StepCommit::new(thread("t")).with_checkpoint(c).with_durability(Durability::Eventual))
                .unwrap();
            assert!(!receipt.durable);
        }
        store.close().unwrap();
    }
    let store = RedbStore::open(&path).unwrap();
    assert_eq!(store.list_checkpoints("t").unwrap().len(), 20);
    assert_eq!(store.thread("t").unwrap().unwrap().created_at, NOW);
}

/// `RedbStore`: dropping the store (no `close()`) makes its eventual commits durable too.
#[test]
fn eventual_commits_survive_a_drop() {
    let dir = TempDir::new("eventual-drop");
    let path = dir.file("store.redb");
    {
        let store = RedbStore::builder().flush_interval(None).open(&path).unwrap();
        for seq in 0..20u64 {
            let c = if seq == 0 { root("t", 0, b"S") } else { step("t", seq, seq - 1, &[b"x"]) };
            let commit = StepCommit::new(thread("t")).with_checkpoint(c).with_durability(Durability::Eventual);
            assert!(!store.commit_step(commit).unwrap().durable);
        }
        drop(store);
    }
    let store = RedbStore::open(&path).unwrap();
    assert_eq!(store.list_checkpoints("t").unwrap().len(), 20);
}

#[test]
fn history_of_3000_checkpoints_lists_all_and_rebuilds_from_the_nearest_snapshot() {
    let store = RedbStore::in_memory().unwrap();
    let mut c =
        StepCommit::new(thread("t")).with_checkpoint(root("t", 0, &[7u8; 2048])).with_durability(Durability::Eventual);
    store.commit_step(c).unwrap();
    for seq in 1..3000u64 {
        let mut cp = step("t", seq, seq - 1, &[&[1u8; 200], &[2u8; 200]]);
        if seq % 100 == 0 {
            cp.snapshot = Some(vec![7u8; 2048]);
        }
        c = StepCommit::new(thread("t")).with_checkpoint(cp).with_durability(Durability::Eventual);
        store.commit_step(c).unwrap();
    }
    // How fast is measured by `cargo bench --bench store` (history reads), not here.
    assert_eq!(store.list_checkpoints("t").unwrap().len(), 3000);
    let chain = store.state_chain("t", 2999).unwrap().unwrap();
    assert_eq!(chain.snapshot_seq, 2900);
    assert_eq!(chain.steps.len(), 99);
}

/// A dump read while a run commits is the thread at one moment (one read transaction).
#[test]
fn a_dump_taken_while_steps_commit_is_the_thread_at_one_moment() {
    let dir = TempDir::new("dump-moment");
    let store = RedbStore::open(dir.file("store.redb")).unwrap();
    let dumps = agentflow_store::conformance::dump_is_one_moment(&store, 300);
    assert!(dumps > 0);
}
