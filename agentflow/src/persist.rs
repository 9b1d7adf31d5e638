//! Durable execution: every super-step of a thread is a checkpoint in a
//! [`Store`](crate::Store), so a run survives a crash, can be resumed in another process,
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

pub use crate::durable::stored_version::{MIGRATED_KIND, stored_version};
pub use crate::durable::{
    AuditEntry, CheckpointMetadata, CheckpointSource, CheckpointSummary, HistoryError, Journal, Listing,
    MAX_DOCUMENT_DEPTH, MAX_JSON_DEPTH, PersistError, ResumeError, ThreadRecord, ThreadStatus, ValueError, check_json,
    fork_thread, update_thread,
};
pub use agentflow_store::{BrokenLink, BrokenReason, ChainReport};
pub use agentflow_store::{LegalHold, PURGED_KIND, PurgeError, PurgeReport};
