//! Calls cut off mid-way: a call that started and left neither a result nor an end may have
//! acted. How its *started* marker describes it, and the `OUTCOME_UNKNOWN` record and audit
//! entry that ask a human to settle it.

use agentflow_store::{ApprovalRecord, ApprovalStatus, NewAuditEntry, Store};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::error::PersistError;
use super::keys::MARK;
use crate::core::clock::now_ms;

/// A non-idempotent call run without an approval, as its *started* marker
/// describes it: enough to ask a human about it if it is cut off mid-way,
/// whether or not the node ever makes it again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct UnknownCall {
    /// The tool's name (`"effect"` for [`Ctx::effect`](crate::Ctx::effect)).
    pub tool: String,
    /// The call's arguments.
    pub args: Value,
    /// The tool's risk class.
    pub risk: String,
    /// Who the record names as its requester.
    pub requester: String,
    /// How long the record waits for a decision, in milliseconds.
    pub ttl_ms: u64,
}

/// The field of a *started* marker's detail holding its [`UnknownCall`].
pub(crate) const UNKNOWN_CALL: &str = "unknown_call";

/// The id of the `OUTCOME_UNKNOWN` record of run `run` of effect `key`:
/// the same whoever creates it (a re-run of the node, or the sweep after
/// its step), so it is created once.
pub(crate) fn unknown_outcome_id(thread: &str, seq: u64, node: &str, key: &str, run: u32) -> String {
    format!("unk-{}", &crate::tool::args_hash(&serde_json::json!([thread, seq, node, key, run]))[..24])
}

/// The `OUTCOME_UNKNOWN` record asking a human to settle run `run` of
/// effect `key`, which started and left no result.
#[allow(clippy::too_many_arguments)]
pub(crate) fn unknown_outcome_record(
    thread: &str,
    seq: u64,
    node: &str,
    key: &str,
    run: u32,
    call: &UnknownCall,
    reason: String,
    now: u64,
) -> ApprovalRecord {
    ApprovalRecord {
        id: unknown_outcome_id(thread, seq, node, key, run),
        thread: thread.to_string(),
        node: node.to_string(),
        tool: call.tool.clone(),
        args: crate::tool::canonical_json(&call.args),
        args_hash: crate::tool::args_hash(&call.args),
        risk: call.risk.clone(),
        requester: call.requester.clone(),
        reason,
        created_at: now,
        expires_at: now.saturating_add(call.ttl_ms),
        status: ApprovalStatus::OutcomeUnknown,
        decided_by: None,
        decision_note: None,
        conditions: None,
        updated_at: now,
    }
}

/// The marker key `key` names, if it is a *started* marker: the effect's
/// key and the run.
fn started_marker(key: &str) -> Option<(&str, u32)> {
    let (rest, run) = key.rsplit_once(MARK)?;
    let (base, what) = rest.rsplit_once(MARK)?;
    (what == "started").then_some(())?;
    Some((base, run.parse().ok()?))
}

/// The calls of checkpoint `seq`'s journal that started, left neither a result nor an end, and
/// were described by an [`UnknownCall`] (a non-idempotent call run without an approval): for
/// each, an `OUTCOME_UNKNOWN` record for a human to settle and an `effect.outcome_unknown` audit
/// entry, less those already stored (an earlier sweep, or the node's own re-run), so each is
/// written exactly once.
///
/// Only reads: the caller writes them in a commit fenced by its lease (the step's own commit,
/// or the one before a compensation), so a run that lost its thread records nothing, and a
/// crash before that commit leaves the markers open for the next run to find.
///
/// Called once every node of the step finished, so a marker still open is a call the step will
/// not make again.
pub(crate) fn unknown_outcomes(s: &dyn Store, thread: &str, seq: u64) -> Result<UnknownOutcomes, PersistError> {
    let keys = s.effect_keys(thread, seq)?;
    let has = |node: &str, key: &str| keys.iter().any(|k| k.node == node && k.key == key);
    let mut found = UnknownOutcomes::default();
    let mut log = None;
    for marker in &keys {
        let Some((base, run)) = started_marker(&marker.key) else { continue };
        let node = marker.node.as_str();
        let later = format!("{base}{MARK}started{MARK}{}", run.saturating_add(1));
        let ended = format!("{base}{MARK}ended{MARK}{run}");
        if has(node, base) || has(node, &later) || has(node, &ended) {
            continue;
        }
        let Some(detail) = s.effect(marker)? else { continue };
        let detail: Value = serde_json::from_slice(&detail).unwrap_or(Value::Null);
        let Some(call) = detail.get(UNKNOWN_CALL).and_then(|c| serde_json::from_value::<UnknownCall>(c.clone()).ok())
        else {
            continue;
        };
        let now = now_ms();
        let id = unknown_outcome_id(thread, seq, node, base, run);
        if s.approval(&id)?.is_none() {
            let reason = format!(
                "`{base}` started and left no result (the run stopped mid-call), and the step at checkpoint {seq} \
                 finished without making the call again; whether it acted is unknown: settle it"
            );
            found.records.push(unknown_outcome_record(thread, seq, node, base, run, &call, reason, now));
        }
        let log = match &mut log {
            Some(log) => log,
            None => log.insert(s.list_audit(thread)?),
        };
        let logged = log.iter().any(|e| e.kind == "effect.outcome_unknown" && e.detail["approval"] == id.as_str());
        if !logged {
            let detail = serde_json::json!({
                "approval": id,
                "node": node,
                "key": base,
                "seq": seq,
                "run": run,
                "tool": call.tool,
                "idempotency_key": format!("{thread}/{seq}/{node}/{base}"),
                "why": "the call started and left no result, and its step finished without making it again",
            });
            found.audit.push(NewAuditEntry::new(now, "agentflow", "effect.outcome_unknown", detail));
        }
    }
    Ok(found)
}

/// What [`unknown_outcomes`] found to write: `OUTCOME_UNKNOWN` records not stored yet, and
/// `effect.outcome_unknown` audit entries not logged yet.
#[derive(Debug, Default, Clone)]
pub(crate) struct UnknownOutcomes {
    pub(crate) records: Vec<ApprovalRecord>,
    pub(crate) audit: Vec<NewAuditEntry>,
}

impl UnknownOutcomes {
    /// Nothing to write.
    pub(crate) fn is_empty(&self) -> bool {
        self.records.is_empty() && self.audit.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentflow_store::{EffectKey, RedbStore};

    fn marker(node: &str, key: &str, what: &str, run: u32) -> EffectKey {
        EffectKey::new("t", 7, node, format!("{key}{MARK}{what}{MARK}{run}"))
    }

    fn described(tool: &str) -> Vec<u8> {
        let call = UnknownCall {
            tool: tool.into(),
            args: serde_json::json!({ "to": tool }),
            risk: "external".into(),
            requester: "agent:x".into(),
            ttl_ms: 1_000,
        };
        serde_json::to_vec(&serde_json::json!({ "at": 1, UNKNOWN_CALL: call })).unwrap()
    }

    #[test]
    fn only_open_described_markers_become_unknown_outcomes_and_only_once() {
        let store = RedbStore::in_memory().unwrap();
        let s: &dyn Store = &store;
        let put = |k: EffectKey, v: Vec<u8>| s.record_effect(&k, &v).unwrap();
        // Open and described: recorded.
        put(marker("a", "open", "started", 1), described("open"));
        // A result was journaled.
        put(marker("a", "done", "started", 1), described("done"));
        put(EffectKey::new("t", 7, "a", "done"), b"1".to_vec());
        // Run 1 ended and run 2 is open: run 2 is recorded.
        put(marker("a", "again", "started", 1), described("again"));
        put(marker("a", "again", "ended", 1), b"{}".to_vec());
        put(marker("a", "again", "started", 2), described("again"));
        // Ended.
        put(marker("b", "failed", "started", 1), described("failed"));
        put(marker("b", "failed", "ended", 1), b"{}".to_vec());
        // Open, but not described (idempotent, or under an approval).
        put(marker("b", "plain", "started", 1), b"{\"at\":1}".to_vec());
        // Another checkpoint.
        put(EffectKey::new("t", 8, "a", format!("x{MARK}started{MARK}1")), described("other"));

        // What a commit would write, written.
        let record = |s: &dyn Store| {
            let found = unknown_outcomes(s, "t", 7).unwrap();
            let n = found.records.len();
            for r in found.records {
                s.put_approval(r, "agentflow").unwrap();
            }
            for e in found.audit {
                s.append_audit("t", e).unwrap();
            }
            n
        };
        assert_eq!(record(s), 2);
        let mut tools: Vec<(String, String)> =
            s.list_approvals("t").unwrap().into_iter().map(|r| (r.tool, r.id)).collect();
        tools.sort();
        assert_eq!(
            tools,
            [
                ("again".to_string(), unknown_outcome_id("t", 7, "a", "again", 2)),
                ("open".to_string(), unknown_outcome_id("t", 7, "a", "open", 1)),
            ]
        );
        assert!(s.list_approvals("t").unwrap().iter().all(|r| r.status == ApprovalStatus::OutcomeUnknown));
        let unknown = |s: &dyn Store| {
            s.list_audit("t").unwrap().into_iter().filter(|e| e.kind == "effect.outcome_unknown").count()
        };
        assert_eq!(unknown(s), 2);

        // A second sweep (a crash before the step's commit, then the step again) adds nothing.
        assert!(unknown_outcomes(s, "t", 7).unwrap().is_empty());
        assert_eq!(record(s), 0);
        assert_eq!(s.list_approvals("t").unwrap().len(), 2);
        assert_eq!(unknown(s), 2);
    }
}
