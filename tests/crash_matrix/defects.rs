//! Stores with a planted defect, for the crash matrix to catch: each forwards every call to an
//! in-memory `RedbStore` and gets one thing wrong.

use std::sync::Arc;

use agentflow::{RedbStore, Store};
use agentflow_store::{
    ApprovalError, ApprovalPatch, ApprovalRecord, ApprovalStatus, AuditEntry, AuditError, Checkpoint,
    CheckpointSummary, CommitError, CommitReceipt, CompactError, CompactReport, EffectBatch, EffectError, EffectKey,
    EffectOutcome, FoldFn, Lease, LeaseError, NewAuditEntry, PendingWrite, ReadError, StateChain, StepCommit,
    ThreadDump, ThreadRecord, ThreadStatus,
};

#[derive(Clone, Copy)]
pub enum Defect {
    /// Answers `Ok` to a batch of finished map instances' writes and keeps none of them.
    DropsInstanceWrites,
    /// Keeps no journal of effects and tool calls: no *started* marker, no result. (A durable
    /// timer's wake time, journaled the same way, is kept: without it the run would sleep anew
    /// at each resume and never end.)
    KeepsNoJournal,
    /// Records a finished thread as still `running`.
    LeavesRunning,
}

pub struct Faulty {
    inner: RedbStore,
    defect: Defect,
}

pub fn wrap(defect: Defect) -> Result<Arc<dyn Store>, String> {
    let inner = RedbStore::in_memory().map_err(|e| e.to_string())?;
    Ok(Arc::new(Faulty { inner, defect }))
}

/// A durable timer's journaled wake time (`cx.sleep`).
fn is_timer(key: &EffectKey) -> bool {
    key.key.starts_with("sleep#")
}

macro_rules! forward {
    ($( fn $name:ident(&self $(, $arg:ident : $ty:ty)*) -> $ret:ty; )*) => {
        $( fn $name(&self $(, $arg: $ty)*) -> $ret { self.inner.$name($($arg),*) } )*
    };
}

impl Store for Faulty {
    forward! {
        fn thread(&self, id: &str) -> Result<Option<ThreadRecord>, ReadError>;
        fn list_threads(&self) -> Result<Vec<ThreadRecord>, ReadError>;
        fn flush(&self) -> Result<(), CommitError>;
        fn checkpoint(&self, thread: &str, seq: u64) -> Result<Option<Checkpoint>, ReadError>;
        fn latest_checkpoint(&self, thread: &str) -> Result<Option<Checkpoint>, ReadError>;
        fn list_checkpoints(&self, thread: &str) -> Result<Vec<CheckpointSummary>, ReadError>;
        fn state_chain(&self, thread: &str, seq: u64) -> Result<Option<StateChain>, ReadError>;
        fn pending_writes(&self, thread: &str, seq: u64) -> Result<Vec<PendingWrite>, ReadError>;
        fn acquire_lease(&self, thread: &str, holder: &str, ttl_ms: u64, now: u64) -> Result<Lease, LeaseError>;
        fn renew_lease(&self, thread: &str, holder: &str, ttl_ms: u64, now: u64) -> Result<Lease, LeaseError>;
        fn release_lease(&self, thread: &str, holder: &str) -> Result<(), LeaseError>;
        fn effect(&self, key: &EffectKey) -> Result<Option<Vec<u8>>, ReadError>;
        fn effect_keys(&self, thread: &str, seq: u64) -> Result<Vec<EffectKey>, ReadError>;
        fn thread_effects(&self, thread: &str) -> Result<Vec<(EffectKey, Vec<u8>)>, ReadError>;
        fn append_audit(&self, thread: &str, entry: NewAuditEntry) -> Result<u64, AuditError>;
        fn list_audit(&self, thread: &str) -> Result<Vec<AuditEntry>, ReadError>;
        fn put_approval(&self, approval: ApprovalRecord, actor: &str) -> Result<(), ApprovalError>;
        fn approval(&self, id: &str) -> Result<Option<ApprovalRecord>, ReadError>;
        fn list_approvals(&self, thread: &str) -> Result<Vec<ApprovalRecord>, ReadError>;
        fn list_pending_approvals(&self) -> Result<Vec<ApprovalRecord>, ReadError>;
        fn transition_approval(&self, id: &str, expected: ApprovalStatus, to: ApprovalStatus, patch: ApprovalPatch) -> Result<ApprovalRecord, ApprovalError>;
        fn dump_thread(&self, thread: &str) -> Result<Option<ThreadDump>, ReadError>;
        fn restore_threads(&self, dumps: Vec<ThreadDump>) -> Result<(), CommitError>;
        fn read_events(&self, thread: &str, after: Option<agentflow_store::EventId>, limit: usize) -> Result<agentflow_store::EventPage, ReadError>;
    }

    fn on_events(&self, wake: agentflow_store::EventWake) -> bool {
        self.inner.on_events(wake)
    }

    fn compact(&self, thread: &str, keep_last: usize, fold: &FoldFn<'_>) -> Result<CompactReport, CompactError> {
        self.inner.compact(thread, keep_last, fold)
    }

    fn commit_step(&self, mut commit: StepCommit) -> Result<CommitReceipt, CommitError> {
        match self.defect {
            Defect::KeepsNoJournal => commit.effects.retain(|(k, _)| is_timer(k)),
            Defect::LeavesRunning if commit.thread.status.is_finished() => commit.thread.status = ThreadStatus::Running,
            _ => {}
        }
        self.inner.commit_step(commit)
    }

    fn record_effect(&self, key: &EffectKey, result: &[u8]) -> Result<EffectOutcome, EffectError> {
        match self.defect {
            Defect::KeepsNoJournal if !is_timer(key) => Ok(EffectOutcome::Recorded),
            _ => self.inner.record_effect(key, result),
        }
    }

    fn commit_effects(&self, mut batch: EffectBatch) -> Result<Vec<EffectOutcome>, CommitError> {
        match self.defect {
            Defect::DropsInstanceWrites if !batch.pending_writes.is_empty() && batch.effects.is_empty() => {
                return Ok(Vec::new());
            }
            Defect::KeepsNoJournal if !batch.effects.iter().any(|(k, _)| is_timer(k)) => {
                let answers = batch.effects.iter().map(|_| EffectOutcome::Recorded).collect();
                batch.effects.clear();
                self.inner.commit_effects(batch)?;
                return Ok(answers);
            }
            _ => {}
        }
        self.inner.commit_effects(batch)
    }
}
