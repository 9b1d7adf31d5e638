//! The thread's budget as its checkpoints keep it: under [`BUDGET`], in a checkpoint's
//! `extra` or, newer, in a pending write on it.

use agentflow_store::{Checkpoint, PendingWrite};

use super::error::PersistError;
use super::keys::BUDGET;
use crate::core::budget::ThreadBudget;

/// The thread's budget as of checkpoint `latest`: a pending `__budget__`
/// write on it (a pause, a failure, a raised limit) wins over the one stored
/// in its metadata. A thread written before budgets were stored has none.
pub(crate) fn stored_budget(latest: &Checkpoint, writes: &[PendingWrite]) -> Result<ThreadBudget, PersistError> {
    let decode = |source| PersistError::Decode {
        thread: latest.thread.clone(),
        seq: latest.seq,
        what: "the thread's budget",
        source,
    };
    if let Some(w) = writes.iter().find(|w| w.node == BUDGET) {
        return serde_json::from_slice(&w.value).map_err(decode);
    }
    match latest.metadata.extra.get(BUDGET) {
        Some(v) => serde_json::from_value(v.clone()).map_err(decode),
        None => Ok(ThreadBudget::default()),
    }
}

/// A pending write holding the thread's budget on checkpoint `seq`.
pub(crate) fn budget_write(seq: u64, budget: &ThreadBudget) -> Result<PendingWrite, PersistError> {
    Ok(PendingWrite {
        seq,
        node: BUDGET.to_string(),
        idx: 0,
        value: super::document::document(budget, "the thread's budget")?,
    })
}
