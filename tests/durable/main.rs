//! Durable runs: what a store keeps across resumes (checkpoints, values read back, storage growth
//! and compaction, leases, budgets, state updates of a paused thread, threads moved to a newer
//! version of their graph and forked back before the move).

#[path = "../support/mod.rs"]
mod support;

mod budgets_resume;
mod compaction_keeps_journal;
mod encryption;
mod event_log;
mod fixtures_in_support;
mod fork_across_versions;
mod graph_locks;
mod graph_version_gates;
mod graph_version_keys;
mod graph_version_moves;
mod graph_version_risk;
mod graph_versions;
mod leases;
mod nul_bytes;
mod one_error_type;
mod option_clear;
mod orders_versions;
mod persistence;
mod promises_resume_writes;
mod purge;
mod secrets;
mod storage_growth;
mod tenants;
mod update_after_move;
mod update_state_paused;
mod values_read_back;
