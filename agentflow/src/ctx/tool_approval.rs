//! A tool call the policy asks a human about: its approval requested, checked
//! against the call, and used once.

use serde_json::{Value, json};

use super::Ctx;
use crate::core::error::{ErrorClass, NodeError};
use crate::core::message::ToolCall;
use crate::durable::{CallAt, Journal, approval_id_at, approval_payload, now_ms, reasked_id};
use crate::event::Activity;
use crate::tool::{Code, Observation, OnReject, Tool, args_hash, canonical_json};
use agentflow_store::{
    ApprovalError, ApprovalPatch, ApprovalRecord, ApprovalStatus, ApprovalTransition, EffectKey, Store,
};

impl<D: Sync + 'static> Ctx<'_, D> {
    /// An approval compare-and-set made by this node's executor.
    pub(super) fn approval_move(
        &self,
        id: &str,
        from: ApprovalStatus,
        to: ApprovalStatus,
        note: &str,
    ) -> ApprovalTransition {
        let patch = ApprovalPatch {
            note: Some(note.to_string()),
            ..ApprovalPatch::by(format!("executor:{}", self.node), now_ms())
        };
        ApprovalTransition { id: id.to_string(), from, to, patch }
    }

    pub(super) async fn with_approval(
        &self,
        tool: &'static dyn Tool,
        call: &ToolCall,
    ) -> Result<Observation, NodeError> {
        let deny = |code, detail: String| Ok(Observation::error(&call.id, &call.name, code, detail));
        let Some(journal) = self.journal else {
            return deny(
                Code::PermissionDenied,
                format!("`{}` needs a human's approval, and this run has no store to record it in", tool.name()),
            );
        };
        let hash = args_hash(&call.arguments);
        let mut id = approval_id(journal, self.node, self.instance(), tool.name(), &call.id, &hash);
        let Some(mut record) = lookup(journal, &id).await? else {
            return self.request_approval(journal, tool, call, id, hash).await;
        };
        // Asked (or decided, not yet used) for another risk class than the tool's now (a newer
        // version of the graph changed it): whoever may decide this class is asked, under the
        // call's second id, which a thread's move may have asked under already. Cancelled, the
        // call may have been asked again there by a move. A rejection stands whatever the class.
        let risk = tool.risk().to_string();
        let ask_again = match record.status {
            ApprovalStatus::Pending | ApprovalStatus::Approved => record.risk != risk,
            ApprovalStatus::Cancelled => true,
            _ => false,
        };
        if ask_again {
            let again = reasked_id(&id, &risk);
            match lookup(journal, &again).await? {
                Some(found) => (id, record) = (again, found),
                None if record.status != ApprovalStatus::Cancelled => {
                    return self.request_approval(journal, tool, call, again, hash).await;
                }
                None => {}
            }
        }
        if let Err(why) = self.check_binding(journal, tool, &record, &id, &hash).await? {
            return deny(
                Code::ApprovalInvalid,
                format!("the approval `{id}` was not granted for this call ({why}); `{}` did not run", tool.name()),
            );
        }
        let now = now_ms();
        match record.status {
            ApprovalStatus::Pending if now >= record.expires_at => {
                let _ =
                    self.transition(journal, &id, ApprovalStatus::Pending, ApprovalStatus::Expired, "expired").await?;
                deny(
                    Code::ApprovalExpired,
                    format!("the approval `{id}` expired before a decision; the call did not run"),
                )
            }
            ApprovalStatus::Pending => {
                crate::telemetry::spans::await_approval(tool.name(), &id).in_scope(|| ());
                Err(self.pause_for_approval(approval_payload(&record)))
            }
            ApprovalStatus::Rejected => {
                let reason = record.decision_note.clone().unwrap_or_else(|| "no reason given".into());
                let who = record.decided_by.clone().unwrap_or_default();
                match self.scope.gateway.on_reject {
                    OnReject::Replan => deny(Code::Rejected, format!("rejected by {who}: {reason}")),
                    OnReject::EndRun => {
                        Err(NodeError::fatal(format!("the call to `{}` was rejected by {who}: {reason}", tool.name())))
                    }
                }
            }
            ApprovalStatus::Expired => {
                deny(Code::ApprovalExpired, format!("the approval `{id}` expired; the call did not run"))
            }
            // Cancelled with a result journaled for this call (set aside when a human settled the
            // call's earlier run as done): the result is replayed, as for any call that ran.
            ApprovalStatus::Cancelled if journaled(journal, self.node, self.call_key(tool, call)).await? => {
                self.run_approved(journal, tool, call, record).await
            }
            ApprovalStatus::Cancelled => deny(Code::ApprovalInvalid, format!("the approval `{id}` was cancelled")),
            ApprovalStatus::Approved if now >= record.expires_at => {
                let _ =
                    self.transition(journal, &id, ApprovalStatus::Approved, ApprovalStatus::Expired, "expired").await?;
                deny(
                    Code::ApprovalExpired,
                    format!("the approval `{id}` expired before it was used; the call did not run"),
                )
            }
            ApprovalStatus::Approved
            | ApprovalStatus::Executing
            | ApprovalStatus::OutcomeUnknown
            | ApprovalStatus::Succeeded
            | ApprovalStatus::Failed => self.run_approved(journal, tool, call, record).await,
            // A status this version does not know: never run on it.
            other => deny(
                Code::ApprovalInvalid,
                format!(
                    "the approval `{id}` has status {other}, which this executor does not know; the call did not run"
                ),
            ),
        }
    }

    /// Whether `record` was granted for exactly this call: this thread, this
    /// node, this tool, and the arguments the call carries (or the edit of
    /// them an approver recorded). The id already hashes all of these; the
    /// fields are checked too, so a record that does not match its id (a
    /// collision, a record written by hand into the store) never runs.
    async fn check_binding(
        &self,
        journal: &Journal,
        tool: &'static dyn Tool,
        record: &ApprovalRecord,
        id: &str,
        call_hash: &str,
    ) -> Result<Result<(), String>, NodeError> {
        if let Err(why) = binding_mismatch(record, id, &journal.thread, self.node, tool.name()) {
            return Ok(Err(why));
        }
        if record.args_hash == call_hash {
            return Ok(Ok(()));
        }
        // An edited approval stores the edited arguments; the arguments it was
        // requested for are in the `approval.requested` audit entry.
        let (thread, id) = (record.thread.clone(), record.id.clone());
        let requested = blocking(journal, move |s| {
            let log = s.list_audit(&thread).map_err(|e| e.to_string())?;
            Ok(log
                .into_iter()
                .find(|e| e.kind == "approval.requested" && e.detail.get("approval") == Some(&json!(id)))
                .and_then(|e| e.detail.get("args_hash").and_then(Value::as_str).map(str::to_string)))
        })
        .await?;
        Ok(match requested {
            Some(requested) if requested == call_hash => Ok(()),
            _ => Err("it was requested for other arguments".to_string()),
        })
    }

    async fn request_approval(
        &self,
        journal: &Journal,
        tool: &'static dyn Tool,
        call: &ToolCall,
        id: String,
        hash: String,
    ) -> Result<Observation, NodeError> {
        // The requester is the thread's owner (the executor carries the
        // stored owner into a resumed run). Without one, the person who
        // started the run could approve their own call.
        if self.scope.owner.is_empty() {
            return Err(NodeError::fatal(format!(
                "`{}` needs a human's approval, but the run has no owner to request it for; \
                 start the thread with `.owner(\"..\")` naming the agent or user it acts for \
                 (nobody may approve a call they requested)",
                tool.name()
            )));
        }
        let requester = self.scope.owner.clone();
        let now = now_ms();
        let record = ApprovalRecord {
            id: id.clone(),
            thread: journal.thread.clone(),
            node: self.node.to_string(),
            tool: tool.name().to_string(),
            args: canonical_json(&call.arguments),
            args_hash: hash,
            risk: tool.risk().to_string(),
            requester,
            reason: format!("`{}` is {} tool; the policy asks a human first", tool.name(), with_article(tool.risk())),
            created_at: now,
            // A time to live past what a u64 of millis holds never ends (not wrapped to none).
            expires_at: now
                .saturating_add(u64::try_from(self.scope.gateway.approval_ttl.as_millis()).unwrap_or(u64::MAX)),
            status: ApprovalStatus::Pending,
            decided_by: None,
            decision_note: None,
            conditions: None,
            updated_at: now,
        };
        let payload = approval_payload(&record);
        // Fenced by the run's lease and its parents': a run that lost its thread requests nothing.
        if journal.create_record(record).await? {
            ::metrics::counter!(crate::metrics::APPROVALS_REQUESTED, "tool" => tool.name()).increment(1);
        }
        crate::telemetry::spans::await_approval(tool.name(), &id).in_scope(|| ());
        (self.scope.activity)(Activity::ApprovalRequested { node: self.node, approval: id, tool: tool.name().into() });
        Err(self.pause_for_approval(payload))
    }

    /// Executes an approved call once: the arguments must hash to the
    /// approved (or edited) ones, and APPROVED -> EXECUTING is a
    /// compare-and-set, so one executor takes the approval. The call then
    /// runs under the effect journal: a re-run replays its result, and a run
    /// cut off mid-call is not repeated without a human's decision (unless
    /// the tool is idempotent).
    async fn run_approved(
        &self,
        journal: &Journal,
        tool: &'static dyn Tool,
        call: &ToolCall,
        record: ApprovalRecord,
    ) -> Result<Observation, NodeError> {
        let deny = |code, detail: String| Ok(Observation::error(&call.id, &call.name, code, detail));
        let approved: Value = match serde_json::from_str(&record.args) {
            Ok(v) => v,
            Err(e) => return deny(Code::ApprovalInvalid, format!("the approved arguments do not parse: {e}")),
        };
        if args_hash(&approved) != record.args_hash {
            return deny(
                Code::ApprovalInvalid,
                format!("the arguments stored with approval `{}` do not match its hash; refusing to run", record.id),
            );
        }
        if let Err(e) = tool.validate(&approved) {
            return deny(Code::InvalidArgument, format!("the approved arguments do not validate: {}", e.0));
        }
        if record.status == ApprovalStatus::Failed && !journaled(journal, self.node, self.call_key(tool, call)).await? {
            // Single use: the approved call ran and failed (or a human settled
            // its unknown outcome as failed); a re-run of the node may replay
            // a recorded result but never runs it again.
            let note = record.decision_note.as_deref().map(|n| format!(" ({n})")).unwrap_or_default();
            return deny(
                Code::ApprovalInvalid,
                format!("the approval `{}` was used and the call failed{note}; ask for a new approval", record.id),
            );
        }
        if record.status == ApprovalStatus::Approved
            && let Err(why) = journal.decision_recorded(&record).await?
        {
            return deny(Code::ApprovalInvalid, why);
        }
        // From here until the outcome is recorded, a node timeout or the
        // run's deadline waits instead of cutting the call off.
        let _shield = self.shield();
        // APPROVED: this call claims it (APPROVED -> EXECUTING), durably and
        // with the call's started marker, before the tool runs; another
        // executor that claimed it first makes this a refusal.
        // SUCCEEDED on replay: the journal returns the recorded result.
        // EXECUTING with no result: the call was cut off mid-way; an
        // idempotent tool runs again with the same key, any other waits for
        // a human (OUTCOME_UNKNOWN).
        let release = record.status == ApprovalStatus::Approved;
        let result = self.execute(tool, call, approved, Some((&record, release))).await;
        let to = match &result {
            // The result and the approval's final status went in one transaction.
            Ok((_, true)) => return result.map(|(obs, _)| obs),
            Ok((obs, false)) if obs.is_ok() => ApprovalStatus::Succeeded,
            // A passing fault: the node's retry runs the call again under this
            // approval, still EXECUTING (the journal knows this run ended); if the node
            // finishes without one that succeeds, the step's commit makes it FAILED.
            Err(e) if e.class == ErrorClass::Transient => {
                // Only a call the journal knows ended with its error (not one cut off, or whose
                // marker could not be written: that one may have acted).
                let ended = std::mem::take(&mut self.signal.lock().unwrap_or_else(|p| p.into_inner()).ended_with_error);
                if ended && !journal.lost_lease() {
                    let mut failed = journal.failed_approvals.lock().unwrap_or_else(|p| p.into_inner());
                    if !failed.contains(&record.id) {
                        failed.push(record.id.clone());
                    }
                }
                return result.map(|(obs, _)| obs);
            }
            // A pause: the outcome is unknown and a human settles it.
            Err(e) if e.class == ErrorClass::NeedsInput => return result.map(|(obs, _)| obs),
            _ => ApprovalStatus::Failed,
        };
        // A run that lost the thread concludes nothing: its error may be the refusal itself,
        // not the call's (the new holder may be making the call right now).
        if matches!(record.status, ApprovalStatus::Approved | ApprovalStatus::Executing) && !journal.lost_lease() {
            let _ = self.transition(journal, &record.id, ApprovalStatus::Executing, to, "executed").await?;
        }
        result.map(|(obs, _)| obs)
    }

    async fn transition(
        &self,
        journal: &Journal,
        id: &str,
        from: ApprovalStatus,
        to: ApprovalStatus,
        note: &str,
    ) -> Result<Result<ApprovalRecord, String>, NodeError> {
        let (id, actor, note) = (id.to_string(), format!("executor:{}", self.node), note.to_string());
        blocking(journal, move |s| {
            let patch = ApprovalPatch { note: Some(note), ..ApprovalPatch::by(actor, now_ms()) };
            Ok(match s.transition_approval(&id, from, to, patch) {
                Ok(r) => Ok(r),
                Err(ApprovalError::AlreadyDecided { current, .. }) => Err(format!("{current:?}")),
                Err(e) => return Err(e.to_string()),
            })
        })
        .await
    }
}

/// Deterministic per (thread, checkpoint, node, map-worker instance, tool,
/// call, arguments): the same call re-run after a resume finds its record; a
/// call to another tool or with other arguments, under the same call id, does
/// not, nor does the same call made by another instance of the worker.
fn approval_id(journal: &Journal, node: &str, instance: Option<u32>, tool: &str, call_id: &str, hash: &str) -> String {
    approval_id_at(&journal.thread, journal.seq, &CallAt { node, instance, tool, call_id, hash })
}

/// The approval stored under `id`.
async fn lookup(journal: &Journal, id: &str) -> Result<Option<ApprovalRecord>, NodeError> {
    let id = id.to_string();
    blocking(journal, move |s| s.approval(&id).map_err(|e| e.to_string())).await
}

/// Which field of `record` does not belong to the call that looked it up.
fn binding_mismatch(record: &ApprovalRecord, id: &str, thread: &str, node: &str, tool: &str) -> Result<(), String> {
    let fields = [
        ("id", record.id.as_str(), id),
        ("thread", &record.thread, thread),
        ("node", &record.node, node),
        ("tool", &record.tool, tool),
    ];
    match fields.iter().find(|(_, stored, wanted)| stored != wanted) {
        Some((field, stored, wanted)) => Err(format!("its {field} is `{stored}`, the call's is `{wanted}`")),
        None => Ok(()),
    }
}

/// Whether the result of the call journaled under `key` ([`Ctx::call_key`]) is
/// in the effect journal (where `execute` puts it).
pub(super) async fn journaled(journal: &Journal, node: &str, key: String) -> Result<bool, NodeError> {
    let key = EffectKey { thread: journal.thread.clone(), seq: journal.seq, node: node.to_string(), key };
    blocking(journal, move |s| s.effect(&key).map(|r| r.is_some()).map_err(|e| e.to_string())).await
}

async fn blocking<T: Send + 'static>(
    journal: &Journal,
    f: impl FnOnce(&dyn Store) -> Result<T, String> + Send + 'static,
) -> Result<T, NodeError> {
    crate::durable::blocking(&journal.store, f)
        .await
        .map_err(|e| NodeError::transient(e.to_string()))?
        .map_err(|e| NodeError::transient(format!("approval store: {e}")))
}

/// `a read`, `an irreversible`: the risk class with its article, for messages people read.
fn with_article(risk: crate::tool::Risk) -> String {
    let name = risk.to_string();
    let article = if name.starts_with(['a', 'e', 'i', 'o', 'u']) { "an" } else { "a" };
    format!("{article} {name}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> ApprovalRecord {
        ApprovalRecord {
            id: "apr-1".into(),
            thread: "t".into(),
            node: "n".into(),
            tool: "refund_order".into(),
            args: "{}".into(),
            args_hash: args_hash(&json!({})),
            risk: "irreversible".into(),
            requester: "owner".into(),
            reason: String::new(),
            created_at: 0,
            expires_at: 1,
            status: ApprovalStatus::Approved,
            decided_by: None,
            decision_note: None,
            conditions: None,
            updated_at: 0,
        }
    }

    #[test]
    fn a_record_is_refused_for_any_other_thread_node_tool_or_id() {
        let r = record();
        assert_eq!(binding_mismatch(&r, "apr-1", "t", "n", "refund_order"), Ok(()));
        for (id, thread, node, tool, field) in [
            ("apr-2", "t", "n", "refund_order", "id"),
            ("apr-1", "u", "n", "refund_order", "thread"),
            ("apr-1", "t", "m", "refund_order", "node"),
            ("apr-1", "t", "n", "delete_account", "tool"),
        ] {
            let why = binding_mismatch(&r, id, thread, node, tool).unwrap_err();
            assert!(why.starts_with(&format!("its {field} is")), "{why}");
        }
    }
}
