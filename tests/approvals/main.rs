//! Approvals and interrupts: approval requests bound to their call, their commits, owners,
//! questions asked of people and the answers; deciding and answering through the server's API,
//! following a thread's runs through its stream, its follow-up runs and completion webhooks, and
//! cron schedules.

#[path = "../support/mod.rs"]
mod support;

mod approval_binding;
mod approval_commits;
mod approval_decisions;
mod approval_execution;
mod approval_refunds;
mod approvals;
mod interrupt_answers;
mod interrupt_questions;
mod interrupt_questions_api;
mod interrupts;
mod owner_required;
mod promises_fork_approved;
mod server_abuse;
mod server_access;
mod server_api;
mod server_client;
mod server_follow_ups;
mod server_schedules;
mod server_stream;
mod server_stream_client;
