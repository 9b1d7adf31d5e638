//! A step commit: everything one step writes in one transaction, how durably, and its receipt.

use serde::{Deserialize, Serialize};

use crate::record::approval::{ApprovalRecord, ApprovalTransition};
use crate::record::audit::NewAuditEntry;
use crate::record::checkpoint::Checkpoint;
use crate::record::effect::EffectKey;
use crate::record::event_log::NewEvent;
use crate::record::pending_write::PendingWrite;
use crate::record::thread::ThreadRecord;

/// How durable a commit must be before the caller gets its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Durability {
    /// On stable storage when the call returns (redb `Durability::Immediate`).
    #[default]
    Immediate,
    /// Visible to readers when the call returns, on disk at the next immediate commit, the next
    /// background flush or [`Store::flush`](crate::Store::flush); a crash before that loses it
    /// (redb `Durability::None`).
    Eventual,
}

/// Everything one super-step persists, written in one write transaction.
///
/// Order of application: lease checks, thread record, checkpoint (its parent's pending writes are
/// cleared), pending writes, effects, audit entries, new approvals, approval transitions. If any
/// part is refused nothing is written.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct StepCommit {
    /// The thread's new record (inserted or replaced; the stored lease is kept).
    pub thread: ThreadRecord,
    /// The new checkpoint, if the step completed. Its `thread` must be `thread.id`, its `seq`
    /// greater than every existing one, its parent (if any) an existing older checkpoint, and a
    /// root must carry a snapshot.
    pub checkpoint: Option<Checkpoint>,
    /// Node writes to keep (usually of a step that failed half-way).
    pub pending_writes: Vec<PendingWrite>,
    /// Effect results to journal; an existing result is kept, never replaced.
    pub effects: Vec<(EffectKey, Vec<u8>)>,
    /// Audit entries for `thread.id`.
    pub audit: Vec<NewAuditEntry>,
    /// Approvals to create (status `PENDING`, thread `thread.id`); each appends an
    /// `approval.requested` entry by its requester.
    pub new_approvals: Vec<ApprovalRecord>,
    /// Approval compare-and-sets; each appends an `approval.<status>` entry.
    pub approval_transitions: Vec<ApprovalTransition>,
    /// When set, the commit is refused unless this holder has an unexpired lease at `now`.
    pub lease_holder: Option<String>,
    /// Unix millis used for the lease check.
    pub now: u64,
    /// Durability of this commit.
    pub durability: Durability,
    /// `(thread, holder)` pairs: the commit is refused
    /// ([`CommitError::LeaseLost`](crate::CommitError::LeaseLost), naming that thread) unless
    /// each holder has an unexpired lease on its thread at `now`, checked in the same
    /// transaction as `lease_holder`. A subgraph child's run fences its commits by the leases of
    /// its parent's run and of every run above it, so a parent that lost its thread cannot move
    /// a child on (see [`EffectBatch::parent_leases`](crate::EffectBatch::parent_leases)). (Appended last.)
    pub parent_leases: Vec<(String, String)>,
    /// The thread's durable timer (unix millis): when to wake the thread, listed by
    /// [`Store::due_timers`](crate::Store::due_timers). Every commit replaces the thread's
    /// timer with this one, so a commit without it clears the timer (the thread moved on).
    /// Required when `thread.status` is [`ThreadStatus::Sleeping`](crate::ThreadStatus::Sleeping); a thread paused for a
    /// human may carry one too (when its approval expires). A time past `i64::MAX` (never) is
    /// kept as `i64::MAX` on every store.
    pub wake_at: Option<u64>,
    /// Events to append to the thread's log ([`Store::read_events`](crate::Store::read_events)),
    /// in order, as one commit of it: the store gives them the log's next commit number and
    /// their places, and removes the oldest commit's events past
    /// [`EVENT_LOG_KEEP_COMMITS`](crate::EVENT_LOG_KEEP_COMMITS). Empty: the log is untouched.
    /// (Appended last.)
    pub events: Vec<NewEvent>,
}

impl StepCommit {
    /// A commit of only the thread record, immediate, with no lease check.
    pub fn new(thread: ThreadRecord) -> Self {
        let now = thread.updated_at;
        StepCommit {
            thread,
            checkpoint: None,
            pending_writes: Vec::new(),
            effects: Vec::new(),
            audit: Vec::new(),
            new_approvals: Vec::new(),
            approval_transitions: Vec::new(),
            lease_holder: None,
            now,
            durability: Durability::Immediate,
            wake_at: None,
            parent_leases: Vec::new(),
            events: Vec::new(),
        }
    }

    /// Also requires each `(thread, holder)` of `leases` to be held, unexpired, at the commit's
    /// `now` (see [`StepCommit::parent_leases`]).
    #[must_use]
    pub fn fenced_by_parents(mut self, leases: Vec<(String, String)>) -> Self {
        self.parent_leases = leases;
        self
    }

    /// Adds the checkpoint.
    #[must_use]
    pub fn with_checkpoint(mut self, checkpoint: Checkpoint) -> Self {
        self.checkpoint = Some(checkpoint);
        self
    }

    /// Requires `holder` to hold an unexpired lease at `now`.
    #[must_use]
    pub fn fenced_by(mut self, holder: impl Into<String>, now: u64) -> Self {
        self.lease_holder = Some(holder.into());
        self.now = now;
        self
    }

    /// Sets the durability.
    #[must_use]
    pub fn with_durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// Appends `events` to the thread's log with this commit (see [`StepCommit::events`]).
    #[must_use]
    pub fn with_events(mut self, events: Vec<NewEvent>) -> Self {
        self.events = events;
        self
    }

    /// Sets the thread's timer (see [`StepCommit::wake_at`]).
    #[must_use]
    pub fn with_wake_at(mut self, wake_at: u64) -> Self {
        self.wake_at = Some(wake_at);
        self
    }
}

/// What a successful [`Store::commit_step`](crate::Store::commit_step) wrote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CommitReceipt {
    /// Sequence number of the new checkpoint, if any.
    pub checkpoint: Option<u64>,
    /// Sequence numbers given to the audit entries (the commit's own, then the approvals').
    pub audit_seqs: Vec<u64>,
    /// Whether the data was on stable storage when the call returned.
    pub durable: bool,
    /// How many requests shared the underlying transaction (1 when alone).
    pub group_size: usize,
}

impl CommitReceipt {
    /// Builds a receipt (for `Store` implementations outside this crate).
    pub fn new(checkpoint: Option<u64>, audit_seqs: Vec<u64>, durable: bool, group_size: usize) -> Self {
        CommitReceipt { checkpoint, audit_seqs, durable, group_size }
    }
}
