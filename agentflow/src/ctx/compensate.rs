//! Asking for saga compensation: a node that ends the run and has its calls undone.

use super::Ctx;
use crate::core::error::NodeError;

impl<D> Ctx<'_, D> {
    /// Ends the run and undoes what it did: returns the fatal error to
    /// return from the node (`return Err(cx.compensate("shipping failed"))`).
    /// The run ends [`Outcome::Failed`](crate::Outcome::Failed) at this node, and with a store and a
    /// thread the compensations of the thread's completed calls run, newest
    /// first, so the run's outcome is [`Outcome::Compensated`](crate::Outcome::Compensated) (or
    /// [`Outcome::CompensationFailed`](crate::Outcome::CompensationFailed)). Any fatal error does the same; this
    /// names the intent.
    pub fn compensate(&self, reason: impl Into<String>) -> NodeError {
        NodeError::fatal(format!("node `{}` asked for compensation: {}", self.node, reason.into()))
    }
}
