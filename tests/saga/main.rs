//! Sagas and circuit breakers: compensations of a failed run, outcomes left unknown, and breakers
//! on the tools a run calls.

#[path = "../support/mod.rs"]
mod support;

mod breaker_child_tools;
mod circuit_breaker;
mod promises_saga_unknown;
mod saga;
mod saga_crash;
mod saga_follow_up;
mod saga_questions;
mod saga_shop;
mod saga_subgraph;
