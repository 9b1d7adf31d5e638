//! The records a [`Store`](crate::Store) keeps, one file per kind. They hold typed metadata and
//! opaque bytes: the store never looks inside a state, an update or an effect result.

mod approval;
mod audit;
mod checkpoint;
mod compact;
mod effect;
mod event_log;
mod lease;
mod payload;
mod pending_write;
mod purge;
mod schedule;
mod step_commit;
mod thread;
mod timer;
mod webhook;

pub use approval::{ApprovalArgs, ApprovalPatch, ApprovalRecord, ApprovalStatus, ApprovalTransition};
pub use audit::{AuditEntry, NewAuditEntry};
pub use checkpoint::{ChainStep, Checkpoint, CheckpointMetadata, CheckpointSource, CheckpointSummary, StateChain};
pub(crate) use checkpoint::{MAX_CHECKPOINT_SEQ, Row, Snapshot, seq_too_large};
pub use compact::CompactReport;
pub use effect::{EffectBatch, EffectKey, EffectOutcome};
pub(crate) use event_log::whole_log;
pub use event_log::{
    BadEventId, EVENT_LOG_KEEP_COMMITS, EventId, EventPage, EventWake, IDEMPOTENCY_KEY_TTL_MS, IdempotencyKey,
    NewEvent, StoredEvent,
};
pub use lease::Lease;
pub(crate) use payload::{Payload, RECORD_VERSION};
pub use pending_write::PendingWrite;
pub use purge::{HELD_KINDS, LegalHold, PURGED_KIND, PurgeReport};
pub(crate) use purge::{keeps_detail, purge_approval};
pub use schedule::ScheduleRecord;
pub use step_commit::{CommitReceipt, Durability, StepCommit};
pub use thread::{ThreadRecord, ThreadStatus};
pub use timer::Timer;
pub(crate) use timer::WakeAt;
pub use webhook::{DeliveryStatus, NewWebhookDelivery, WebhookDelivery, WebhookSettle};

#[cfg(test)]
mod tests;
