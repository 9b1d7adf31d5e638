//! Durable execution inside the crate: a run's checkpoints and lease, the effect
//! journal, what a stopped step leaves behind, and a thread's history. Users reach it
//! through [`persist`](crate::persist).
//!
//! - `checkpointer`: a run's commits, one checkpoint per super-step; `checkpointer/open`
//!   opens a thread for a run, `checkpointer/sweep` settles what earlier runs left.
//! - `lease`: the thread's lease and the holder id it is taken under.
//! - `keys`: the reserved keys of checkpoints and of the effect journal's markers;
//!   `budget`: the thread's budget kept under one of them.
//! - `chain`: the next checkpoint's seq, and a state rebuilt from a snapshot and its deltas.
//! - `fingerprint`: the graph a thread was stored with, and what changed since.
//! - `event_log`: the events a run writes to its thread's log, in its commits.
//! - `journal`: the effect journal; `cut_off`: calls cut off mid-way, whose outcome is
//!   unknown; `abandoned`: subgraph runs a step no longer calls; `finished`: finished work
//!   kept as it finishes.
//! - `history`: reading, forking and updating a thread's history; `restart`: the checkpoint
//!   that starts a follow-up run of a thread; `checkpoint_version`: the version of its graph a
//!   checkpoint was written by, which a thread forked to it takes.
//! - `graph_identity`: what the checkpointer knows of a thread's graph (the app provides it);
//!   `graph_migration`: a thread stored by an older version of its graph moved to the current one;
//!   `migrated_approvals`: its questions and approvals moved, decisions carried over;
//!   `migrated_calls`: the tool calls of its model's journaled replies moved;
//!   `migrated_direct_calls`: its journal under the current names, direct calls re-keyed;
//!   `migration_chain`: the declared migrations it goes through; `state_fold`: its old state
//!   folded as JSON, for the state migrations; `stored_release`: how the graph a thread was
//!   stored by stands to the current one (an older version of it, a newer one, another graph).
//! - `wake`: when a waiting thread wakes (its timers and the approvals it waits on).
//! - `approval_key`: what names a tool call's approval, and what a step paused for it hands a
//!   human.
//! - `document`: a value serialised as a stored document (the value checks are in `core`);
//!   `error`, `io`, `durability`: errors, store calls off the async threads, and when
//!   checkpoints reach the disk.

mod abandoned;
mod approval_key;
mod budget;
mod chain;
mod checkpoint_version;
mod checkpointer;
mod cut_off;
mod document;
pub(crate) mod durability;
mod error;
mod event_log;
mod fingerprint;
mod finished;
mod graph_identity;
mod graph_migration;
pub(crate) mod history;
mod io;
mod journal;
mod keys;
mod lease;
mod migrated_approvals;
mod migrated_calls;
mod migrated_direct_calls;
mod migration_chain;
mod recorded_answers;
pub(crate) mod restart;
mod state_fold;
mod stored_release;
pub(crate) mod stored_version;
pub(crate) mod wake;

pub(crate) use crate::core::clock::now_ms;
pub use crate::core::encode::{MAX_DOCUMENT_DEPTH, MAX_JSON_DEPTH};
pub use crate::core::value_check::{ValueError, check_json};
pub(crate) use approval_key::{CallAt, approval_id_at, approval_payload, direct_call_id, reasked_id};
pub(crate) use budget::stored_budget;
pub(crate) use chain::fold_chain;
pub(crate) use checkpointer::Checkpointer;
pub(crate) use checkpointer::open::{NewThread, Resumed};
pub(crate) use cut_off::{UNKNOWN_CALL, UnknownCall, unknown_outcome_id, unknown_outcome_record};
pub(crate) use document::{Allowed, check_sealed, refuse_credentials_in, state_document};
pub(crate) use durability::Durability;
pub(crate) use error::ThreadError;
pub use error::{HistoryError, PersistError, ResumeError};
pub(crate) use finished::FinishedWrites;
pub(crate) use graph_identity::GraphIdentity;
pub(crate) use graph_migration::{Versions, migrate_thread};
pub use history::{fork_thread, update_thread};
pub(crate) use io::blocking;
#[cfg(feature = "testing")]
pub(crate) use io::run_store_calls_inline;
pub use journal::Journal;
pub(crate) use journal::{Entry, ParentLeases, Settling, decode as decode_effect};
pub(crate) use keys::INTERRUPTS;
#[cfg(feature = "server")]
pub(crate) use lease::is_parked_holder;
pub(crate) use lease::{
    DEFAULT_LEASE_TTL, LeaseGuard, LeaseHolder, holder_id, parked_holder, process_actor, process_tag, release_parked,
};
pub(crate) use migrated_calls::{MovedCall, moved_calls};
pub(crate) use stored_release::{StoredRelease, stored_release};

pub use agentflow_store::{
    AuditEntry, CheckpointMetadata, CheckpointSource, CheckpointSummary, Listing, ThreadRecord, ThreadStatus,
};
