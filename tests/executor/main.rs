//! The executor: a run's flow, errors, limits, map-reduce, streaming, timers, metrics, hung runs
//! and the futures' `Send` bound.

#[path = "../support/mod.rs"]
mod support;

mod email_triage_budget;
mod executor_errors;
mod executor_flow;
mod executor_limits;
mod hung_runs;
mod map_reduce;
mod metrics;
mod personal_data;
mod proptest_executor;
mod send_futures;
mod stream_pause_resume;
mod streaming;
mod timers;
