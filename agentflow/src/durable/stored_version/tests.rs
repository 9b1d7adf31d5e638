//! The version read for a stored thread: its description's, else its last move's, else its
//! first checkpoint's, else 1.

use agentflow_store::{
    Checkpoint, CheckpointMetadata, CheckpointSource, NewAuditEntry, RedbStore, StepCommit, Store, ThreadRecord,
};
use serde_json::json;

use super::{MIGRATED_KIND, stored_version};

/// A thread `t` under fingerprint `fp` with a root checkpoint recording `graph` and the audit
/// entries of `moves` (`to` of each).
fn thread(store: &RedbStore, graph: serde_json::Value, moves: &[u64]) {
    let mut metadata = CheckpointMetadata::new(0, CheckpointSource::Input, vec![]);
    metadata.extra = json!({ "graph": graph });
    let root = Checkpoint {
        thread: "t".into(),
        seq: 0,
        parent: None,
        cursor: vec!["a".into()],
        snapshot: Some(b"{}".to_vec()),
        delta: vec![],
        metadata,
        created_at: 1,
    };
    let mut commit = StepCommit::new(ThreadRecord::new("t", "ops", "fp", 1, 1));
    commit.checkpoint = Some(root);
    commit.audit =
        moves.iter().map(|to| NewAuditEntry::new(2, "agentflow", MIGRATED_KIND, json!({ "to": to }))).collect();
    store.commit_step(commit).unwrap();
}

#[test]
fn a_thread_with_nothing_that_names_a_version_is_version_1() {
    let store = RedbStore::in_memory().unwrap();
    assert_eq!(stored_version(&store, "t", "fp").unwrap(), 1, "an unknown thread");
    thread(&store, json!({ "name": "g" }), &[]);
    assert_eq!(stored_version(&store, "t", "fp").unwrap(), 1, "a shape written before versions");
}

#[test]
fn the_first_checkpoint_then_the_last_move_then_the_description_name_it() {
    let store = RedbStore::in_memory().unwrap();
    thread(&store, json!({ "name": "g", "version": 2 }), &[]);
    assert_eq!(stored_version(&store, "t", "fp").unwrap(), 2);
    let store = RedbStore::in_memory().unwrap();
    thread(&store, json!({ "name": "g", "version": 2 }), &[3, 4]);
    assert_eq!(stored_version(&store, "t", "fp").unwrap(), 4, "the last move's `to`");
    store.put_graph_description("fp", &json!({ "id": "g", "version": 5 }).to_string()).unwrap();
    assert_eq!(stored_version(&store, "t", "fp").unwrap(), 5, "the description under the fingerprint");
}

#[test]
fn a_move_that_names_the_fingerprint_says_its_version_before_the_last_move() {
    let store = RedbStore::in_memory().unwrap();
    thread(&store, json!({ "name": "g", "version": 1 }), &[]);
    let moved = |from: &str, to: &str, versions: (u32, u32)| {
        let mut commit = StepCommit::new(ThreadRecord::new("t", "ops", "fp", 1, 1));
        let detail = json!({ "from": versions.0, "to": versions.1, "fingerprints": { "from": from, "to": to } });
        commit.audit = vec![NewAuditEntry::new(3, "agentflow", MIGRATED_KIND, detail)];
        store.commit_step(commit).unwrap();
    };
    moved("v1", "v2", (1, 2));
    moved("v2", "v3", (2, 3));
    assert_eq!(stored_version(&store, "t", "v2").unwrap(), 2, "the fingerprint version 2 had");
    assert_eq!(stored_version(&store, "t", "v1").unwrap(), 1, "forked back before both moves");
    assert_eq!(stored_version(&store, "t", "other").unwrap(), 3, "none names it: the last move's `to`");
}
