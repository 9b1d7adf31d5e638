//! Why a thread could not be read for showing it (the inbox, the `agentflow` CLI): it is not
//! there, or the store failed or holds a record that does not decode.

use std::fmt::Display;

/// Why a thread could not be read for showing it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InspectError {
    /// Not there: a thread, or a checkpoint of it. The message names it and where to look.
    #[error("{0}")]
    NotFound(String),
    /// The store failed, or a record it holds does not decode. The message says which.
    #[error("{0}")]
    Store(String),
}

impl InspectError {
    /// A store failure, with `e`'s message.
    pub(crate) fn store(e: impl Display) -> Self {
        InspectError::Store(e.to_string())
    }

    /// Thread `id` is not in the store (or not there for the user: a thread of another tenant
    /// reads exactly like a missing one).
    pub fn missing_thread(id: &str) -> Self {
        InspectError::NotFound(format!("no thread `{id}` in the store; list them with `agentflow threads`"))
    }
}
