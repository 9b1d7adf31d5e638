//! The one path from a model's tool call to a tool's body.
//!
//! Every call is checked in this order: the node's allowed set (a tool not
//! in `tools = [..]` is never run), the tool-call budget, the arguments, the
//! [`Policy`](super::Policy), and, where the policy asks for it, a human's
//! approval recorded in the store. There is no other way to reach
//! [`Tool::invoke`] from a run.

use serde_json::{Value, json};

use super::{Code, Decision, Observation, OnReject, Tool, ToolCx, ToolError, args_hash, canonical_json};
use crate::context::{Ctx, Journaled, Subject, Uncertain};
use crate::error::{ErrorClass, NodeError};
use crate::event::Activity;
use crate::message::{ToolCall, ToolSpec};
use crate::persist::{Journal, Settling, now_ms};
use agentflow_store::{
    ApprovalError, ApprovalPatch, ApprovalRecord, ApprovalStatus, ApprovalTransition, EffectKey, Store,
};

impl<D> Ctx<'_, D> {
    /// The tools this node may use (its `tools = [..]` list).
    pub fn tools(&self) -> super::ToolSet {
        self.tools
    }

    /// The specs of this node's tools, for a model request: exactly the node's set.
    pub fn tool_specs(&self) -> Vec<ToolSpec> {
        self.tools.iter().map(|t| t.spec()).collect()
    }
}

// The gateway hands a tool the graph's deps as `&dyn Any`, hence `'static`.
impl<D: Sync + 'static> Ctx<'_, D> {
    /// Calls one of this node's tools from the node's own code, through the
    /// same gateway as a model's calls (validation, policy, approval).
    /// `#[graph]` checks at compile time that `tool` is in the node's
    /// `tools = [..]` list. The call id is the tool's name and its position
    /// among this attempt's direct calls, stable when the node re-runs.
    pub async fn run_tool<T: Tool, A: serde::Serialize>(&self, tool: T, args: A) -> Result<Observation, NodeError> {
        let args = match crate::persist::encode::to_value(&args, "args", crate::persist::MAX_JSON_DEPTH) {
            Err(e @ crate::persist::ValueError::Unserializable { .. }) => {
                return Err(NodeError::fatal(format!("arguments for `{}` do not serialise: {e}", tool.name())));
            }
            other => other,
        };
        let n = {
            let mut signal = self.signal.lock().unwrap_or_else(|p| p.into_inner());
            signal.direct_calls += 1;
            signal.direct_calls
        };
        let id = format!("{}-{}-{n}", self.node, tool.name());
        match args {
            Ok(args) => self.call_tool(&ToolCall::new(id, tool.name(), args)).await,
            // A NaN or nesting too deep is refused like a model's bad
            // arguments, before the tool runs (and counted as a call).
            Err(e) => {
                if let Err(which) = self.scope.meter.tool_call() {
                    return Err(self.exhausted(which));
                }
                Ok(Observation::error(&id, tool.name(), Code::InvalidArgument, e.to_string()))
            }
        }
    }

    /// Runs the model's tool calls through the gateway, in order.
    pub async fn call_tools(&self, calls: &[ToolCall]) -> Result<Vec<Observation>, NodeError> {
        let mut out = Vec::with_capacity(calls.len());
        for call in calls {
            out.push(self.call_tool(call).await?);
        }
        Ok(out)
    }

    /// Runs one tool call through the gateway. Refusals the model can act on
    /// (invalid arguments, a tool error, a denial, a rejection) come back as
    /// an [`Observation`]; a pause for approval, an exhausted budget or a
    /// fatal tool error come back as the node's error (propagate with `?`).
    pub async fn call_tool(&self, call: &ToolCall) -> Result<Observation, NodeError> {
        let began = std::time::Instant::now();
        let gated = self.gate(call).await;
        let tool = self.tools.iter().map(|t| t.name()).find(|t| *t == call.name).unwrap_or("(not allowed)");
        let result = match &gated {
            Ok(observation) => observation.code().map_or("ok", |code| code.as_str()),
            Err(_) => "halted",
        };
        ::metrics::counter!(crate::metrics::TOOL_CALLS, "tool" => tool, "result" => result).increment(1);
        ::metrics::histogram!(crate::metrics::TOOL_SECONDS, "tool" => tool).record(began.elapsed().as_secs_f64());
        let observation = gated?;
        (self.scope.activity)(Activity::ToolCall {
            node: self.node,
            call_id: call.id.clone(),
            tool: call.name.clone(),
            result: match observation.code() {
                None => "ok".to_string(),
                Some(code) => serde_json::to_value(code).map_or_else(|_| "error".into(), |c| c.to_string()),
            },
        });
        Ok(observation)
    }

    async fn gate(&self, call: &ToolCall) -> Result<Observation, NodeError> {
        let deny = |code, detail: String| Ok(Observation::error(&call.id, &call.name, code, detail));
        // Every call the model asks for counts, refused ones included: a
        // model that keeps asking for a tool it may not use is stopped too.
        if let Err(which) = self.scope.meter.tool_call() {
            return Err(self.exhausted(which));
        }
        // A call id names one call of this node run. A second call under an
        // id already used would find the first call's journaled result (or
        // its approval), so it is refused, never answered with that result.
        let fresh = self.signal.lock().unwrap_or_else(|p| p.into_inner()).call_ids.insert(call.id.clone());
        if !fresh {
            return deny(
                Code::InvalidArgument,
                format!(
                    "the call id `{}` was already used by another call in this node run; `{}` did not run. \
                     Give every tool call its own id",
                    call.id, call.name
                ),
            );
        }
        let Some(tool) = self.tools.iter().copied().find(|t| t.name() == call.name) else {
            let allowed: Vec<&str> = self.tools.iter().map(|t| t.name()).collect();
            return deny(
                Code::PermissionDenied,
                format!(
                    "tool `{}` is not allowed in node `{}`; allowed: {}",
                    call.name,
                    self.node,
                    if allowed.is_empty() { "none".to_string() } else { allowed.join(", ") }
                ),
            );
        };
        // Too deep is refused whatever the tool's own check (a hand-written `Tool` may skip it).
        let checked = crate::persist::check_json(&call.arguments, "args").map_err(|e| e.to_string());
        if let Err(e) = checked.and_then(|()| tool.validate(&call.arguments).map_err(|e| e.0)) {
            return deny(Code::InvalidArgument, e);
        }
        match self.scope.policy.decide(tool.name(), tool.risk()) {
            Decision::Deny => {
                deny(Code::PermissionDenied, format!("the policy denies `{}` ({} risk)", tool.name(), tool.risk()))
            }
            Decision::Run => self.execute(tool, call, call.arguments.clone(), None).await.map(|(obs, _)| obs),
            Decision::NeedsApproval => self.with_approval(tool, call).await,
        }
    }

    /// Runs the tool. A call that changes anything (and a read the policy
    /// asks a human about, so its approval is used once) goes through the effect
    /// journal, keyed by tool, call id and arguments, so a re-run node does
    /// not repeat it; a call cut off mid-way is re-run only if the tool is
    /// idempotent, else a human settles it. `approval`: the record the call
    /// runs under, and whether it was just taken from APPROVED (a human said
    /// to run it, so an earlier cut-off run of it is closed, not asked about).
    /// Runs the call through the effect journal. Under an approval
    /// (`approval`: the record, and whether this call claims it: it is
    /// APPROVED), the claim rides the transaction of the *started* marker and
    /// the approval's `EXECUTING -> SUCCEEDED`/`FAILED` the transaction of the
    /// result; the `bool` says the latter happened (or was tried and refused),
    /// or that the approval stays as it is (the breaker refused the call).
    async fn execute(
        &self,
        tool: &'static dyn Tool,
        call: &ToolCall,
        args: Value,
        approval: Option<(&ApprovalRecord, bool)>,
    ) -> Result<(Observation, bool), NodeError> {
        // The tool's circuit breaker, if one guards it: refused calls end here, the tool not run
        // and the approval, if any, left as it is (`true`: nothing for the caller to move).
        // Every call that changes anything goes through the effect journal, and a read under an
        // approval too, so the approval is claimed before it runs and used once (a re-run of the
        // node replays its result).
        let journaled = tool.risk() != super::Risk::Read || approval.is_some();
        let held = match self.breaker_admit(tool, call, journaled).await? {
            Ok(held) => held,
            Err(refused) => return Ok((refused, true)),
        };
        let held = held.as_ref();
        let key = self.call_key(tool, call);
        let (node, root_step) = (self.node, self.scope.saga_root_step);
        // A call that names a compensation is recorded in the saga log once it completed.
        let forward_args = tool.compensation().map(|_| args.clone());
        let (key_ref, forward_ref) = (&key, &forward_args);
        let invoke = |idempotency_key: String| async move {
            let deps: &super::AnyDeps = self.deps;
            let tcx = ToolCx::new(&call.id, &idempotency_key, node, deps);
            // A call cut off before it ends (a node timeout) counts as a failure.
            let watch = held.map(|held| (held, self.breaker_watch(tool, held)));
            let outcome = tool.invoke(args, &tcx).await;
            if let Some((held, watch)) = watch {
                let failed = matches!(outcome, Err(ToolError::Transient(_) | ToolError::Fatal(_)));
                self.breaker_report(tool, held, watch, failed).await;
            }
            match outcome {
                Ok(value) => Ok(Ok(value)),
                Err(ToolError::Correctable(msg)) => Ok(Err(msg)),
                Err(ToolError::Transient(msg)) => Err(NodeError::transient(format!("tool `{}`: {msg}", tool.name()))),
                Err(ToolError::Fatal(msg)) => Err(NodeError::fatal(format!("tool `{}`: {msg}", tool.name()))),
                // The call ran: journal it as run (never run again) and log it for compensation.
                Err(ToolError::Unrecorded(why)) => {
                    let message = format!(
                        "tool `{}` ran, but its result cannot be journaled ({why}); it will not run again: return a \
                         value that JSON holds exactly",
                        tool.name()
                    );
                    if let Some(journal) = self.journal.filter(|_| tool.risk() != super::Risk::Read) {
                        // Whatever fails from here, the call is never taken for one that did not run.
                        self.signal.lock().unwrap_or_else(|p| p.into_inner()).ran_unrecorded = true;
                        // Logged for compensation (for a human: no arguments can be built) in the
                        // same write.
                        let step = forward_ref.as_ref().and_then(|args| {
                            crate::saga::step_entry(journal, root_step, node, key_ref, tool, &call.id, args, Err(&why))
                        });
                        journal.record_unjournaled(node, key_ref, &message, step).await?;
                    }
                    Err(NodeError::fatal(message))
                }
            }
        };
        // Whether the call's saga entry (if it names a compensation) went with its journaled result.
        let (mut settled, mut logged) = (false, false);
        let result: Result<Value, String> = match self.journal {
            Some(journal) if journaled => {
                let uncertain = match approval {
                    // A read cut off mid-way changed nothing: it runs again.
                    _ if tool.idempotent() || tool.risk() == super::Risk::Read => Uncertain::Rerun,
                    Some((record, _)) => Uncertain::Ask(Subject::Approval(Box::new(record.clone()))),
                    None => Uncertain::Ask(Subject::New {
                        tool: tool.name().to_string(),
                        args: call.arguments.clone(),
                        risk: tool.risk().to_string(),
                    }),
                };
                // The approval's moves, if the call runs under one it may still move.
                let moving =
                    approval.filter(|(r, _)| matches!(r.status, ApprovalStatus::Approved | ApprovalStatus::Executing));
                let claim = moving.filter(|(_, release)| *release).map(|(r, _)| {
                    self.approval_move(&r.id, ApprovalStatus::Approved, ApprovalStatus::Executing, "executing")
                });
                // Written with the result: the approval's final status, and the saga log's entry
                // of a call that names a compensation (so a recorded call is always undone).
                let settle = |result: &Result<Value, String>| Settling {
                    transition: moving.map(|(r, _)| {
                        let to = if result.is_ok() { ApprovalStatus::Succeeded } else { ApprovalStatus::Failed };
                        self.approval_move(&r.id, ApprovalStatus::Executing, to, "executed")
                    }),
                    audit: match (result, &forward_args) {
                        (Ok(value), Some(args)) => {
                            crate::saga::step_entry(journal, root_step, node, &key, tool, &call.id, args, Ok(value))
                        }
                        _ => None,
                    },
                };
                match self.journaled(journal, &key, claim, uncertain, settle, invoke).await? {
                    Journaled::Done(result, done) => {
                        (settled, logged) = (done, done);
                        result
                    }
                    // A human settled the cut-off call as done: its result is journaled with its
                    // saga entry, as a result the call returned would be.
                    Journaled::Succeeded(value, _) => {
                        let step = forward_args.as_ref().and_then(|args| {
                            crate::saga::step_entry(journal, root_step, node, &key, tool, &call.id, args, Ok(&value))
                        });
                        // Under an approval not yet used (the call was cut off earlier while it ran
                        // without one): set aside in the same write, so a retry replays the result.
                        let transition = approval
                            .filter(|(r, release)| *release && r.status == ApprovalStatus::Approved)
                            .map(|(r, _)| crate::context::set_aside(self.node, &r.id));
                        let settle = |_: &Result<Value, String>| Settling { transition, audit: step };
                        logged = true;
                        journal.record_settling(self.node, &key, Ok::<_, String>(value), settle).await?
                    }
                    Journaled::Failed(why) => Err(format!("`{}` did not complete: {why}", tool.name())),
                    Journaled::ClaimLost(current) => {
                        let id = approval.map(|(r, _)| r.id.as_str()).unwrap_or_default();
                        let detail = format!("the approval `{id}` was already used ({current:?})");
                        return Ok((Observation::error(&call.id, &call.name, Code::ApprovalInvalid, detail), true));
                    }
                }
            }
            Some(journal) => invoke(journal.idempotency_key(self.node, &key)).await?,
            None => invoke(format!("{}/{key}", self.node)).await?,
        };
        // A result replayed from the journal: one journaled without its saga entry (by a release
        // before the entry rode with the result) gets it now. A result journaled here has it.
        if !logged
            && tool.risk() != super::Risk::Read
            && let (Some(journal), Some(args), Ok(value)) = (self.journal, &forward_args, &result)
            && let Some(entry) =
                crate::saga::step_entry(journal, root_step, self.node, &key, tool, &call.id, args, Ok(value))
        {
            crate::saga::record_step(journal, entry).await?;
        }
        let mut obs = match result {
            Ok(value) => Observation::ok(&call.id, tool.name(), value),
            Err(msg) => Observation::error(&call.id, tool.name(), Code::ToolError, msg),
        };
        if let (Some(conditions), Value::Object(body)) =
            (approval.and_then(|(r, _)| r.conditions.as_ref()), &mut obs.body)
        {
            body.insert("conditions".into(), conditions.clone());
        }
        Ok((obs, settled))
    }

    /// An approval compare-and-set made by this node's executor.
    fn approval_move(&self, id: &str, from: ApprovalStatus, to: ApprovalStatus, note: &str) -> ApprovalTransition {
        let patch = ApprovalPatch {
            note: Some(note.to_string()),
            ..ApprovalPatch::by(format!("executor:{}", self.node), now_ms())
        };
        ApprovalTransition { id: id.to_string(), from, to, patch }
    }

    async fn with_approval(&self, tool: &'static dyn Tool, call: &ToolCall) -> Result<Observation, NodeError> {
        let deny = |code, detail: String| Ok(Observation::error(&call.id, &call.name, code, detail));
        let Some(journal) = self.journal else {
            return deny(
                Code::PermissionDenied,
                format!("`{}` needs a human's approval, and this run has no store to record it in", tool.name()),
            );
        };
        let hash = args_hash(&call.arguments);
        let id = approval_id(journal, self.node, self.instance(), tool.name(), &call.id, &hash);
        let record = blocking(journal, {
            let id = id.clone();
            move |s| s.approval(&id).map_err(|e| e.to_string())
        })
        .await?;
        let Some(record) = record else {
            return self.request_approval(journal, tool, call, id, hash).await;
        };
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
            ApprovalStatus::Pending => Err(self.pause_for_approval(approval_payload(&record))),
            ApprovalStatus::Rejected => {
                let reason = record.decision_note.clone().unwrap_or_else(|| "no reason given".into());
                let who = record.decided_by.clone().unwrap_or_default();
                match self.scope.on_reject {
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
            expires_at: now.saturating_add(u64::try_from(self.scope.approval_ttl.as_millis()).unwrap_or(u64::MAX)),
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
    let key = match instance {
        None => json!([journal.thread, journal.seq, node, tool, call_id, hash]),
        Some(i) => json!([journal.thread, journal.seq, node, i, tool, call_id, hash]),
    };
    format!("apr-{}", &args_hash(&key)[..24])
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

impl<D> Ctx<'_, D> {
    /// The effect-journal key of a non-read call: the tool, the call id and the
    /// arguments, so a journaled result is only ever replayed for the same call,
    /// and for a map worker's instance, the instance (its calls share ids with
    /// the other instances').
    ///
    /// The call id comes from the model and may hold any character. A NUL byte, which a
    /// PostgreSQL `text` key cannot hold, is written escaped (`\0`, and `\` as `\\`) under
    /// the prefix `tool0:`, which no plain key has: every store keeps the key, and two
    /// distinct ids never share one.
    pub(super) fn call_key(&self, tool: &dyn Tool, call: &ToolCall) -> String {
        let hash = &args_hash(&call.arguments)[..16];
        let key = if call.id.contains('\0') {
            format!("tool0:{}:{}:{hash}", tool.name(), escape_nul(&call.id))
        } else {
            format!("tool:{}:{}:{hash}", tool.name(), call.id)
        };
        self.instance_key(key)
    }
}

/// `text` with its NUL bytes written `\0` (and its backslashes `\\`), for the keys and names a
/// store keeps in text columns, which refuse NUL on PostgreSQL.
pub(super) fn escape_nul(text: &str) -> String {
    text.replace('\\', "\\\\").replace('\0', "\\0")
}

/// Whether the result of the call journaled under `key` ([`Ctx::call_key`]) is
/// in the effect journal (where `execute` puts it).
pub(super) async fn journaled(journal: &Journal, node: &str, key: String) -> Result<bool, NodeError> {
    let key = EffectKey { thread: journal.thread.clone(), seq: journal.seq, node: node.to_string(), key };
    blocking(journal, move |s| s.effect(&key).map(|r| r.is_some()).map_err(|e| e.to_string())).await
}

fn approval_payload(record: &ApprovalRecord) -> Value {
    json!({
        "approval": record.id,
        "tool": record.tool,
        "args": serde_json::from_str::<Value>(&record.args).unwrap_or(Value::Null),
        "risk": record.risk,
        "reason": record.reason,
        "expires_at": record.expires_at,
    })
}

async fn blocking<T: Send + 'static>(
    journal: &Journal,
    f: impl FnOnce(&dyn Store) -> Result<T, String> + Send + 'static,
) -> Result<T, NodeError> {
    crate::persist::blocking(&journal.store, f)
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
