//! Finished work kept as it finishes: under [`Durability::Sync`](crate::Durability::Sync), the
//! write of each map instance (and of each node of a step that runs several) is committed as
//! soon as it finishes, before the step's own commit, so a resume after a crash runs only the
//! instances that had not finished.
//!
//! A write is a [`PendingWrite`] keyed `(thread, seq, node, idx)`: `seq` is the checkpoint the
//! step ran from, `idx` the instance (0 for a node that is not a map worker). It is the key a
//! failed or paused step keeps its finished writes under, so a resume reads both alike. The
//! commit is an [`EffectBatch`] fenced by the run's lease and by the leases of the runs above
//! it: a run that lost its thread keeps nothing.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use agentflow_store::{CommitError, EffectBatch, PendingWrite, Store};

use super::error::PersistError;
use super::io::blocking;
use super::journal::ParentLeases;
use crate::core::clock::now_ms;
use crate::core::node_id::NodeId;
use crate::core::state::State;
use crate::core::step::Step;

/// Where a step's finished writes are kept as they finish (see the module docs).
#[derive(Clone)]
pub(crate) struct FinishedWrites {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) thread: String,
    /// The checkpoint the step runs from.
    pub(crate) seq: u64,
    pub(crate) holder: String,
    pub(crate) revoked: Arc<AtomicBool>,
    pub(crate) parents: ParentLeases,
}

impl FinishedWrites {
    /// The pending write of `node`'s finished `step`, as a resume reads it back.
    pub(crate) fn write<S: State>(
        &self,
        node: &str,
        step: &Step<S>,
        names: impl Fn(NodeId) -> &'static str,
    ) -> Result<PendingWrite, PersistError> {
        let value = stored_write(step, names)?;
        Ok(PendingWrite { seq: self.seq, node: node.to_string(), idx: step.instance.unwrap_or(0), value })
    }

    /// Commits `writes` durably in one batch, fenced by the run's lease (and its parents'): a
    /// lost lease is [`CommitError::LeaseLost`], and nothing is kept.
    pub(crate) async fn keep(&self, writes: Vec<PendingWrite>) -> Result<(), PersistError> {
        if writes.is_empty() {
            return Ok(());
        }
        if self.revoked.load(Ordering::SeqCst) || self.parents.revoked() {
            let (thread, holder) = match self.parents.revoked_lease() {
                Some((thread, holder)) => (thread.clone(), holder.clone()),
                None => (self.thread.clone(), self.holder.clone()),
            };
            return Err(PersistError::Commit(CommitError::LeaseLost { thread, holder, current: None }));
        }
        let batch = writes.into_iter().fold(
            EffectBatch::new(self.thread.clone())
                .fenced_by(self.holder.clone(), now_ms())
                .fenced_by_parents(self.parents.leases.clone()),
            EffectBatch::pending_write,
        );
        match blocking(&self.store, move |s| s.commit_effects(batch)).await? {
            Ok(_) => Ok(()),
            // Another run has the thread: this one stops.
            Err(e @ CommitError::LeaseLost { .. }) => Err(e.into()),
            // Keeping a write early only spares a re-run after a crash: the step's own commit
            // (or its failure's) keeps it too, and says so if the store keeps failing.
            Err(e) => {
                tracing::warn!(parent: None, thread = %self.thread, error = %e, "could not keep finished writes early; they are kept with the step");
                Ok(())
            }
        }
    }
}

/// A pending write as stored: the node's update and where it routed.
#[derive(serde::Deserialize)]
pub(crate) struct StoredWrite<U> {
    pub(crate) update: U,
    pub(crate) next: Vec<String>,
    /// Payloads it sent to map workers.
    #[serde(default)]
    pub(crate) sends: Vec<(String, Vec<serde_json::Value>)>,
    /// The instance of a map worker that wrote it.
    #[serde(default)]
    pub(crate) instance: Option<u32>,
}

#[derive(serde::Serialize)]
struct StoredWriteRef<'a, U> {
    update: &'a U,
    next: Vec<&'a str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    sends: Vec<(&'a str, &'a Vec<serde_json::Value>)>,
    #[serde(skip_serializing_if = "Option::is_none")]
    instance: Option<u32>,
}

/// Serialises a finished node's step as its pending write.
pub(crate) fn stored_write<S: State>(
    step: &Step<S>,
    names: impl Fn(NodeId) -> &'static str,
) -> Result<Vec<u8>, PersistError> {
    let next: Vec<&str> = step.next.iter().map(|n| names(*n)).collect();
    let sends = step.sends.iter().filter_map(|s| Some((names(s.worker), s.payloads.as_ref().ok()?))).collect();
    let stored = StoredWriteRef { update: &step.update, next, sends, instance: step.instance };
    let allowed = super::document::Allowed { fields: S::FIELDS, under: "/update" };
    super::document::state_document(&stored, "a pending write", allowed)
}
