//! A pending write: a node's update kept from a step that failed half-way.

use serde::{Deserialize, Serialize};

/// A successful node write inside a super-step that failed half-way, kept so only the failed
/// nodes re-run. Keyed (thread, `seq`, `node`, `idx`); `seq` is the checkpoint the step ran from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingWrite {
    /// Checkpoint the step started from.
    pub seq: u64,
    /// Node that produced the write.
    pub node: String,
    /// Position of the write among the node's writes (also distinguishes map-reduce sends).
    pub idx: u32,
    /// Serialised update.
    pub value: Vec<u8>,
}
