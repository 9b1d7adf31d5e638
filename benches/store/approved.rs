//! Durable commits per approved tool call (`approved_call`).

use serde_json::json;

use crate::support::{Config, emit, thread_id};
use crate::workload_approved;

/// Durable commits per approved tool call (a count, not a timing): from just
/// after the approver's decision to the end of the resumed run, with how many of them
/// are step commits (the rest are the gateway's approval transitions, effect
/// journal and audit writes).
pub fn bench_approved(cfg: &Config, rt: &tokio::runtime::Runtime) {
    let (all, steps) = rt.block_on(workload_approved::commits_per_approved_call(&thread_id("approved")));
    emit(json!({
        "bench": "approved_call",
        "op": "approve, resume, the tool runs once, the run completes",
        "durable_commits_per_approved_call": all,
        "of_which_step_commits": steps,
        "gateway_commits": all - steps,
        "quick": cfg.quick,
    }));
}
