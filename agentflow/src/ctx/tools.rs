//! The one path from a model's tool call to a tool's body.
//!
//! Every call is checked in this order: the node's allowed set (a tool not
//! in `tools = [..]` is never run), the tool-call budget, the arguments, the
//! [`Policy`](crate::tool::Policy), and, where the policy asks for it, a human's
//! approval recorded in the store. There is no other way to reach
//! [`Tool::invoke`] from a run.

use serde_json::Value;

use super::Ctx;
use super::effects::{Journaled, Subject, Uncertain};
use crate::core::error::NodeError;
use crate::core::message::{ToolCall, ToolSpec};
use crate::durable::{MovedCall, Settling};
use crate::event::Activity;
use crate::telemetry::{attrs, capture, content, names, spans};
use crate::tool::{Code, Decision, Observation, Tool, ToolCx, ToolError, args_hash};
use agentflow_store::{ApprovalRecord, ApprovalStatus};
use tracing::Instrument;

impl<D> Ctx<'_, D> {
    /// The tools this node may use (its `tools = [..]` list).
    pub fn tools(&self) -> crate::tool::ToolSet {
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
        let args = match crate::core::encode::to_value(&args, "args", crate::durable::MAX_JSON_DEPTH) {
            Err(e @ crate::durable::ValueError::Unserializable { .. }) => {
                return Err(NodeError::fatal(format!("arguments for `{}` do not serialise: {e}", tool.name())));
            }
            other => other,
        };
        let n = {
            let mut signal = self.signal.lock().unwrap_or_else(|p| p.into_inner());
            signal.direct_calls += 1;
            signal.direct_calls
        };
        let id = crate::durable::direct_call_id(self.node, tool.name(), n);
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
        // A call of a model's reply journaled before the thread moved to this version of its
        // graph runs as this version names it, or not at all.
        let moved = self.moved_call(call).await?;
        let call = moved.as_ref().and_then(|m| m.to.as_ref()).unwrap_or(call);
        let allowed = self.tools.iter().map(|t| t.name()).find(|t| *t == call.name);
        let span = spans::execute_tool(allowed.map(|tool| (tool, call.id.as_str())));
        let gated = self.gate(call, moved.as_ref()).instrument(span.clone()).await;
        self.end_tool_span(&span, call, &gated);
        let tool = allowed.unwrap_or(spans::NOT_ALLOWED);
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

    /// Records how a tool call ended on its span: an error's class, and with contents captured,
    /// the masked arguments and result.
    fn end_tool_span(&self, span: &tracing::Span, call: &ToolCall, gated: &Result<Observation, NodeError>) {
        if span.is_disabled() {
            return;
        }
        match gated {
            Ok(observation) => {
                if let Some(code) = observation.code() {
                    spans::failed(span, code.as_str());
                }
            }
            // A pause for a person is no failure.
            Err(e) if e.class == crate::core::error::ErrorClass::NeedsInput => {}
            Err(e) => spans::failed(span, e.class),
        }
        if capture::enabled() {
            attrs::set_text(span, names::TOOL_CALL_ARGUMENTS, content::json_text(&call.arguments, self.masked));
            if let Ok(observation) = gated {
                attrs::set_text(span, names::TOOL_CALL_RESULT, content::json_text(&observation.body, self.masked));
            }
        }
    }

    /// `moved`: what the thread's move to this graph version made of the call, if anything.
    async fn gate(&self, call: &ToolCall, moved: Option<&MovedCall>) -> Result<Observation, NodeError> {
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
        if let Some(withdrawn) = moved.filter(|m| m.withdrawn.is_some()) {
            return Ok(withdrawn.observation());
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
        let checked = crate::durable::check_json(&call.arguments, "args").map_err(|e| e.to_string());
        if let Err(e) = checked.and_then(|()| tool.validate(&call.arguments).map_err(|e| e.0)) {
            return deny(Code::InvalidArgument, e);
        }
        // A call that ran before the thread's move replays its journaled result (its approval,
        // if it ran under one, was used under the tool's old name). Only a result the journal
        // holds for this very call (this map instance's) is replayed: any other goes through the
        // policy and its approval.
        if moved.is_some_and(|m| m.ran)
            && let Some(replayed) = self.replayed_move(tool, call).await?
        {
            // A call that changes anything replays through the journal (which holds its result),
            // so its saga entry is logged as for any replay.
            if tool.risk() == crate::tool::Risk::Read {
                return Ok(replayed);
            }
            return self.execute(tool, call, call.arguments.clone(), None).await.map(|(obs, _)| obs);
        }
        match self.scope.gateway.policy.decide(tool.name(), tool.risk()) {
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
    pub(super) async fn execute(
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
        let journaled = tool.risk() != crate::tool::Risk::Read || approval.is_some();
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
        // Whether the tool ran here, or the journal answered for it.
        let ran = std::sync::atomic::AtomicBool::new(false);
        let ran_ref = &ran;
        let invoke = |idempotency_key: String| async move {
            ran_ref.store(true, std::sync::atomic::Ordering::Relaxed);
            let deps: &crate::tool::AnyDeps = self.deps;
            let tcx = ToolCx::new(&call.id, &idempotency_key, node, deps);
            let tcx = tcx.with_remote(self.scope.gateway.remote.as_deref());
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
                // A read (or an idempotent call) changed nothing another run would repeat: it runs
                // again. Any other call, journaled, is settled by a human (see `journaled`).
                Err(ToolError::OutcomeUnknown(msg)) => {
                    let message = format!("tool `{}`: no answer came back: {msg}", tool.name());
                    if tool.idempotent() || tool.risk() == crate::tool::Risk::Read {
                        return Err(NodeError::transient(message));
                    }
                    if self.journal.is_none() {
                        return Err(NodeError::fatal(format!(
                            "{message}; whether it acted is unknown, and a run without a store cannot ask a human"
                        )));
                    }
                    self.signal.lock().unwrap_or_else(|p| p.into_inner()).outcome_unknown = true;
                    Err(NodeError::transient(message))
                }
                // A read changed nothing: the model hears why and may ask for less (a search
                // whose results are too large); nothing is journaled.
                Err(ToolError::Unrecorded(why)) if tool.risk() == crate::tool::Risk::Read => Ok(Err(format!(
                    "the result of `{}` cannot be kept ({why}); nothing was stored: ask for less",
                    tool.name()
                ))),
                // The call ran: journal it as run (never run again) and log it for compensation.
                Err(ToolError::Unrecorded(why)) => {
                    let message = format!(
                        "tool `{}` ran, but its result cannot be journaled ({why}); it will not run again: return a \
                         value that JSON holds exactly",
                        tool.name()
                    );
                    if let Some(journal) = self.journal {
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
                    _ if tool.idempotent() || tool.risk() == crate::tool::Risk::Read => Uncertain::Rerun,
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
                            .map(|(r, _)| super::effects::set_aside(self.node, &r.id));
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
            && tool.risk() != crate::tool::Risk::Read
            && let (Some(journal), Some(args), Ok(value)) = (self.journal, &forward_args, &result)
            && let Some(entry) =
                crate::saga::step_entry(journal, root_step, self.node, &key, tool, &call.id, args, Ok(value))
        {
            crate::saga::record_step(journal, entry).await?;
        }
        let span = tracing::Span::current();
        if !span.is_disabled() {
            span.record(names::TOOL_REPLAYED, !ran.load(std::sync::atomic::Ordering::Relaxed));
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
