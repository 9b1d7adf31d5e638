//! Procedural macros for agentflow.
