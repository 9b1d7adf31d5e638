//! The effect journal's records: an effect's key, its outcome, and a batch of them written
//! together.

use serde::{Deserialize, Serialize};

use crate::record::approval::{ApprovalRecord, ApprovalTransition};
use crate::record::audit::NewAuditEntry;
use crate::record::pending_write::PendingWrite;

/// Key of a side effect in the effect journal.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct EffectKey {
    /// Thread the effect ran in.
    pub thread: String,
    /// Checkpoint the step ran from.
    pub seq: u64,
    /// Node that ran it.
    pub node: String,
    /// Call id / idempotency key, unique within the node's run.
    pub key: String,
}

impl EffectKey {
    /// Builds a key.
    pub fn new(thread: impl Into<String>, seq: u64, node: impl Into<String>, key: impl Into<String>) -> Self {
        EffectKey { thread: thread.into(), seq, node: node.into(), key: key.into() }
    }
}

/// What [`Store::record_effect`](crate::Store::record_effect) did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum EffectOutcome {
    /// The result was stored.
    Recorded,
    /// A result was already stored under the key; it is returned and was not replaced.
    AlreadyRecorded(Vec<u8>),
}

/// Effect results, approval transitions and audit entries of one thread, journaled together by
/// [`Store::commit_effects`](crate::Store::commit_effects): all of them durably in one
/// transaction (with [`RedbStore`](crate::RedbStore)), or nothing if any part is refused.
///
/// The executor uses it around an approved tool call: the claim `APPROVED -> EXECUTING` with the
/// call's *started* marker before the tool runs, and the result with `EXECUTING -> SUCCEEDED`
/// (or `FAILED`) after it returns.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct EffectBatch {
    /// The thread every part belongs to.
    pub thread: String,
    /// Effect results to journal, in order; an existing result is kept, never replaced.
    pub effects: Vec<(EffectKey, Vec<u8>)>,
    /// Approval compare-and-sets of this thread's approvals, applied after the effects; each
    /// appends an `approval.<status>` audit entry.
    pub approval_transitions: Vec<ApprovalTransition>,
    /// Audit entries for `thread`, appended last.
    pub audit: Vec<NewAuditEntry>,
    /// When set, the batch is refused ([`CommitError::LeaseLost`](crate::CommitError::LeaseLost))
    /// unless this holder has an unexpired lease on `thread` at `now`. The runtime fences the
    /// batch that says an effect *started* (and claims its approval), so a run that lost its
    /// thread's lease does not act; a result is recorded whoever holds the lease, as a fact.
    pub lease_holder: Option<String>,
    /// Unix millis used for the lease checks.
    pub now: u64,
    /// `(thread, holder)` pairs: the batch is refused
    /// ([`CommitError::LeaseLost`](crate::CommitError::LeaseLost), naming that thread) unless
    /// each holder has an unexpired lease on its thread at `now`, checked in the same
    /// transaction as `lease_holder`. A subgraph child's run fences what starts its effects by
    /// the leases of its parent's run and of every run above it, so a parent that lost its
    /// thread cannot act through a child. (Appended last.)
    pub parent_leases: Vec<(String, String)>,
    /// Records to create for `thread`, as [`Store::put_approval`](crate::Store::put_approval)
    /// would (a `PENDING` approval or an `OUTCOME_UNKNOWN` record), each with an
    /// `approval.requested` entry by its requester, before the transitions. An id that exists
    /// already refuses the batch ([`ApprovalError::AlreadyExists`](crate::ApprovalError)). The
    /// runtime creates the record of a call cut off mid-way this way, fenced by the run's
    /// lease. (Appended last: a backend outside this crate must write them too.)
    pub new_approvals: Vec<ApprovalRecord>,
    /// Pending writes of `thread` to keep, each replacing one stored under the same
    /// `(seq, node, idx)`, as a [`StepCommit`](crate::StepCommit)'s pending writes are kept. The runtime commits
    /// the write of each map instance (and of each node of a fan-out step) as soon as it
    /// finishes, fenced by its lease, so a resume after a crash runs only the instances that
    /// had not finished. (Appended last: a backend outside this crate must write them too.)
    pub pending_writes: Vec<PendingWrite>,
}

impl EffectBatch {
    /// An empty batch for `thread`, with no lease check.
    pub fn new(thread: impl Into<String>) -> Self {
        EffectBatch {
            thread: thread.into(),
            effects: Vec::new(),
            approval_transitions: Vec::new(),
            audit: Vec::new(),
            lease_holder: None,
            now: 0,
            parent_leases: Vec::new(),
            new_approvals: Vec::new(),
            pending_writes: Vec::new(),
        }
    }

    /// Adds a pending write to keep (see [`EffectBatch::pending_writes`]).
    #[must_use]
    pub fn pending_write(mut self, write: PendingWrite) -> Self {
        self.pending_writes.push(write);
        self
    }

    /// Adds a record to create (see [`EffectBatch::new_approvals`]).
    #[must_use]
    pub fn new_approval(mut self, record: ApprovalRecord) -> Self {
        self.new_approvals.push(record);
        self
    }

    /// Also requires each `(thread, holder)` of `leases` to be held, unexpired, at the batch's
    /// `now` (see [`EffectBatch::parent_leases`]).
    #[must_use]
    pub fn fenced_by_parents(mut self, leases: Vec<(String, String)>) -> Self {
        self.parent_leases = leases;
        self
    }

    /// Requires `holder` to hold an unexpired lease on the thread at `now`.
    #[must_use]
    pub fn fenced_by(mut self, holder: impl Into<String>, now: u64) -> Self {
        self.lease_holder = Some(holder.into());
        self.now = now;
        self
    }

    /// Adds an effect result.
    #[must_use]
    pub fn effect(mut self, key: EffectKey, result: Vec<u8>) -> Self {
        self.effects.push((key, result));
        self
    }

    /// Adds an approval compare-and-set.
    #[must_use]
    pub fn transition(mut self, transition: ApprovalTransition) -> Self {
        self.approval_transitions.push(transition);
        self
    }

    /// Adds an audit entry.
    #[must_use]
    pub fn audit(mut self, entry: NewAuditEntry) -> Self {
        self.audit.push(entry);
        self
    }
}
