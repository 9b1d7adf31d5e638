//! Reading and branching a thread's history: latest state, state at any
//! checkpoint, the checkpoint list, forks and manual updates. History is
//! never rewritten: a fork or an update is a new checkpoint.

use std::sync::Arc;

use agentflow_store::{
    AuditEntry, Checkpoint, CheckpointMetadata, CheckpointSource, CheckpointSummary, CompactReport, Listing,
    NewAuditEntry, StateChain, StepCommit, Store, ThreadRecord, ThreadStatus,
};

use super::error::HistoryError;
use super::{PersistError, now_ms};
use crate::graph::CompiledGraph;
use crate::interrupt::Pending;
use crate::state::State;

/// The state of a thread at one checkpoint.
#[derive(Debug, Clone)]
pub struct Snapshot<S> {
    /// The checkpoint's sequence number.
    pub seq: u64,
    /// The checkpoint it follows (`None` for the thread's input).
    pub parent: Option<u64>,
    /// The state after that checkpoint.
    pub state: S,
    /// The nodes that run next (empty once the run completed).
    pub next: Vec<String>,
    /// Step number, source and the nodes that ran.
    pub metadata: CheckpointMetadata,
    /// Unix millis.
    pub created_at: u64,
}

/// Applies a chain of deltas to its snapshot.
pub(crate) fn fold_chain<S: State>(thread: &str, chain: &StateChain) -> Result<S, PersistError> {
    let decode = |what, seq, source| PersistError::Decode { thread: thread.to_string(), seq, what, source };
    let mut state: S =
        serde_json::from_slice(&chain.snapshot).map_err(|e| decode("state snapshot", chain.snapshot_seq, e))?;
    for step in &chain.steps {
        for blob in &step.delta {
            let update: S::Update = serde_json::from_slice(blob).map_err(|e| decode("update", step.seq, e))?;
            state.apply(update);
        }
    }
    Ok(state)
}

impl<S: State, D> CompiledGraph<S, D> {
    fn store_or_err(&self) -> Result<&Arc<dyn Store>, HistoryError> {
        self.store.as_ref().ok_or(HistoryError::NoStore)
    }

    /// The thread's record (owner, status, fingerprint, lease).
    ///
    /// These history calls block on the store; they are quick reads, but call
    /// them from `spawn_blocking` if the store may be slow.
    pub fn thread(&self, thread: &str) -> Result<Option<ThreadRecord>, HistoryError> {
        Ok(self.store_or_err()?.thread(thread).map_err(PersistError::from)?)
    }

    /// The latest state of a thread, or `None` if there is no such thread.
    pub fn state(&self, thread: &str) -> Result<Option<Snapshot<S>>, HistoryError> {
        let store = self.store_or_err()?;
        match store.latest_checkpoint(thread).map_err(PersistError::from)? {
            Some(cp) => self.snapshot_of(store, cp).map(Some),
            None => Ok(None),
        }
    }

    /// The state at checkpoint `seq`, or `None` if there is no such checkpoint.
    pub fn state_at(&self, thread: &str, seq: u64) -> Result<Option<Snapshot<S>>, HistoryError> {
        let store = self.store_or_err()?;
        match store.checkpoint(thread, seq).map_err(PersistError::from)? {
            Some(cp) => self.snapshot_of(store, cp).map(Some),
            None => Ok(None),
        }
    }

    fn snapshot_of(&self, store: &Arc<dyn Store>, cp: Checkpoint) -> Result<Snapshot<S>, HistoryError> {
        let chain = store
            .state_chain(&cp.thread, cp.seq)
            .map_err(PersistError::from)?
            .ok_or(HistoryError::UnknownCheckpoint { thread: cp.thread.clone(), seq: cp.seq })?;
        let state = fold_chain(&cp.thread, &chain)?;
        Ok(Snapshot {
            seq: cp.seq,
            parent: cp.parent,
            state,
            next: cp.cursor,
            metadata: cp.metadata,
            created_at: cp.created_at,
        })
    }

    /// What a paused thread waits for (empty when it is not paused).
    pub fn pending(&self, thread: &str) -> Result<Vec<Pending>, HistoryError> {
        let store = self.store_or_err()?;
        let Some(record) = store.thread(thread).map_err(PersistError::from)? else {
            return Err(HistoryError::UnknownThread { thread: thread.to_string() });
        };
        if record.status != ThreadStatus::Interrupted {
            return Ok(Vec::new());
        }
        let Some(latest) = store.latest_checkpoint(thread).map_err(PersistError::from)? else { return Ok(Vec::new()) };
        for w in store.pending_writes(thread, latest.seq).map_err(PersistError::from)? {
            if w.node == super::checkpointer::INTERRUPTS {
                return serde_json::from_slice(&w.value).map_err(|source| {
                    HistoryError::Persist(PersistError::Decode {
                        thread: thread.to_string(),
                        seq: latest.seq,
                        what: "interrupts",
                        source,
                    })
                });
            }
        }
        Ok(Vec::new())
    }

    /// Every checkpoint of the thread, oldest first, without snapshots or deltas.
    pub fn history(&self, thread: &str) -> Result<Vec<CheckpointSummary>, HistoryError> {
        Ok(self.store_or_err()?.list_checkpoints(thread).map_err(PersistError::from)?)
    }

    /// The thread's audit log, oldest first. Fails if an entry does not
    /// decode; [`CompiledGraph::scan_audit_log`] goes on past it.
    pub fn audit_log(&self, thread: &str) -> Result<Vec<AuditEntry>, HistoryError> {
        Ok(self.store_or_err()?.list_audit(thread).map_err(PersistError::from)?)
    }

    /// The thread's audit log, oldest first, with every entry that decodes;
    /// each entry that does not is reported in [`Listing::skipped`].
    pub fn scan_audit_log(&self, thread: &str) -> Result<Listing<AuditEntry>, HistoryError> {
        Ok(self.store_or_err()?.scan_audit(thread).map_err(PersistError::from)?)
    }

    /// Branches the thread at checkpoint `seq`: a new checkpoint whose parent
    /// is `seq` becomes the latest, so the next `resume` continues from the
    /// state at `seq`. The older branch stays in the history.
    pub fn fork(&self, thread: &str, seq: u64, actor: &str) -> Result<u64, HistoryError> {
        let store = self.store_or_err()?;
        let from = store
            .checkpoint(thread, seq)
            .map_err(PersistError::from)?
            .ok_or(HistoryError::UnknownCheckpoint { thread: thread.to_string(), seq })?;
        let metadata = CheckpointMetadata::new(from.metadata.step, CheckpointSource::Fork, vec![]);
        self.append_checkpoint(
            store,
            thread,
            seq,
            from.cursor,
            vec![],
            metadata,
            actor,
            "state.forked",
            serde_json::json!({ "from": seq }),
        )
    }

    /// Writes `update` through the reducers as a new checkpoint after the
    /// latest one, with an audit entry naming `actor`. The run continues from
    /// it on the next `resume`.
    pub fn update_state(&self, thread: &str, update: S::Update, actor: &str) -> Result<u64, HistoryError> {
        let store = self.store_or_err()?;
        let latest = store
            .latest_checkpoint(thread)
            .map_err(PersistError::from)?
            .ok_or(HistoryError::UnknownThread { thread: thread.to_string() })?;
        let blob = super::encode::document(&update, "the update")?;
        // The same check passed for the blob, so the detail is the same JSON.
        let detail: serde_json::Value = serde_json::from_slice(&blob).map_err(|source| PersistError::Decode {
            thread: thread.to_string(),
            seq: latest.seq,
            what: "update",
            source,
        })?;
        let metadata = CheckpointMetadata::new(latest.metadata.step, CheckpointSource::UpdateState, vec![]);
        self.append_checkpoint(
            store,
            thread,
            latest.seq,
            latest.cursor,
            vec![blob],
            metadata,
            actor,
            "state.updated",
            detail,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn append_checkpoint(
        &self,
        store: &Arc<dyn Store>,
        thread: &str,
        parent: u64,
        cursor: Vec<String>,
        delta: Vec<Vec<u8>>,
        metadata: CheckpointMetadata,
        actor: &str,
        kind: &str,
        detail: serde_json::Value,
    ) -> Result<u64, HistoryError> {
        let record = store
            .thread(thread)
            .map_err(PersistError::from)?
            .ok_or(HistoryError::UnknownThread { thread: thread.to_string() })?;
        let now = now_ms();
        // Hold the lease for the write so a running executor is not overtaken.
        let holder = format!("history-{}-{now}", std::process::id());
        store.acquire_lease(thread, &holder, 10_000, now).map_err(PersistError::from)?;
        let last = store.list_checkpoints(thread).map_err(PersistError::from)?.last().map_or(0, |c| c.seq);
        let checkpoint = Checkpoint {
            thread: thread.to_string(),
            seq: last + 1,
            parent: Some(parent),
            cursor,
            snapshot: None,
            delta,
            metadata,
            created_at: now,
        };
        // A new head with work left makes the thread resumable again.
        let status = if checkpoint.cursor.is_empty() { record.status } else { ThreadStatus::Interrupted };
        let mut commit = StepCommit::new(ThreadRecord { updated_at: now, lease: None, status, ..record })
            .with_checkpoint(checkpoint)
            .fenced_by(&holder, now);
        commit.audit.push(NewAuditEntry { at: now, actor: actor.to_string(), kind: kind.to_string(), detail });
        let result = store.commit_step(commit).map_err(PersistError::from);
        let _ = store.release_lease(thread, &holder);
        Ok(result?.checkpoint.unwrap_or(last + 1))
    }

    /// Retention for a finished thread: keeps the `keep_last` newest
    /// checkpoints (each stays readable) and compacts the file.
    pub fn compact(&self, thread: &str, keep_last: usize) -> Result<CompactReport, HistoryError> {
        let store = self.store_or_err()?;
        let fold = |chain: &StateChain| -> Result<Vec<u8>, agentflow_store::BoxError> {
            let state: S = fold_chain(thread, chain)?;
            Ok(super::encode::document(&state, "the state")?)
        };
        Ok(store.compact(thread, keep_last, &fold)?)
    }
}
