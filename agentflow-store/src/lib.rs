//! Embedded persistence for agentflow: threads, checkpoints, pending writes, an effect journal,
//! an audit log, approvals, leases, each thread's event log, and the run queue with its
//! follow-up runs, cron schedules and webhook deliveries, behind the [`Store`] trait, with
//! [`RedbStore`] on a redb file.
//!
//! The store knows nothing about graphs. It keeps typed records (threads, checkpoint metadata,
//! approvals, audit entries) and opaque bytes (states, updates, effect results) that the
//! executor serialises itself. Every stored record carries a format version and a CRC-32 (the
//! bare numbers of the redb file's indexes do not; see [`tables`]); a value that does not decode
//! or fails its checksum, a damaged file or a file of another program is a typed error naming
//! the path, never a panic.
//!
//! ```
//! use agentflow_store::{
//!     Checkpoint, CheckpointMetadata, CheckpointSource, RedbStore, StepCommit, Store,
//!     ThreadRecord,
//! };
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = RedbStore::in_memory()?;
//! let now = 1_700_000_000_000;
//! store.acquire_lease("t1", "worker-a", 30_000, now)?;
//!
//! let root = Checkpoint {
//!     thread: "t1".into(),
//!     seq: 0,
//!     parent: None,
//!     cursor: vec!["classify".into()],
//!     snapshot: Some(br#"{"messages":[]}"#.to_vec()),
//!     delta: vec![],
//!     metadata: CheckpointMetadata::new(0, CheckpointSource::Input, vec![]),
//!     created_at: now,
//! };
//! let thread = ThreadRecord::new("t1", "alice", "fp-1", 1, now);
//! let receipt = store.commit_step(
//!     StepCommit::new(thread).with_checkpoint(root).fenced_by("worker-a", now),
//! )?;
//! assert_eq!(receipt.checkpoint, Some(0));
//!
//! let chain = store.state_chain("t1", 0)?.expect("checkpoint 0 exists");
//! assert_eq!(chain.snapshot, br#"{"messages":[]}"#);
//! assert!(chain.steps.is_empty());
//! # Ok(())
//! # }
//! ```
//!
//! # Durability and group commit
//!
//! [`RedbStore`] sends every write to one writer thread, which commits all queued requests in a
//! single redb transaction. [`Durability::Immediate`] maps to redb `Durability::Immediate` (the
//! caller returns once the data is on disk), [`Durability::Eventual`] to `Durability::None`
//! (visible at once, durable at the next immediate commit or background flush). The executor's
//! modes map as: `sync` -> `Immediate` on every step; `async` -> `Eventual` with the background
//! flush (crash window: the flush interval); `exit` -> `Eventual` on each step and `Immediate` on
//! the final commit (or [`Store::flush`]).
//!
//! # Conformance
//!
//! With the `testing` feature, `conformance` holds the suite every [`Store`] implementation must
//! pass: `agentflow_store::conformance::run_all(&|| Box::new(MyStore::new()))`.

#![warn(missing_docs)]

pub mod audit_chain;
mod breaker;
mod checks;
mod codec;
#[cfg(feature = "testing")]
pub mod conformance;
mod dump;
mod error;
mod event_wakes;
mod listing;
#[cfg(feature = "postgres")]
mod postgres;
mod queue;
mod record;
mod redb;
#[cfg(feature = "encryption")]
pub mod sealed;
mod store;
/// Helpers for tests of this crate and of the crates built on it (upgrades of older store
/// files); not part of the API.
#[doc(hidden)]
pub mod testing_support;
mod thread_tree;

pub use self::redb::owner as redb_owner;
pub use self::redb::{RedbStore, RedbStoreBuilder, tables};
pub use audit_chain::{BrokenLink, BrokenReason, ChainReport};
pub use breaker::{
    BreakerAnswer, BreakerError, BreakerOp, BreakerRecord, BreakerRule, BreakerState, BreakerUpdate,
    audit_entry as breaker_audit_entry, step as breaker_step,
};
pub use codec::{MAX_DOCUMENT_DEPTH, MAX_JSON_DEPTH};
pub use dump::ThreadDump;
pub use error::{
    ApprovalError, AuditError, BoxError, CommitError, CompactError, EffectError, JsonTooDeep, LeaseError, OpenError,
    PurgeError, ReadError, StorageError,
};
#[cfg(feature = "postgres")]
pub use postgres::{POSTGRES_DEFAULT_SCHEMA, POSTGRES_SCHEMA_VERSION, PostgresStore, PostgresStoreBuilder};
pub use queue::{
    FollowUpPlace, FollowUpQueued, FollowUpRule, NewRun, QueueError, QueuedRun, RunControl, RunWait, ScheduleFire,
    Settle,
};
pub use record::{
    ApprovalArgs, ApprovalPatch, ApprovalRecord, ApprovalStatus, ApprovalTransition, AuditEntry, BadEventId, ChainStep,
    Checkpoint, CheckpointMetadata, CheckpointSource, CheckpointSummary, CommitReceipt, CompactReport, DeliveryStatus,
    Durability, EVENT_LOG_KEEP_COMMITS, EffectBatch, EffectKey, EffectOutcome, EventId, EventPage, EventWake,
    HELD_KINDS, IDEMPOTENCY_KEY_TTL_MS, IdempotencyKey, Lease, LegalHold, NewAuditEntry, NewEvent, NewWebhookDelivery,
    PURGED_KIND, PendingWrite, PurgeReport, ScheduleRecord, StateChain, StepCommit, StoredEvent, ThreadRecord,
    ThreadStatus, Timer, WebhookDelivery, WebhookSettle,
};
pub use store::{CommitCallback, FoldFn, Listing, Store};
pub use thread_tree::descendants;
