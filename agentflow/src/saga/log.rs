//! The saga log: a `saga.step` audit entry for each completed call that names a compensation,
//! written with the call's journaled result, and read across a thread and its subgraph
//! children when they are compensated.

use std::sync::Arc;

use agentflow_store::{AuditEntry, NewAuditEntry, Store};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::core::error::NodeError;
use crate::durable::{Journal, PersistError, blocking, now_ms};
use crate::tool::Tool;

/// The saga log's entry for a completed call of `tool`, if it names a
/// compensation. `result`: what the call returned, or why that could not be
/// stored (the step is then logged with no compensation arguments, for a
/// human). The gateway writes it in the transaction of the call's journaled
/// result, so a call whose result is recorded is in the log.
#[allow(clippy::too_many_arguments)]
pub(crate) fn step_entry(
    journal: &Journal,
    root_step: Option<u64>,
    node: &str,
    effect_key: &str,
    tool: &dyn Tool,
    call_id: &str,
    args: &Value,
    result: Result<&Value, &str>,
) -> Option<NewAuditEntry> {
    let compensation = tool.compensation()?;
    let (comp_args, error) = match result.map(|result| compensation.arguments(args, result)) {
        Ok(Ok(a)) => (Some(a), None),
        Ok(Err(e)) => {
            (None, Some(format!("the arguments of `{}` could not be built from {e}", compensation.tool().name())))
        }
        Err(why) => (
            None,
            Some(format!(
                "the call ran, but its result could not be stored ({why}), so the arguments of `{}` could not be built",
                compensation.tool().name()
            )),
        ),
    };
    let step = Step {
        id: format!("{}/{node}/{effect_key}", journal.seq),
        node: node.to_string(),
        call_id: call_id.to_string(),
        tool: tool.name().to_string(),
        compensation: compensation.tool().name().to_string(),
        args: comp_args,
        error,
        root_step: Some(root_step.unwrap_or(journal.seq)),
    };
    let detail = serde_json::to_value(&step).unwrap_or_default();
    Some(NewAuditEntry::new(now_ms(), "agentflow", STEP, detail))
}

/// Appends `entry` (a [`step_entry`]) to the thread's saga log unless the call is logged
/// already: for a result replayed from the journal, which a release before the entry rode with
/// the result may have journaled without it.
pub(crate) async fn record_step(journal: &Journal, entry: NewAuditEntry) -> Result<(), NodeError> {
    let thread = journal.thread.clone();
    blocking(&journal.store, move |s| -> Result<(), String> {
        let logged = s.list_audit(&thread).map_err(|e| e.to_string())?;
        if logged.iter().any(|e| e.kind == STEP && e.detail.get("id") == entry.detail.get("id")) {
            return Ok(());
        }
        s.append_audit(&thread, entry).map(|_| ()).map_err(|e| e.to_string())
    })
    .await
    .map_err(|e| NodeError::transient(format!("saga log unavailable: {e}")))?
    .map_err(|e| NodeError::transient(format!("could not record the call in the saga log: {e}")))
}

/// Whether the thread, or a subgraph child under it, has completed calls to compensate.
pub(crate) async fn has_steps(store: &Arc<dyn Store>, thread: &str) -> Result<bool, PersistError> {
    let thread = thread.to_string();
    let logs = blocking(store, move |s| tree_logs(s, &thread)).await??;
    Ok(logs.iter().any(|(_, log)| log.iter().any(|e| e.kind == STEP)))
}

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
