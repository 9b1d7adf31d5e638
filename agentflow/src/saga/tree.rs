//! The calls of a thread and of its subgraph children, as one compensation sees them.

use agentflow_store::{AuditEntry, Store};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::durable::PersistError;

/// The audit entry kind of a completed forward call that names a compensation.
pub(crate) const STEP: &str = "saga.step";

/// A recorded forward call, as its `saga.step` entry holds it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Step {
    pub(super) id: String,
    pub(super) node: String,
    pub(super) call_id: String,
    pub(super) tool: String,
    pub(super) compensation: String,
    #[serde(default)]
    pub(super) args: Option<Value>,
    #[serde(default)]
    pub(super) error: Option<String>,
    /// The step of the root thread (the one no subgraph runs under) in which the call was made:
    /// the thread's own step for a call of its own, the step of the parent's node that ran the
    /// child for a subgraph child's call. It orders the calls of a tree of threads as one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) root_step: Option<u64>,
}

impl Step {
    /// Where the call stands in the tree's order: its root step (an entry written before it was
    /// recorded is the thread's own, and its id starts with its step).
    pub(super) fn root_step(&self) -> u64 {
        self.root_step.or_else(|| self.id.split('/').next().and_then(|s| s.parse().ok())).unwrap_or(0)
    }
}

/// A thread's audit log: `None` for the compensating thread, else the child thread's id.
pub(super) type ThreadLog = (Option<String>, Vec<AuditEntry>);

/// The audit logs of `thread` (first, as `None`) and of its subgraph children at every level.
pub(super) fn tree_logs(store: &dyn Store, thread: &str) -> Result<Vec<ThreadLog>, PersistError> {
    let mut logs = vec![(None, store.list_audit(thread)?)];
    let mut parents = vec![thread.to_string()];
    while let Some(parent) = parents.pop() {
        for child in store.child_threads(&parent)?.items {
            logs.push((Some(child.id.clone()), store.list_audit(&child.id)?));
            parents.push(child.id);
        }
    }
    Ok(logs)
}

/// The calls to compensate, oldest first: the thread's own and its subgraph children's (those
/// a child's own compensation has not undone), in the order of the root thread's steps and,
/// within one, of the time they were logged. A child's call is named `{child thread}#{id}`.
pub(super) fn tree_steps(logs: &[ThreadLog]) -> Vec<Step> {
    let mut steps: Vec<(Step, u64, usize, u64)> = Vec::new();
    for (depth, (child, log)) in logs.iter().enumerate() {
        let undone: std::collections::HashSet<&str> = match child {
            Some(_) => {
                log.iter().filter(|e| e.kind == "saga.compensated").filter_map(|e| e.detail["id"].as_str()).collect()
            }
            None => Default::default(),
        };
        for e in log.iter().filter(|e| e.kind == STEP) {
            let Ok(mut step) = serde_json::from_value::<Step>(e.detail.clone()) else { continue };
            if undone.contains(step.id.as_str()) {
                continue;
            }
            if let Some(child) = child {
                step.id = format!("{child}#{}", step.id);
            }
            steps.push((step, e.at, depth, e.seq));
        }
    }
    steps.sort_by_key(|(step, at, depth, seq)| (step.root_step(), *at, *depth, *seq));
    steps.into_iter().map(|(step, ..)| step).collect()
}
