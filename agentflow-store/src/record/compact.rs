//! What a compaction removed.

use serde::{Deserialize, Serialize};

/// What [`Store::compact`](crate::Store::compact) did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CompactReport {
    /// Checkpoints removed, with their pending writes (and their effects, if the thread can
    /// no longer be resumed: see [`Store::compact`](crate::Store::compact)).
    pub dropped: usize,
    /// Retained checkpoints that received a folded snapshot.
    pub folded: usize,
    /// Whether the backing file was compacted as well.
    pub file_compacted: bool,
}

impl CompactReport {
    /// Builds a report (for `Store` implementations outside this crate).
    pub fn new(dropped: usize, folded: usize, file_compacted: bool) -> Self {
        CompactReport { dropped, folded, file_compacted }
    }
}
