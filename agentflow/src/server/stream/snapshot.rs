//! A thread's state at a checkpoint, as a stream's `STATE_SNAPSHOT` and `MESSAGES_SNAPSHOT`
//! show it: read by the graph's own types when the server hosts the graph, else folded from the
//! stored updates through the reducers the graph's stored description names, and shown only
//! when that fold is exact (a custom reducer cannot be run without the graph's code).
//!
//! A reader keeps the last state it read: a run's end and the next run's start show the state
//! at the same checkpoint, read once.

use std::sync::Arc;

use agentflow_store::Store;
use serde_json::Value;

use crate::server::inspect::fold::{self, Fields};

/// Reads thread `thread`'s state, unmasked, at checkpoint `seq`; `None` when it cannot be read
/// (exactly).
pub(crate) type SnapshotFn = Box<dyn FnMut(&dyn Store, &str, u64) -> Option<Value> + Send>;

/// A reader's source of states, with the last one it read.
pub(crate) struct Snapshots {
    read: SnapshotFn,
    last: Option<(u64, Arc<Value>)>,
}

impl std::fmt::Debug for Snapshots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshots").field("last", &self.last.as_ref().map(|(seq, _)| seq)).finish_non_exhaustive()
    }
}

impl Snapshots {
    /// States read by `read`.
    pub(crate) fn new(read: SnapshotFn) -> Self {
        Snapshots { read, last: None }
    }

    /// Thread `thread`'s state at checkpoint `at` (`None`: its latest when read), unmasked;
    /// `None` when there is none or it cannot be read.
    pub(crate) fn at(&mut self, store: &dyn Store, thread: &str, at: Option<u64>) -> Option<Arc<Value>> {
        let seq = match at {
            Some(seq) => seq,
            None => match store.latest_checkpoint(thread) {
                Ok(latest) => latest?.seq,
                Err(e) => {
                    tracing::warn!(thread, error = %e, "a stream's state snapshot could not be read");
                    return None;
                }
            },
        };
        if let Some((held, state)) = &self.last
            && *held == seq
        {
            return Some(Arc::clone(state));
        }
        let state = Arc::new((self.read)(store, thread, seq)?);
        self.last = Some((seq, Arc::clone(&state)));
        Some(state)
    }
}

/// States folded from the stored updates through `fields`' reducers, when the fold is exact.
pub(crate) fn folded(fields: Option<Fields>) -> SnapshotFn {
    Box::new(move |store: &dyn Store, thread: &str, seq: u64| {
        match fold::state_at(store, thread, seq, fields.as_ref()) {
            Ok(folded) if fold::require_exact(&folded).is_ok() => Some(folded.state),
            Ok(folded) => {
                tracing::debug!(thread, seq, warnings = ?folded.warnings, "a stream leaves out a state it cannot fold exactly");
                None
            }
            Err(e) => {
                tracing::warn!(thread, seq, error = %e, "a stream's state snapshot could not be read");
                None
            }
        }
    })
}

/// No states: a reader that shows none.
#[cfg(test)]
pub(crate) fn none() -> SnapshotFn {
    Box::new(|_: &dyn Store, _: &str, _: u64| None)
}
