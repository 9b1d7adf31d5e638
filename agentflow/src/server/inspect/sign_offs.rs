//! What the sign-offs of an approval that waits for more approvers approved so far, for
//! people: under a rule of several approvers they count together only for the same arguments
//! and conditions, so each is shown with what it approved.

use agentflow_store::{ApprovalRecord, Store};

/// What the sign-offs of waiting approval `record` so far approved, read from its thread's
/// audit log: `alice with conditions {"max":10}, bob (edited arguments) without conditions`;
/// empty when the log cannot be read or holds none.
pub fn sign_offs(store: &dyn Store, record: &ApprovalRecord) -> String {
    let Ok(log) = store.list_audit(&record.thread) else { return String::new() };
    log.iter()
        .filter(|e| e.kind == "approval.sign_off" && e.detail.get("approval") == Some(&serde_json::json!(record.id)))
        .map(|e| {
            let edited = if e.detail.get("args").is_some() { " (edited arguments)" } else { "" };
            match e.detail.get("conditions") {
                Some(c) if !c.is_null() => format!("{}{edited} with conditions {c}", e.actor),
                _ => format!("{}{edited} without conditions", e.actor),
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}
