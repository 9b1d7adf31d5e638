//! A thread's chain of checkpoints: the seq of the next one, and a state rebuilt from its
//! nearest snapshot and the deltas after it.

use agentflow_store::StateChain;

use super::error::PersistError;
use crate::core::state::State;

/// The seq after `seq`, for thread `thread`'s next checkpoint. A store holds none past
/// `i64::MAX`, so this fails only for a [`Store`](agentflow_store::Store) of another origin that
/// handed out a seq at the end of the range: a typed error, not an overflow.
pub(crate) fn next_seq(thread: &str, seq: u64) -> Result<u64, PersistError> {
    seq.checked_add(1).ok_or_else(|| {
        PersistError::Commit(agentflow_store::CommitError::Invalid {
            thread: thread.to_string(),
            reason: format!("checkpoint {seq} is the last a thread can have: it cannot take another"),
        })
    })
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
