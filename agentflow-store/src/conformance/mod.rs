//! The suite every [`Store`] implementation must pass (feature `testing`).
//!
//! Each case takes a fresh, empty store and panics on a failed expectation. States in the suite
//! are byte strings and applying a delta appends its blobs, so a chain is checked by
//! concatenation:
//!
//! ```
//! # #[cfg(feature = "testing")] {
//! use agentflow_store::{conformance, RedbStore, Store};
//! conformance::run_all(&|| Box::new(RedbStore::in_memory().unwrap()) as Box<dyn Store>);
//! # }
//! ```

mod approvals;
mod audit;
mod breakers;
mod compaction;
mod effect_batches;
mod effects;
mod events;
mod fixtures;
mod follow_up_rules;
mod follow_ups;
mod graph_descriptions;
mod idempotency;
mod leases;
mod purge;
mod queue;
mod restore;
mod schedules;
mod tenants;
mod threads;
mod timers;
mod traces;
mod webhooks;

pub use approvals::{approval_cas_race, approvals_in_step_commit, approvals_outcome_unknown, approvals_state_machine};
pub use audit::{audit_is_append_only, audit_log_is_chained};
pub use breakers::{breaker_race, breaker_transitions};
pub use compaction::{
    compaction_after_a_resume_drops_the_journal_kept_for_it, compaction_keeps_retained_readable,
    compaction_keeps_the_journal_of_a_resumable_thread, dump_is_one_moment,
};
pub use effect_batches::{
    effect_batch_applies_every_part_together, effect_batch_creates_records, effect_batch_fenced_by_the_lease,
    effect_batch_refusal_writes_nothing, step_commit_fenced_by_parent_leases,
};
pub use effects::{
    effect_batch_all_or_nothing, effect_batch_keeps_pending_writes, effect_keys_of_one_checkpoint,
    effects_never_overwrite, thread_effects_lists_the_whole_journal,
};
pub use events::{
    event_log_keeps_the_newest_commits, event_log_numbers_each_commit, event_log_purge_removes_it,
    event_log_reads_after_an_id, event_log_refused_commit_writes_none, event_log_wakes_readers,
};
pub use fixtures::{NOW, approval, commit, concat, root, step, thread};
pub use follow_up_rules::{
    a_held_run_keeps_follow_ups_until_the_thread_s_run_ends, enqueue_beside_a_compensating_thread_is_held,
    follow_up_rules_decide_about_the_thread_s_run, reject_race_queues_one,
};
pub use follow_ups::{
    follow_ups_race_the_settle, follow_ups_take_the_place_of_the_ended_run,
    purge_removes_follow_ups_and_webhook_deliveries, settle_writes_the_webhook_delivery_once,
};
pub use graph_descriptions::graph_descriptions_by_fingerprint;
pub use idempotency::{idempotency_key_attaches_a_retry, idempotency_key_race};
pub use leases::{lease_race, lease_rules};
pub use purge::{
    a_hold_keeps_the_subgraph_children_of_the_held_thread, legal_hold_refuses_purge,
    purge_removes_a_thread_and_its_children,
};
pub use queue::{
    run_queue_claim_race, run_queue_lifecycle, run_queue_parks_for_answers, run_queue_parks_for_approvals,
    run_queue_parks_for_named_approvals, run_queue_settle_answers_control_requests,
};
pub use restore::{
    restore_carries_the_event_log, restore_refuses_what_would_not_read_back, restore_thread_writes_a_dump_as_it_was,
    restore_threads_writes_all_or_none,
};
pub use schedules::{schedule_fire_moves_next_at_and_queues_the_run, schedule_fire_race, schedules_roundtrip};
pub use tenants::{queued_run_keeps_its_tenant, thread_tenant_is_fixed_at_creation};
pub use threads::{
    checkpoints_roundtrip, child_threads_follow_the_parent_field, commit_rules, eventual_then_flush,
    group_commit_concurrent, pending_writes_lifecycle, state_chain_and_forks, threads_roundtrip,
};
pub use timers::timers_follow_the_status;
pub use traces::thread_trace_first_one_wins;
pub use webhooks::{due_webhooks_longest_due_first, webhook_attempts_retry_give_up_and_deliver, webhook_claim_race};

use crate::Store;

/// One case of the suite: it gets a fresh, empty store.
pub type Case = fn(&dyn Store);

/// Every case, by name.
pub const CASES: &[(&str, Case)] = &[
    ("threads_roundtrip", threads_roundtrip),
    ("child_threads_follow_the_parent_field", child_threads_follow_the_parent_field),
    ("checkpoints_roundtrip", checkpoints_roundtrip),
    ("commit_rules", commit_rules),
    ("state_chain_and_forks", state_chain_and_forks),
    ("pending_writes_lifecycle", pending_writes_lifecycle),
    ("effects_never_overwrite", effects_never_overwrite),
    ("effect_keys_of_one_checkpoint", effect_keys_of_one_checkpoint),
    ("thread_effects_lists_the_whole_journal", thread_effects_lists_the_whole_journal),
    ("audit_is_append_only", audit_is_append_only),
    ("audit_log_is_chained", audit_log_is_chained),
    ("thread_tenant_is_fixed_at_creation", thread_tenant_is_fixed_at_creation),
    ("queued_run_keeps_its_tenant", queued_run_keeps_its_tenant),
    ("thread_trace_first_one_wins", thread_trace_first_one_wins),
    ("approvals_state_machine", approvals_state_machine),
    ("approvals_in_step_commit", approvals_in_step_commit),
    ("effect_batch_all_or_nothing", effect_batch_all_or_nothing),
    ("effect_batch_refusal_writes_nothing", effect_batch_refusal_writes_nothing),
    ("effect_batch_applies_every_part_together", effect_batch_applies_every_part_together),
    ("effect_batch_fenced_by_the_lease", effect_batch_fenced_by_the_lease),
    ("effect_batch_keeps_pending_writes", effect_batch_keeps_pending_writes),
    ("step_commit_fenced_by_parent_leases", step_commit_fenced_by_parent_leases),
    ("effect_batch_creates_records", effect_batch_creates_records),
    ("approval_cas_race", approval_cas_race),
    ("approvals_outcome_unknown", approvals_outcome_unknown),
    ("lease_rules", lease_rules),
    ("lease_race", lease_race),
    ("group_commit_concurrent", group_commit_concurrent),
    ("eventual_then_flush", eventual_then_flush),
    ("compaction_keeps_retained_readable", compaction_keeps_retained_readable),
    ("compaction_keeps_the_journal_of_a_resumable_thread", compaction_keeps_the_journal_of_a_resumable_thread),
    (
        "compaction_after_a_resume_drops_the_journal_kept_for_it",
        compaction_after_a_resume_drops_the_journal_kept_for_it,
    ),
    ("run_queue_lifecycle", run_queue_lifecycle),
    ("run_queue_parks_for_approvals", run_queue_parks_for_approvals),
    ("run_queue_parks_for_named_approvals", run_queue_parks_for_named_approvals),
    ("run_queue_parks_for_answers", run_queue_parks_for_answers),
    ("run_queue_settle_answers_control_requests", run_queue_settle_answers_control_requests),
    ("run_queue_claim_race", run_queue_claim_race),
    ("timers_follow_the_status", timers_follow_the_status),
    ("breaker_transitions", breaker_transitions),
    ("breaker_race", breaker_race),
    ("graph_descriptions_by_fingerprint", graph_descriptions_by_fingerprint),
    ("restore_thread_writes_a_dump_as_it_was", restore_thread_writes_a_dump_as_it_was),
    ("restore_refuses_what_would_not_read_back", restore_refuses_what_would_not_read_back),
    ("restore_threads_writes_all_or_none", restore_threads_writes_all_or_none),
    ("purge_removes_a_thread_and_its_children", purge_removes_a_thread_and_its_children),
    ("legal_hold_refuses_purge", legal_hold_refuses_purge),
    ("a_hold_keeps_the_subgraph_children_of_the_held_thread", a_hold_keeps_the_subgraph_children_of_the_held_thread),
    ("event_log_numbers_each_commit", event_log_numbers_each_commit),
    ("event_log_refused_commit_writes_none", event_log_refused_commit_writes_none),
    ("event_log_reads_after_an_id", event_log_reads_after_an_id),
    ("event_log_purge_removes_it", event_log_purge_removes_it),
    ("event_log_wakes_readers", event_log_wakes_readers),
    ("idempotency_key_attaches_a_retry", idempotency_key_attaches_a_retry),
    ("idempotency_key_race", idempotency_key_race),
    ("restore_carries_the_event_log", restore_carries_the_event_log),
    ("follow_ups_take_the_place_of_the_ended_run", follow_ups_take_the_place_of_the_ended_run),
    ("settle_writes_the_webhook_delivery_once", settle_writes_the_webhook_delivery_once),
    ("purge_removes_follow_ups_and_webhook_deliveries", purge_removes_follow_ups_and_webhook_deliveries),
    ("follow_ups_race_the_settle", follow_ups_race_the_settle),
    (
        "a_held_run_keeps_follow_ups_until_the_thread_s_run_ends",
        a_held_run_keeps_follow_ups_until_the_thread_s_run_ends,
    ),
    ("follow_up_rules_decide_about_the_thread_s_run", follow_up_rules_decide_about_the_thread_s_run),
    ("enqueue_beside_a_compensating_thread_is_held", enqueue_beside_a_compensating_thread_is_held),
    ("reject_race_queues_one", reject_race_queues_one),
    ("schedules_roundtrip", schedules_roundtrip),
    ("schedule_fire_moves_next_at_and_queues_the_run", schedule_fire_moves_next_at_and_queues_the_run),
    ("schedule_fire_race", schedule_fire_race),
    ("webhook_attempts_retry_give_up_and_deliver", webhook_attempts_retry_give_up_and_deliver),
    ("due_webhooks_longest_due_first", due_webhooks_longest_due_first),
    ("webhook_claim_race", webhook_claim_race),
];

/// Runs every case on a fresh store from `make`, printing each case's name first.
pub fn run_all(make: &dyn Fn() -> Box<dyn Store>) {
    for (name, case) in CASES {
        eprintln!("conformance: {name}");
        let store = make();
        case(store.as_ref());
    }
}
