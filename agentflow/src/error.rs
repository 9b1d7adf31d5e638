//! [`Error`]: one error type every operation's error converts into, so `?`
//! works in a `main` (or a handler) that runs graphs, reads history, decides
//! approvals and opens stores.

use crate::approval::DecisionError;
use crate::durable::{HistoryError, PersistError, ResumeError, ValueError};
use crate::model::{ModelError, StructuredError};
use crate::outcome::RunError;
use agentflow_store::{OpenError, ReadError, StorageError};

/// Any error of agentflow, by the operation that failed.
///
/// Each per-operation error converts into it with `From`, so
/// `fn main() -> Result<(), agentflow::Error>` can use `?` on runs, resumes,
/// history reads, approval decisions and store opens alike. Match on the
/// variant (or keep the per-operation error) to react to a specific failure.
///
/// ```
/// fn open(path: &std::path::Path) -> Result<agentflow::RedbStore, agentflow::Error> {
///     Ok(agentflow::RedbStore::open(path)?)
/// }
/// let dir = std::env::temp_dir().join(format!("agentflow-error-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// let first = open(&dir.join("a.redb"));
/// assert!(first.is_ok());
/// // While it is open, a second open is refused, as an `agentflow::Error`.
/// let err = open(&dir.join("a.redb")).unwrap_err();
/// assert!(matches!(err, agentflow::Error::Open(_)), "{err}");
/// # std::fs::remove_dir_all(&dir).ok();
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A run, resume or `resume_with` failed.
    #[error(transparent)]
    Run(#[from] RunError),
    /// A history read or change (state, fork, update_state, ...) failed.
    #[error(transparent)]
    History(#[from] HistoryError),
    /// An approval decision was refused.
    #[error(transparent)]
    Decision(#[from] DecisionError),
    /// Persisting or reading a thread failed.
    #[error(transparent)]
    Persist(#[from] PersistError),
    /// A stored thread cannot be resumed.
    #[error(transparent)]
    Resume(#[from] ResumeError),
    /// A value cannot be stored as JSON.
    #[error(transparent)]
    Value(#[from] ValueError),
    /// A store file could not be opened.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// The store failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// Reading from the store failed.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// A model call failed.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// A structured-output call failed.
    #[error(transparent)]
    Structured(#[from] StructuredError),
    /// A circuit breaker's configuration was refused.
    #[error(transparent)]
    Breaker(#[from] crate::breaker::BreakerConfigError),
    /// An answer to a thread's interrupt was refused or failed.
    #[error(transparent)]
    Answer(#[from] crate::approval::AnswerError),
    /// A worker, or a run submitted to one, failed.
    #[error(transparent)]
    Worker(#[from] crate::app::WorkerError),
}

#[cfg(test)]
mod tests {
    use super::Error;

    /// Compiles only if `E` converts into [`Error`].
    fn converts<E: Into<Error>>() {}

    /// Every public error of an operation converts, so `?` works on each in a `main`.
    #[test]
    fn every_operations_error_converts_into_the_umbrella_error() {
        converts::<crate::outcome::RunError>();
        converts::<crate::durable::HistoryError>();
        converts::<crate::approval::DecisionError>();
        converts::<crate::approval::AnswerError>();
        converts::<crate::durable::PersistError>();
        converts::<crate::durable::ResumeError>();
        converts::<crate::durable::ValueError>();
        converts::<crate::app::WorkerError>();
        converts::<agentflow_store::OpenError>();
        converts::<agentflow_store::StorageError>();
        converts::<agentflow_store::ReadError>();
        converts::<crate::model::ModelError>();
        converts::<crate::model::StructuredError>();
        converts::<crate::breaker::BreakerConfigError>();
    }
}
