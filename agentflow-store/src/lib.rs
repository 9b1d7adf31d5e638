//! Embedded persistence for agentflow (see the crate README).
