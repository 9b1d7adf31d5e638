//! agentflow: LLM agents as state graphs whose wiring the compiler checks.
#![warn(missing_docs)]

pub mod error;

pub use error::{ErrorClass, NodeError};
