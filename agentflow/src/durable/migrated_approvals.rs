//! The approvals and questions of a thread moved to a newer version of its graph: what it waits
//! for renamed, an answer recorded before the move recorded again for the question as it is
//! asked after it, and each open approval asked again for the tool as the new version names it
//! (its arguments mapped, its decision carried over) or cancelled, with why.

use std::collections::BTreeSet;

use agentflow_store::{ApprovalPatch, ApprovalRecord, ApprovalStatus, ApprovalTransition, NewAuditEntry};
use serde_json::{Value, json};

use super::approval_key::{CallAt, approval_id_at, approval_payload, direct_call_id, reasked_id};
use super::error::{ResumeError, ThreadError};
use super::graph_migration::{ACTOR, Plan};
use super::migration_chain::ToolFate;
use crate::interrupt::{ANSWER_KIND, Pending, PendingKind};
use crate::tool::{args_hash, canonical_json};

/// How many direct calls of one tool a node's attempt is searched for when the id of the call an
/// approval was asked for is recovered.
const DIRECT_CALLS_SEARCHED: u32 = 256;

impl<'a> Plan<'a> {
    /// What the thread waits for, its nodes renamed and its approvals moved.
    /// An answer already recorded for a question is recorded again for the question as it is
    /// asked at the new checkpoint `seq`, by the person who gave it.
    pub(super) fn questions(
        &mut self,
        pending: Vec<Pending>,
        jseq: u64,
        seq: u64,
    ) -> Result<Vec<Pending>, ThreadError> {
        let mut kept = Vec::new();
        for mut p in pending {
            let old = p.node.clone();
            let asked = p.question_id();
            let Some(now) = self.rename(&old)? else {
                self.cancel_asked(&p, "its node was mapped to END");
                continue;
            };
            p.node = now;
            if let Some(answer) = self.found.answers.get(&asked) {
                let mut detail = answer.detail.clone();
                if let Some(d) = detail.as_object_mut() {
                    d.insert("checkpoint".into(), json!(seq));
                    d.insert("node".into(), json!(p.node));
                    d.insert("question".into(), json!(p.question_id()));
                }
                self.answers.push(NewAuditEntry::new(self.now, &answer.actor, ANSWER_KIND, detail));
            }
            if p.kind == PendingKind::Approval {
                match self.approval(&p, &old, jseq)? {
                    Some(payload) => p.payload = payload,
                    None => continue,
                }
            }
            kept.push(p);
        }
        Ok(kept)
    }

    /// The stored approval a question of kind `Approval` waits on, if it is still open.
    fn asked(&self, p: &Pending) -> Option<&'a ApprovalRecord> {
        self.waited_on(p).filter(|a| matches!(a.status, ApprovalStatus::Pending | ApprovalStatus::Approved))
    }

    /// The stored approval a question of kind `Approval` waits on, if it is open or was
    /// rejected (a rejection the node has not seen yet: it carries over).
    fn waited_on(&self, p: &Pending) -> Option<&'a ApprovalRecord> {
        let id = p.payload.get("approval").and_then(Value::as_str)?;
        self.found.approvals.iter().find(|a| a.id == id).filter(|a| {
            matches!(a.status, ApprovalStatus::Pending | ApprovalStatus::Approved | ApprovalStatus::Rejected)
        })
    }

    /// Cancels the open approval `p` waits on, if any, noting `why`.
    fn cancel_asked(&mut self, p: &Pending, why: &str) {
        if p.kind != PendingKind::Approval {
            return;
        }
        if let Some(record) = self.asked(p) {
            self.cancel(record, why);
        }
    }

    /// Cancels `record`, noting `why`, and lists it as cancelled in the audit entry.
    fn cancel(&mut self, record: &ApprovalRecord, why: &str) {
        self.withdraw(record, why);
        self.cancelled.push(record.id.clone());
    }

    /// Cancels `record`, noting `why`.
    fn withdraw(&mut self, record: &ApprovalRecord, why: &str) {
        let note = format!(
            "cancelled by the migration of the thread from version {} to version {} of graph `{}`: {why}",
            self.chain.from,
            self.chain.to(),
            self.chain.release.id
        );
        self.transitions.push(ApprovalTransition {
            id: record.id.clone(),
            from: record.status,
            to: ApprovalStatus::Cancelled,
            patch: ApprovalPatch { note: Some(note), ..ApprovalPatch::by(ACTOR, self.now) },
        });
    }

    /// The payload of question `p` (asked by node `old`) for its approval after the move; `None`
    /// when the approval was cancelled and the thread no longer waits on it.
    fn approval(&mut self, p: &Pending, old: &str, jseq: u64) -> Result<Option<Value>, ThreadError> {
        let Some(record) = self.waited_on(p) else { return Ok(Some(p.payload.clone())) };
        let rejected = record.status == ApprovalStatus::Rejected;
        let (name, maps) = match self.chain.tool(&record.tool) {
            ToolFate::Cancel => {
                self.tools.insert(record.tool.clone(), "cancel".into());
                // A rejected call stays rejected; nothing asks for it again.
                if !rejected {
                    self.cancel(record, &format!("version {} no longer calls `{}`", self.chain.to(), record.tool));
                }
                return Ok(None);
            }
            ToolFate::Keep(name, maps) => (name, maps),
        };
        if name == record.tool && maps.is_empty() && p.node == old {
            // The same call under the same id; its decision holds within its risk class only.
            let risk = (self.tool_risk)(&name).unwrap_or_else(|| record.risk.clone());
            if risk == record.risk || rejected {
                return Ok(Some(p.payload.clone()));
            }
            return Ok(self.ask_again(record, risk));
        }
        if name != record.tool {
            self.tools.insert(record.tool.clone(), name.clone());
        }
        let mut args: Value = serde_json::from_str(&record.args).map_err(|e| self.decode("approval arguments", e))?;
        for map in &maps {
            args = map(args).map_err(|reason| ResumeError::ArgsRefused {
                thread: self.thread().to_string(),
                approval: record.id.clone(),
                tool: name.clone(),
                from: self.chain.from,
                to: self.chain.to(),
                reason,
            })?;
        }
        let requested = self.found.requested.get(&record.id).unwrap_or(&record.args_hash).clone();
        let Some(call_id) = self.call_id(record, p.instance, old, jseq, &requested) else {
            if !rejected {
                self.cancel(record, "the call it was asked for could not be found again; the node asks anew");
            }
            return Ok(None);
        };
        let renamed_call = match call_id.strip_prefix(&format!("{old}-{}-", record.tool)) {
            Some(n) if n.parse::<u32>().is_ok() => format!("{}-{name}-{n}", p.node),
            _ => call_id,
        };
        let hash = args_hash(&args);
        let call = CallAt { node: &p.node, instance: p.instance, tool: &name, call_id: &renamed_call, hash: &hash };
        let id = approval_id_at(self.thread(), jseq, &call);
        let risk = (self.tool_risk)(&name).unwrap_or_else(|| record.risk.clone());
        // An approval carries over only to a call of the same risk class: whoever may approve a
        // call of another class (another role, a second person) is asked again. A rejection
        // carries over whatever the class: it lets nothing run.
        let risk_changed = (risk != record.risk).then(|| format!("risk changed from {} to {}", record.risk, risk));
        let carried = match record.status {
            ApprovalStatus::Approved => risk_changed.is_none(),
            ApprovalStatus::Rejected => true,
            _ => false,
        };
        let moved = ApprovalRecord {
            id: id.clone(),
            node: p.node.clone(),
            tool: name.clone(),
            args: canonical_json(&args),
            args_hash: hash,
            risk,
            status: ApprovalStatus::Pending,
            decided_by: None,
            decision_note: None,
            conditions: None,
            updated_at: self.now,
            ..record.clone()
        };
        // A decision carries over: the call is the same but for names, and arguments mapped by a
        // declared function (the developer declared them equivalent). It is recorded for the
        // question as it is asked now, by the person who took it, its note saying where from.
        if carried {
            let by = record.decided_by.clone().unwrap_or_else(|| ACTOR.to_string());
            let patch = ApprovalPatch {
                decided_by: record.decided_by.clone(),
                note: Some(self.carried_note(record)),
                conditions: record.conditions.clone(),
                ..ApprovalPatch::by(by, self.now)
            };
            self.transitions.push(ApprovalTransition {
                id: id.clone(),
                from: ApprovalStatus::Pending,
                to: record.status,
                patch,
            });
        }
        let mut audited = json!({
            "from": record.id,
            "to": id,
            "tool": record.tool,
            "to_tool": name,
            "args_hash": record.args_hash,
            "to_args_hash": moved.args_hash,
            "decision": if carried { Value::from(record.status.as_str()) } else { Value::Null },
            "decided_by": if carried { json!(record.decided_by) } else { Value::Null },
        });
        if let (Some(reason), Some(entry)) = (risk_changed.filter(|_| !carried), audited.as_object_mut()) {
            entry.insert("reason".into(), json!(reason));
        }
        self.approvals.push(audited);
        let payload = approval_payload(&moved);
        self.new_approvals.push(moved);
        // A rejection stays as it was taken, beside its carried copy.
        if !rejected {
            self.withdraw(record, &format!("asked again as `{id}` for `{name}`"));
        }
        Ok(Some(payload))
    }

    /// Asks again for the call `record` was asked for, now that its tool (same name, same node,
    /// same arguments) is of risk class `risk`: a new pending approval under the call's second
    /// id ([`reasked_id`]), audited with the old and new class, `record` withdrawn. `None` when
    /// the call was asked again for that class before (a class changed back and forth): then
    /// `record` is cancelled and the call is refused when its node runs.
    fn ask_again(&mut self, record: &ApprovalRecord, risk: String) -> Option<Value> {
        let why = format!("risk changed from {} to {}", record.risk, risk);
        let first = self.found.approvals.iter().find(|a| reasked_id(&a.id, &record.risk) == record.id);
        let id = reasked_id(first.map_or(&record.id, |a| &a.id), &risk);
        if self.found.approvals.iter().any(|a| a.id == id) {
            self.cancel(record, &format!("{why}, and the call was asked for that class before"));
            return None;
        }
        let moved = ApprovalRecord {
            id: id.clone(),
            reason: format!(
                "`{}` is of risk class {risk} now (was {}); the policy asks a human first",
                record.tool, record.risk
            ),
            risk,
            status: ApprovalStatus::Pending,
            decided_by: None,
            decision_note: None,
            conditions: None,
            updated_at: self.now,
            ..record.clone()
        };
        self.approvals.push(json!({
            "from": record.id,
            "to": id,
            "tool": record.tool,
            "to_tool": record.tool,
            "args_hash": record.args_hash,
            "to_args_hash": moved.args_hash,
            "decision": Value::Null,
            "decided_by": Value::Null,
            "reason": why,
        }));
        self.withdraw(record, &format!("asked again as `{id}`: {why}"));
        let payload = approval_payload(&moved);
        self.new_approvals.push(moved);
        Some(payload)
    }

    /// The note of a decision carried over from `record`: the decider's own note, and that the
    /// decision was carried by the move (`carried_from`: the approval it was taken on).
    fn carried_note(&self, record: &ApprovalRecord) -> String {
        let carried = format!(
            "carried_from: `{}`, decided before the thread moved from version {} to version {} of graph `{}`",
            record.id,
            self.chain.from,
            self.chain.to(),
            self.chain.release.id
        );
        match record.decision_note.as_deref().filter(|n| !n.is_empty()) {
            Some(note) => format!("{note} ({carried})"),
            None => carried,
        }
    }

    /// The id of the call `record` was asked for by node `old` (map instance `instance`): among
    /// the ids a direct call of its tool takes and the strings its node's journaled replies
    /// hold, the one its id was made from.
    fn call_id(
        &self,
        record: &ApprovalRecord,
        instance: Option<u32>,
        old: &str,
        jseq: u64,
        requested: &str,
    ) -> Option<String> {
        // Asked under the call's id, or asked again under its second id for another risk class.
        let matches = |call_id: &str| {
            let call = CallAt { node: old, instance, tool: &record.tool, call_id, hash: requested };
            let id = approval_id_at(self.thread(), jseq, &call);
            id == record.id || reasked_id(&id, &record.risk) == record.id
        };
        if let Some(n) = (1..=DIRECT_CALLS_SEARCHED).find(|n| matches(&direct_call_id(old, &record.tool, *n))) {
            return Some(direct_call_id(old, &record.tool, n));
        }
        let mut seen = BTreeSet::new();
        for (key, value) in &self.found.effects {
            if key.node != old {
                continue;
            }
            let Ok(reply) = serde_json::from_slice::<Value>(value) else { continue };
            strings(&reply, &mut seen);
        }
        seen.into_iter().find(|s| matches(s))
    }
}

/// Every string in `value`, into `out`.
fn strings(value: &Value, out: &mut BTreeSet<String>) {
    match value {
        Value::String(s) => {
            out.insert(s.clone());
        }
        Value::Array(items) => items.iter().for_each(|v| strings(v, out)),
        Value::Object(map) => map.values().for_each(|v| strings(v, out)),
        _ => {}
    }
}
