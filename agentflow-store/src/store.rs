//! The [`Store`] trait: what the executor needs from persistence, independent of the backend.

use crate::error::{
    ApprovalError, AuditError, BoxError, CommitError, CompactError, EffectError, LeaseError, ReadError,
};
use crate::record::{
    ApprovalPatch, ApprovalRecord, ApprovalStatus, AuditEntry, Checkpoint, CheckpointSummary, CommitReceipt,
    CompactReport, EffectKey, EffectOutcome, Lease, NewAuditEntry, PendingWrite, StateChain, StepCommit, ThreadRecord,
};

/// Rebuilds the full state from a [`StateChain`] and returns it serialised; supplied by the
/// executor to [`Store::compact`] because only it knows how to apply deltas.
pub type FoldFn<'a> = dyn Fn(&StateChain) -> Result<Vec<u8>, BoxError> + 'a;

/// Receives the answer of [`Store::commit_step_then`].
pub type CommitCallback = Box<dyn FnOnce(Result<CommitReceipt, CommitError>) + Send>;

/// Persistence for agentflow threads.
///
/// Synchronous and blocking: call it from `spawn_blocking` in async code. Implementations are
/// shared between threads (`Send + Sync`) and must pass [`conformance`](crate#conformance).
/// Times are unix millis supplied by the caller, so tests control the clock.
///
/// Writes that must not be lost on their own (effects, audit entries, approvals) are made with
/// immediate durability; [`Store::commit_step`] takes the durability from the commit. Leases
/// need only live as long as the processes that can see the store: a backend that one process
/// opens at a time (redb) may keep them in memory.
pub trait Store: Send + Sync {
    /// Reads a thread, with its current lease.
    fn thread(&self, id: &str) -> Result<Option<ThreadRecord>, ReadError>;

    /// Every thread, ordered by id.
    fn list_threads(&self) -> Result<Vec<ThreadRecord>, ReadError>;

    /// Persists one super-step atomically (see [`StepCommit`] for what and in which order).
    fn commit_step(&self, commit: StepCommit) -> Result<CommitReceipt, CommitError>;

    /// Like [`Store::commit_step`], but answers by calling `done` instead of
    /// blocking, so an async caller need not hold a thread while the commit
    /// waits for the disk. The default calls `commit_step` and then `done`,
    /// blocking the caller; backends with their own I/O threads override it.
    fn commit_step_then(&self, commit: StepCommit, done: CommitCallback) {
        done(self.commit_step(commit));
    }

    /// Makes every earlier commit durable (an empty immediate commit).
    fn flush(&self) -> Result<(), CommitError>;

    /// One checkpoint with its payload.
    fn checkpoint(&self, thread: &str, seq: u64) -> Result<Option<Checkpoint>, ReadError>;

    /// The checkpoint with the highest seq (the most recently committed).
    fn latest_checkpoint(&self, thread: &str) -> Result<Option<Checkpoint>, ReadError>;

    /// The thread's history, ordered by seq, without snapshots or deltas.
    fn list_checkpoints(&self, thread: &str) -> Result<Vec<CheckpointSummary>, ReadError>;

    /// Walks parent links from `seq` back to the nearest checkpoint with a snapshot. `None` if
    /// `seq` does not exist; [`ReadError::BrokenChain`] if an ancestor is missing.
    fn state_chain(&self, thread: &str, seq: u64) -> Result<Option<StateChain>, ReadError>;

    /// Pending writes recorded against checkpoint `seq`, ordered by (node, idx).
    fn pending_writes(&self, thread: &str, seq: u64) -> Result<Vec<PendingWrite>, ReadError>;

    /// Takes the thread for `holder` until `now + ttl_ms`. Succeeds if there is no lease, if it
    /// expired (`expires_at <= now`), or if `holder` already holds it (then it is extended).
    /// Otherwise [`LeaseError::ThreadBusy`]. The thread record need not exist yet.
    fn acquire_lease(&self, thread: &str, holder: &str, ttl_ms: u64, now: u64) -> Result<Lease, LeaseError>;

    /// Extends `holder`'s lease to `now + ttl_ms`; [`LeaseError::NotHeld`] if another holder
    /// has it or there is none.
    fn renew_lease(&self, thread: &str, holder: &str, ttl_ms: u64, now: u64) -> Result<Lease, LeaseError>;

    /// Drops `holder`'s lease. Releasing when there is no lease succeeds;
    /// [`LeaseError::NotHeld`] if another holder has it.
    fn release_lease(&self, thread: &str, holder: &str) -> Result<(), LeaseError>;

    /// The journaled result of an effect, if it completed before.
    fn effect(&self, key: &EffectKey) -> Result<Option<Vec<u8>>, ReadError>;

    /// Journals an effect's result, durably. Never overwrites: if a result exists it is returned
    /// as [`EffectOutcome::AlreadyRecorded`] and the new one is dropped.
    fn record_effect(&self, key: &EffectKey, result: &[u8]) -> Result<EffectOutcome, EffectError>;

    /// Appends to the thread's audit log; returns the entry's seq.
    fn append_audit(&self, thread: &str, entry: NewAuditEntry) -> Result<u64, AuditError>;

    /// The thread's audit log, oldest first.
    fn list_audit(&self, thread: &str) -> Result<Vec<AuditEntry>, ReadError>;

    /// Creates a `PENDING` approval (or an `OUTCOME_UNKNOWN` record, see
    /// [`ApprovalStatus::is_waiting`]) and appends an `approval.requested` audit entry by `actor`.
    fn put_approval(&self, approval: ApprovalRecord, actor: &str) -> Result<(), ApprovalError>;

    /// Reads an approval.
    fn approval(&self, id: &str) -> Result<Option<ApprovalRecord>, ReadError>;

    /// The thread's approvals, ordered by id.
    fn list_approvals(&self, thread: &str) -> Result<Vec<ApprovalRecord>, ReadError>;

    /// Every approval waiting for a human (`PENDING` or `OUTCOME_UNKNOWN`), ordered by id.
    fn list_pending_approvals(&self) -> Result<Vec<ApprovalRecord>, ReadError>;

    /// Compare-and-set of an approval's status in one write transaction, with an
    /// `approval.<to>` audit entry (lowercase status) in the same transaction. Refuses an
    /// illegal move ([`ApprovalError::IllegalTransition`]) and a status other than `expected`
    /// ([`ApprovalError::AlreadyDecided`]): of concurrent callers, exactly one wins.
    fn transition_approval(
        &self,
        id: &str,
        expected: ApprovalStatus,
        to: ApprovalStatus,
        patch: ApprovalPatch,
    ) -> Result<ApprovalRecord, ApprovalError>;

    /// Retention for a finished thread: keeps the `keep_last` newest checkpoints (at least one)
    /// and drops the older ones with their pending writes and effects; the audit log is kept.
    /// A retained checkpoint whose chain would run into a dropped one gets a snapshot built by
    /// `fold` from its [`StateChain`], so every retained checkpoint stays rebuildable. Then the
    /// backing storage is compacted.
    fn compact(&self, thread: &str, keep_last: usize, fold: &FoldFn<'_>) -> Result<CompactReport, CompactError>;
}
