//! The records and helpers every case builds with, and the suite's fixed clock.

use serde_json::json;

use crate::{
    ApprovalRecord, ApprovalStatus, Checkpoint, CheckpointMetadata, CheckpointSource, StateChain, StepCommit, Store,
    ThreadRecord,
};

/// A fixed clock for the suite (unix millis).
pub const NOW: u64 = 1_700_000_000_000;

/// A running thread record.
pub fn thread(id: &str) -> ThreadRecord {
    ThreadRecord::new(id, "owner", "fingerprint", 1, NOW)
}

/// A root checkpoint with a snapshot.
pub fn root(thread: &str, seq: u64, snapshot: &[u8]) -> Checkpoint {
    Checkpoint {
        thread: thread.to_string(),
        seq,
        parent: None,
        cursor: vec!["start".to_string()],
        snapshot: Some(snapshot.to_vec()),
        delta: Vec::new(),
        metadata: CheckpointMetadata::new(0, CheckpointSource::Input, Vec::new()),
        created_at: NOW,
    }
}

/// A loop checkpoint with a delta and no snapshot.
pub fn step(thread: &str, seq: u64, parent: u64, delta: &[&[u8]]) -> Checkpoint {
    Checkpoint {
        thread: thread.to_string(),
        seq,
        parent: Some(parent),
        cursor: vec![format!("node{seq}")],
        snapshot: None,
        delta: delta.iter().map(|d| d.to_vec()).collect(),
        metadata: CheckpointMetadata {
            step: seq,
            source: CheckpointSource::Loop,
            nodes: vec![format!("node{parent}")],
            extra: json!({ "seq": seq }),
        },
        created_at: NOW + seq,
    }
}

/// Commits `checkpoint` with the thread record of its thread.
pub fn commit(store: &dyn Store, checkpoint: Checkpoint) {
    let t = thread(&checkpoint.thread);
    store.commit_step(StepCommit::new(t).with_checkpoint(checkpoint)).expect("commit");
}

/// The suite's fold: the state is the snapshot followed by every delta blob.
pub fn concat(chain: &StateChain) -> Vec<u8> {
    let mut state = chain.snapshot.clone();
    for step in &chain.steps {
        for blob in &step.delta {
            state.extend_from_slice(blob);
        }
    }
    state
}

pub(crate) fn state_at(store: &dyn Store, thread: &str, seq: u64) -> Vec<u8> {
    concat(&store.state_chain(thread, seq).unwrap().expect("chain"))
}

/// A pending approval of `thread`.
pub fn approval(id: &str, thread: &str) -> ApprovalRecord {
    ApprovalRecord {
        id: id.to_string(),
        thread: thread.to_string(),
        node: "refund".to_string(),
        tool: "process_refund".to_string(),
        args: r#"{"amount":299}"#.to_string(),
        args_hash: "h299".to_string(),
        risk: "irreversible".to_string(),
        requester: "agent".to_string(),
        reason: "refund over limit".to_string(),
        created_at: NOW,
        expires_at: NOW + 60_000,
        status: ApprovalStatus::Pending,
        decided_by: None,
        decision_note: None,
        conditions: None,
        updated_at: NOW,
    }
}
