//! What a running node can see besides the state: the dependencies, where it
//! is in the run, and the run's cancellation signal.

use std::future::Future;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use std::sync::Mutex;

use crate::error::NodeError;
use crate::interrupt::InterruptSlot;
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
    pub(crate) may_interrupt: bool,
    pub(crate) interrupt: &'a Mutex<InterruptSlot>,
    pub(crate) resume: Option<&'a serde_json::Value>,
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

    /// Pauses the run for a human, handing them `payload`; returns the value
    /// they resume with.
    ///
    /// The first time, this returns an error that ends the run as
    /// `Outcome::Interrupted` (propagate it with `?`). The state is persisted
    /// and the thread waits. `runner.resume_with(value)` runs this node again
    /// from its start, and this call then returns `value`, decoded as `R`.
    ///
    /// Only a `#[node(interrupt)]` may call it, once per run of the node.
    pub fn interrupt<P: Serialize, R: DeserializeOwned>(&self, payload: P) -> Result<R, NodeError> {
        if !self.may_interrupt {
            return Err(NodeError::fatal(format!(
                "node `{}` called `interrupt` but is not marked `#[node(interrupt)]`",
                self.node
            )));
        }
        let mut slot = self.interrupt.lock().unwrap_or_else(|p| p.into_inner());
        if std::mem::replace(&mut slot.called, true) {
            return Err(NodeError::fatal(format!(
                "node `{}` called `interrupt` twice in one run; ask in two nodes instead",
                self.node
            )));
        }
        if let Some(value) = self.resume {
            return serde_json::from_value(value.clone()).map_err(|e| {
                NodeError::fatal(format!(
                    "the resume value for node `{}` does not have the shape it expects ({e}); \
                     resume again with a value of the right shape",
                    self.node
                ))
            });
        }
        slot.payload = Some(serde_json::to_value(payload).map_err(|e| {
            NodeError::fatal(format!("the interrupt payload of node `{}` does not serialise: {e}", self.node))
        })?);
        Err(NodeError::needs_input(format!("node `{}` is waiting for a human", self.node)))
    }
}
