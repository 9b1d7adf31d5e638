//! The events a run emits, in order, for tracing and UIs.

use std::fmt;
use std::time::Duration;

use crate::error::NodeError;
use crate::executor::Outcome;
use crate::state::State;

/// One thing that happened during a run.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Event<S: State> {
    /// A super-step begins with these active nodes, in declaration order.
    StepStarted {
        /// The step number, from 0.
        step: u32,
        /// The active nodes.
        nodes: Vec<&'static str>,
    },
    /// A node attempt begins.
    NodeStarted {
        /// The step number.
        step: u32,
        /// The node.
        node: &'static str,
        /// The attempt, from 1.
        attempt: u32,
    },
    /// A node attempt failed with a transient error and will run again.
    NodeRetrying {
        /// The step number.
        step: u32,
        /// The node.
        node: &'static str,
        /// The attempt that failed.
        attempt: u32,
        /// Why it failed.
        error: NodeError,
        /// How long the executor waits before the next attempt.
        delay: Duration,
    },
    /// A node finished: its update and where it routes.
    NodeFinished {
        /// The step number.
        step: u32,
        /// The node.
        node: &'static str,
        /// The partial update it returned.
        update: S::Update,
        /// The nodes it routes to (empty for `END`).
        next: Vec<&'static str>,
    },
    /// A node failed for good (after its retries).
    NodeFailed {
        /// The step number.
        step: u32,
        /// The node.
        node: &'static str,
        /// The error.
        error: NodeError,
    },
    /// The run ended.
    Finished {
        /// How it ended.
        outcome: Outcome,
        /// How many super-steps completed.
        steps: u32,
    },
}

impl<S: State> fmt::Display for Event<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::StepStarted { step, nodes } => write!(f, "step {step}: [{}]", nodes.join(", ")),
            Event::NodeStarted { step, node, attempt } => {
                write!(f, "step {step}: {node} started (attempt {attempt})")
            }
            Event::NodeRetrying { step, node, attempt, error, delay } => {
                write!(f, "step {step}: {node} attempt {attempt} failed ({error}); retrying in {delay:?}")
            }
            Event::NodeFinished { step, node, update, next } => {
                let next = if next.is_empty() { "END".to_string() } else { next.join(", ") };
                write!(f, "step {step}: {node} -> {next} with {update:?}")
            }
            Event::NodeFailed { step, node, error } => {
                write!(f, "step {step}: {node} failed: {error}")
            }
            Event::Finished { outcome, steps } => {
                write!(f, "finished after {steps} steps: {outcome}")
            }
        }
    }
}
