//! What a running node can see besides the state: the dependencies, where it
//! is in the run, and the run's cancellation signal.

use std::future::Future;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use crate::error::NodeError;
use crate::persist::Journal;

/// The context handed to a node: `async fn n(s: &S, cx: &Ctx<D>) -> Step<S>`.
///
/// A node may take `deps: &D` instead when it needs nothing else.
#[derive(Debug)]
pub struct Ctx<'a, D> {
    pub(crate) deps: &'a D,
    pub(crate) node: &'static str,
    pub(crate) step: u32,
    pub(crate) attempt: u32,
    pub(crate) cancel: &'a CancellationToken,
    pub(crate) journal: Option<&'a Journal>,
}

impl<'a, D> Ctx<'a, D> {
    /// The user's dependencies (models, clients, configuration).
    pub fn deps(&self) -> &'a D {
        self.deps
    }

    /// The name of the running node.
    pub fn node(&self) -> &'static str {
        self.node
    }

    /// The super-step number, from 0.
    pub fn step(&self) -> u32 {
        self.step
    }

    /// The attempt number, from 1; above 1 when the node is being retried.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// Whether the run was cancelled. The executor stops at the next step
    /// boundary; a long node may check this (or await [`Ctx::cancelled`]) to stop early.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// Completes when the run is cancelled.
    pub async fn cancelled(&self) {
        self.cancel.cancelled().await;
    }

    /// The thread this run belongs to, when it is persisted.
    pub fn thread(&self) -> Option<&str> {
        self.journal.map(|j| j.thread.as_str())
    }

    /// Runs a side effect at most once per (thread, checkpoint, node, `key`).
    ///
    /// With a store, the result is journaled durably before this returns; when
    /// the node runs again (a retry, a resume after a crash or an interrupt)
    /// the journaled result comes back and `effect` is not called. `effect`
    /// receives an idempotency key, stable across those re-runs, to pass on
    /// to systems that deduplicate requests. Errors are not journaled, so a
    /// failed effect runs again on retry.
    ///
    /// Without a store there is no journal: `effect` simply runs.
    pub async fn effect<T, F, Fut>(&self, key: &str, effect: F) -> Result<T, NodeError>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce(String) -> Fut,
        Fut: Future<Output = Result<T, NodeError>>,
    {
        match self.journal {
            Some(journal) => journal.run(self.node, key, effect).await,
            None => effect(format!("{}/{key}", self.node)).await,
        }
    }
}
