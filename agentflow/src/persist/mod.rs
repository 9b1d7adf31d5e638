//! Durable execution: every super-step of a thread is a checkpoint in a
//! [`Store`], so a run survives a crash, can be resumed in another process,
//! inspected, forked and updated.
//!
//! A checkpoint holds the step's updates (a delta), not the whole state; a
//! full snapshot is written only when the deltas since the last one add up
//! to the snapshot's own size. Storage therefore grows with the size of the
//! updates, and rebuilding any checkpoint reads at most about twice the
//! state's size.
//!
//! Whatever is stored reads back as it was written, or is not stored: a
//! NaN or an infinity anywhere in a state, an update, a pending write, an
//! effect result, an interrupt payload or a resume value is refused with a
//! [`ValueError`] naming the place (`state.prices[3]`), as is JSON nested
//! deeper than [`MAX_DOCUMENT_DEPTH`] (what serde_json reads back); values
//! that become part of a larger document (tool arguments, approval
//! conditions, interrupt payloads, resume values) are held to
//! [`MAX_JSON_DEPTH`]. Floats round-trip bit for bit.

mod checkpointer;
pub(crate) mod encode;
mod error;
mod history;
mod journal;

pub(crate) use checkpointer::{Checkpointer, DEFAULT_LEASE_TTL, Resumed};
pub use encode::{MAX_DOCUMENT_DEPTH, MAX_JSON_DEPTH, ValueError, check_json};
pub use error::{HistoryError, PersistError, ResumeError};
pub use history::Snapshot;
pub use journal::Journal;
pub(crate) use journal::{
    Entry, UNKNOWN_CALL, UnknownCall, decode as decode_effect, record_open_markers, unknown_outcome_id,
    unknown_outcome_record,
};

pub use agentflow_store::{
    AuditEntry, CheckpointMetadata, CheckpointSource, CheckpointSummary, Listing, RedbStore, Store, ThreadRecord,
    ThreadStatus,
};

use std::time::{SystemTime, UNIX_EPOCH};

/// When a run's checkpoints reach stable storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Durability {
    /// Each step is on disk before the next one starts (one durable commit per
    /// super-step; concurrent threads share commits).
    #[default]
    Sync,
    /// Each step is committed before the next starts but reaches the disk in
    /// the background; a crash loses at most the store's flush interval
    /// (200 ms for [`RedbStore`] by default).
    Async,
    /// Steps are committed without waiting for the disk; only the end of the
    /// run (completion, failure, pause) is made durable before the run
    /// returns. A crash may lose every step since the last end, though the
    /// store's background flush usually saves most of them.
    Exit,
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// Runs a blocking store call off the async worker threads.
pub(crate) async fn blocking<T: Send + 'static>(
    store: &std::sync::Arc<dyn Store>,
    f: impl FnOnce(&dyn Store) -> T + Send + 'static,
) -> Result<T, PersistError> {
    let store = std::sync::Arc::clone(store);
    tokio::task::spawn_blocking(move || f(&*store)).await.map_err(PersistError::Task)
}
