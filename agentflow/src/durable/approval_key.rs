//! What names a tool call's approval: the id it is asked under (the same call asks under the
//! same id when its node runs again, and under a second id once its tool's risk class is not
//! the one it was first asked for), the id of a node's direct call, and what a step paused for
//! the approval hands to a human.

use agentflow_store::ApprovalRecord;
use serde_json::{Value, json};

use crate::tool::args_hash;

/// A tool call as its approval's id names it: the node (and map instance) that made it, the
/// tool, the call's id and the hash of its arguments.
pub(crate) struct CallAt<'a> {
    pub(crate) node: &'a str,
    pub(crate) instance: Option<u32>,
    pub(crate) tool: &'a str,
    pub(crate) call_id: &'a str,
    pub(crate) hash: &'a str,
}

/// The id of the approval of `call` made by thread `thread` in the step keyed by checkpoint
/// `seq`: the same call asks under the same id when its node runs again.
pub(crate) fn approval_id_at(thread: &str, seq: u64, call: &CallAt<'_>) -> String {
    let CallAt { node, instance, tool, call_id, hash } = *call;
    let key = match instance {
        None => json!([thread, seq, node, tool, call_id, hash]),
        Some(i) => json!([thread, seq, node, i, tool, call_id, hash]),
    };
    format!("apr-{}", &args_hash(&key)[..24])
}

/// The id the approval of a call is asked under again when its tool's risk class is `risk` and
/// the approval asked under `id` (the call's id, [`approval_id_at`]) was asked for another
/// class: a decision taken for one class does not authorize a call of another (whoever may
/// decide the other class is asked). One id per call and class.
pub(crate) fn reasked_id(id: &str, risk: &str) -> String {
    format!("apr-{}", &args_hash(&json!(["asked again", id, risk]))[..24])
}

/// The id a direct call ([`Ctx::run_tool`](crate::Ctx::run_tool)) of `tool` from `node` gets:
/// the tool's name and the call's position among the attempt's direct calls.
pub(crate) fn direct_call_id(node: &str, tool: &str, n: u32) -> String {
    format!("{node}-{tool}-{n}")
}

/// What a step paused for `record` hands to the human: the payload of its
/// [`PendingKind::Approval`](crate::PendingKind::Approval).
pub(crate) fn approval_payload(record: &ApprovalRecord) -> Value {
    json!({
        "approval": record.id,
        "tool": record.tool,
        "args": serde_json::from_str::<Value>(&record.args).unwrap_or(Value::Null),
        "risk": record.risk,
        "reason": record.reason,
        "expires_at": record.expires_at,
    })
}
