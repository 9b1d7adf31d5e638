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

mod abandoned;
mod checkpointer;
pub(crate) mod durability;
pub(crate) mod encode;
mod error;
mod finished;
pub(crate) mod history;
mod io;
mod journal;

pub(crate) use checkpointer::{
    Checkpointer, DEFAULT_LEASE_TTL, INTERRUPTS, LeaseGuard, LeaseHolder, Resumed, holder_id, process_tag,
    stored_budget,
};
pub(crate) use durability::Durability;
pub use encode::{MAX_DOCUMENT_DEPTH, MAX_JSON_DEPTH, ValueError, check_json};
pub use error::{HistoryError, PersistError, ResumeError};
pub(crate) use finished::FinishedWrites;
pub use history::{fork_thread, update_thread};
pub(crate) use io::{blocking, now_ms, run_store_calls_inline};
pub use journal::Journal;
pub(crate) use journal::{
    Entry, ParentLeases, Settling, UNKNOWN_CALL, UnknownCall, UnknownOutcomes, decode as decode_effect,
    unknown_outcome_id, unknown_outcome_record, unknown_outcomes,
};

pub use agentflow_store::{
    AuditEntry, CheckpointMetadata, CheckpointSource, CheckpointSummary, Listing, ThreadRecord, ThreadStatus,
};
