//! Why a crash matrix could not run.

use super::report::Ending;

/// Why a crash matrix could not run (a violation is not an error: see [`CrashReport`](super::CrashReport)).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CrashMatrixError {
    /// `run` was called inside a tokio runtime.
    #[error(
        "the crash matrix starts and kills tokio runtimes of its own: call it from a plain `#[test] fn`, \
         not from `#[tokio::test]` or other async code"
    )]
    InsideRuntime,
    /// No input was given.
    #[error("the crash matrix needs the graph's input: call `.input(state)`")]
    NoInput,
    /// The store factory failed.
    #[error("the crash matrix could not make a store: {0}")]
    Store(String),
    /// The uncut run did not end; there is nothing to compare the cut runs with.
    #[error(
        "the uncut run did not end as a crash test can use ({0}): fix the graph, its deps or the scripted answers \
         first (a run that fails is refused unless `.failure_expected()` says the failure is the scenario)"
    )]
    Reference(Ending),
    /// A snapshot could not be read or restored.
    #[error("the crash matrix could not carry a snapshot over to a fresh store: {0}")]
    Snapshot(String),
    /// A runtime for a run could not be started.
    #[error("the crash matrix could not start a tokio runtime: {0}")]
    Runtime(String),
    /// A child process of [`CrashMatrix::kill_sample`](super::CrashMatrix::kill_sample) could not be started or ended oddly.
    #[error("kill sample: {0}")]
    Kill(String),
}
