//! A store with a planted defect: it forwards every call to an in-memory `RedbStore` and keeps
//! no journal entry whose key a predicate picks (answering `Ok` as if it had).

use std::sync::Arc;

use agentflow::{RedbStore, Store};
use agentflow_store::{
    ApprovalError, ApprovalPatch, ApprovalRecord, ApprovalStatus, AuditEntry, AuditError, Checkpoint,
    CheckpointSummary, CommitError, CommitReceipt, CompactError, CompactReport, EffectBatch, EffectError, EffectKey,
    EffectOutcome, FoldFn, Lease, LeaseError, NewAuditEntry, PendingWrite, ReadError, StateChain, StepCommit,
    ThreadDump, ThreadRecord,
};

type Pick = Arc<dyn Fn(&EffectKey) -> bool + Send + Sync>;

pub struct Faulty {
    inner: RedbStore,
    drops: Pick,
}

/// A store that silently drops every journal entry `drops` picks.
pub fn dropping(
    drops: impl Fn(&EffectKey) -> bool + Send + Sync + 'static,
) -> impl Fn() -> Result<Arc<dyn Store>, String> + Send + Sync + 'static {
    let drops: Pick = Arc::new(drops);
    move || {
        let inner = RedbStore::in_memory().map_err(|e| e.to_string())?;
        Ok(Arc::new(Faulty { inner, drops: Arc::clone(&drops) }) as Arc<dyn Store>)
    }
}

/// The seq a compensation journals under.
pub fn is_compensation(k: &EffectKey) -> bool {
    k.seq == i64::MAX as u64
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
        commit.effects.retain(|(k, _)| !(self.drops)(k));
        self.inner.commit_step(commit)
    }

    fn record_effect(&self, key: &EffectKey, result: &[u8]) -> Result<EffectOutcome, EffectError> {
        if (self.drops)(key) {
            return Ok(EffectOutcome::Recorded);
        }
        self.inner.record_effect(key, result)
    }

    fn commit_effects(&self, mut batch: EffectBatch) -> Result<Vec<EffectOutcome>, CommitError> {
        let dropped: Vec<bool> = batch.effects.iter().map(|(k, _)| (self.drops)(k)).collect();
        if !dropped.iter().any(|d| *d) {
            return self.inner.commit_effects(batch);
        }
        batch.effects.retain(|(k, _)| !(self.drops)(k));
        let mut kept = self.inner.commit_effects(batch)?.into_iter();
        Ok(dropped
            .into_iter()
            .map(|d| if d { EffectOutcome::Recorded } else { kept.next().unwrap_or(EffectOutcome::Recorded) })
            .collect())
    }
}
