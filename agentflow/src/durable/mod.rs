//! Durable execution inside the crate: a run's checkpoints and lease, the effect
//! journal, what a stopped step leaves behind, and a thread's history. Users reach it
//! through [`persist`](crate::persist).

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
