//! What a running node can see besides the state: the dependencies, where it
//! is in the run, and the run's cancellation signal.

use tokio_util::sync::CancellationToken;

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
}
