//! Plan-and-Execute: a planner writes a plan of 2 to 6 steps, an executor
//! runs them one by one with the node's tools, a replanner revises the rest
//! of the plan after a step fails, and a finalizer answers, but only once it
//! has checked that every step of the plan has a recorded successful result.
//!
//! The executor takes turns like the [ReAct](super::react) loop: a model turn
//! (`executor`) and a tool turn (`tools`), each its own super-step.
//!
//! ```text
//! START -> planner -> executor -+-> tools -------+-> executor  (more turns on this step)
//!                      ^  ^     |                +-> replanner / finalizer (out of turns)
//!                      |  |     +-> executor   (the step worked, more to do)
//!                      |  |     +-> finalizer  (the step worked, it was the last)
//!                      |  |     +-> replanner  (the step failed, replans left)
//!                      |  |     +-> finalizer  (the step failed, no replans left: refused)
//!                      +--+-- replanner -+-> finalizer (the model says stop: checked)
//!                                          finalizer -> END
//! ```
//!
//! Declare one with [`plan_execute_agent!`](crate::plan_execute_agent),
//! naming its tools; the macro expands to a `#[graph]` module, so the tool
//! list is checked at compile time like any node's:
//!
//! ```no_run
//! use std::sync::Arc;
//!
//! use agentflow::model::ChatModel;
//! use agentflow::prebuilt::plan_execute::{PlanExecuteDeps, PlanExecuteState};
//! use agentflow::prelude::*;
//!
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! pub struct Pair {
//!     a: f64,
//!     b: f64,
//! }
//!
//! /// Multiplies two numbers.
//! #[tool(risk = read)]
//! async fn multiply(args: Pair) -> Result<f64, ToolError> {
//!     Ok(args.a * args.b)
//! }
//!
//! agentflow::plan_execute_agent!(pub mod analyst, tools = [multiply], max_steps = 24);
//!
//! async fn ask(model: Arc<dyn ChatModel>) -> Result<Option<String>, agentflow::RunError> {
//!     let deps = PlanExecuteDeps::new(model);
//!     let run = analyst::graph().run(PlanExecuteState::task("price 3 boxes of 12 at 2.5 each"), &deps).await?;
//!     Ok(run.state.answer)
//! }
//! # fn main() {}
//! ```
//!
//! # What is checked, and by whom
//!
//! The model proposes; the code decides:
//! - The plan and every revision are structured output ([`Plan`],
//!   [`Revision`]): a reply that does not parse, has unknown fields, or a
//!   plan outside 2 to 6 steps is fed back to the model as a correction and
//!   asked again, at most [`PlanExecuteDeps::max_reasks`] times; then the
//!   node fails (correctable error).
//! - A step counts as done only if the executor's model ended it with a text
//!   reply *and* its last round of tool calls (if it made any) all succeeded.
//!   A step whose last tool call was refused (`TOOL_ERROR`,
//!   `INVALID_ARGUMENT`, `PERMISSION_DENIED`) failed, whatever the model
//!   says about it.
//! - The finalizer refuses to answer, failing the run, unless every step of
//!   the current plan has a successful result recorded for that exact step.
//!   A replanner that says "finish" while a step is unresolved is refused
//!   there too; the model is not asked for an answer at all.
//! - Every model call goes through [`Ctx::chat`], so the run's budgets
//!   (model calls, tokens) and `max_steps` bound the whole loop, re-asks
//!   included; exhausting one ends the run as `BudgetExhausted`.
//!
//! # Pauses, approvals and side effects
//!
//! A model turn that calls tools is committed (the reply, its call ids and
//! arguments, in [`PlanExecuteState::running`]) before any of those tools
//! runs; the tool turn then runs exactly the committed calls. So when a call
//! pauses for a human's approval (or the process dies in the tool turn),
//! only the tool turn runs again, against the same checkpoint and with the
//! same calls:
//! - the model is not asked again for a turn it already answered, so a
//!   model that hands out new call ids on every reply (as real APIs do)
//!   cannot turn one approval into a new request;
//! - the paused call finds its approval and, once approved, runs;
//! - the calls of that round that already ran (tools that are not `read`)
//!   come back from the effect journal instead of running again, and tool
//!   rounds of earlier turns are in the committed state and never re-run.
//!   `read` tools are not journaled and may run again.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::core::error::NodeError;
use crate::core::message::{Message, Role};
use crate::ctx::Ctx;
use crate::model::{ChatModel, ChatRequest};

/// The fewest steps a plan may have.
pub const MIN_PLAN_STEPS: usize = 2;
/// The most steps a plan (or a revision of its remaining steps) may have.
pub const MAX_PLAN_STEPS: usize = 6;

/// The state of a Plan-and-Execute run.
///
/// Start one with [`PlanExecuteState::task`]. After the run, `answer` is set
/// only if the finalizer accepted the plan's results; `results` holds every
/// step execution (failed ones included) and `messages` the trace of every
/// model turn.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, crate::State)]
pub struct PlanExecuteState {
    /// The task, as the user put it.
    pub task: String,
    /// The current plan. A revision keeps the steps already done and
    /// replaces the failed step and those after it.
    pub plan: Vec<String>,
    /// Index into `plan` of the step to run next (or of the step that failed).
    pub current: usize,
    /// Every step execution in order, successful or not.
    #[reduce(append)]
    pub results: Vec<StepResult>,
    /// Revisions made so far (bounded by [`PlanExecuteDeps::max_replans`]).
    pub replans: u32,
    /// The trace: the task, the plan, each step's conversation with its tool
    /// results, each revision, and the final answer.
    #[reduce(messages)]
    pub messages: Vec<Message>,
    /// The final answer, set only once every step checked out.
    pub answer: Option<String>,
    /// The step being carried out, between the executor's turns; `None`
    /// between steps.
    pub running: Option<StepRun>,
}

impl PlanExecuteState {
    /// A run that starts from a task.
    pub fn task(task: impl Into<String>) -> Self {
        let task = task.into();
        PlanExecuteState { messages: vec![Message::human(task.clone()).with_id("task")], task, ..Self::default() }
    }

    /// The successful result recorded for step `index` of the current plan, if any.
    pub fn result_of(&self, index: usize) -> Option<&StepResult> {
        let step = self.plan.get(index)?;
        self.results.iter().rev().find(|r| r.ok && r.index == index && &r.step == step)
    }

    /// The steps of the current plan without a successful result, with their index.
    pub fn unresolved(&self) -> Vec<(usize, &str)> {
        (0..self.plan.len()).filter(|&i| self.result_of(i).is_none()).map(|i| (i, self.plan[i].as_str())).collect()
    }
}

/// One execution of one step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepResult {
    /// The step's index in the plan it was run from.
    pub index: usize,
    /// The step, as it was run.
    pub step: String,
    /// Whether it succeeded (see the [module docs](self) for the rule).
    pub ok: bool,
    /// The model's result for a success; why it failed otherwise.
    pub output: String,
    /// The bodies of the tool observations of this step, in order.
    pub observations: Vec<Value>,
}

/// A step in progress: what the executor's model turn and tool turn hand
/// each other through the state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRun {
    /// The step's index in the plan.
    pub index: usize,
    /// The step, as it is being run.
    pub step: String,
    /// Model turns taken on it so far.
    pub turns: u32,
    /// The step's conversation so far: the ask, each model turn (with its
    /// tool calls, as committed) and each tool result.
    pub conversation: Vec<Message>,
    /// The bodies of the tool observations so far, in order.
    pub observations: Vec<Value>,
    /// Why the last round of tool calls was refused, if any of them was.
    pub refused: Option<String>,
}

/// What a Plan-and-Execute graph needs to run.
#[derive(Clone)]
pub struct PlanExecuteDeps {
    /// The model, for all four roles.
    pub model: Arc<dyn ChatModel>,
    /// Sent first on every model call, before the role's own instruction.
    pub system: Option<String>,
    /// The most output tokens a model call may use (reserved against the
    /// token budget before each call).
    pub max_output_tokens: Option<u32>,
    /// Re-asks after a malformed plan or revision (default 2).
    pub max_reasks: u32,
    /// Revisions after failed steps (default 2).
    pub max_replans: u32,
    /// Model turns the executor may take on one step (default 4); a step
    /// still calling tools after that failed.
    pub max_turns_per_step: u32,
}

impl std::fmt::Debug for PlanExecuteDeps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlanExecuteDeps")
            .field("model", &self.model.name())
            .field("system", &self.system)
            .field("max_output_tokens", &self.max_output_tokens)
            .field("max_reasks", &self.max_reasks)
            .field("max_replans", &self.max_replans)
            .field("max_turns_per_step", &self.max_turns_per_step)
            .finish()
    }
}

impl PlanExecuteDeps {
    /// A model with the default bounds and no system prompt.
    pub fn new(model: Arc<dyn ChatModel>) -> Self {
        PlanExecuteDeps {
            model,
            system: None,
            max_output_tokens: None,
            max_reasks: 2,
            max_replans: 2,
            max_turns_per_step: 4,
        }
    }

    /// Sets the system prompt.
    #[must_use]
    pub fn with_system(mut self, system: impl Into<String>) -> Self {
        self.system = Some(system.into());
        self
    }

    /// Sets the re-asks after a malformed plan or revision.
    #[must_use]
    pub fn with_max_reasks(mut self, n: u32) -> Self {
        self.max_reasks = n;
        self
    }

    /// Sets the revisions allowed after failed steps.
    #[must_use]
    pub fn with_max_replans(mut self, n: u32) -> Self {
        self.max_replans = n;
        self
    }

    /// Sets the model turns the executor may take on one step.
    #[must_use]
    pub fn with_max_turns_per_step(mut self, n: u32) -> Self {
        self.max_turns_per_step = n.max(1);
        self
    }

    /// Bounds every model call's output.
    #[must_use]
    pub fn with_max_output_tokens(mut self, n: u32) -> Self {
        self.max_output_tokens = Some(n);
        self
    }

    fn request(&self, messages: Vec<Message>) -> ChatRequest {
        let request = ChatRequest::new(messages);
        match self.max_output_tokens {
            Some(max) => request.with_max_output_tokens(max),
            None => request,
        }
    }

    fn system(&self, role: &str) -> Message {
        let text = match &self.system {
            Some(system) => format!("{system}\n\n{role}"),
            None => role.to_string(),
        };
        Message::system(text).with_id("system")
    }
}

/// The planner's reply: the steps to take, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    /// 2 to 6 steps; each one action the executor can carry out with the
    /// tools, in order. A step may use the results of earlier steps.
    #[serde(deserialize_with = "plan_steps")]
    #[schemars(length(min = 2, max = 6))]
    pub steps: Vec<String>,
}

/// The replanner's reply after a failed step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "action", rename_all = "snake_case", deny_unknown_fields)]
pub enum Revision {
    /// Replace the failed step and every step after it with these 1 to 6 steps.
    Revise {
        /// The new remaining steps.
        #[serde(deserialize_with = "revision_steps")]
        #[schemars(length(min = 1, max = 6))]
        steps: Vec<String>,
    },
    /// Stop and answer with the results there are. The finalizer checks
    /// them against the plan and refuses if a step has no result.
    Finish {
        /// Why the model thinks nothing more is needed.
        reason: String,
    },
}

fn plan_steps<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    checked_steps(d, MIN_PLAN_STEPS, "a plan")
}

fn revision_steps<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    checked_steps(d, 1, "a revision")
}

fn checked_steps<'de, D: Deserializer<'de>>(d: D, min: usize, what: &str) -> Result<Vec<String>, D::Error> {
    use serde::de::Error;
    let steps = Vec::<String>::deserialize(d)?;
    if !(min..=MAX_PLAN_STEPS).contains(&steps.len()) {
        return Err(D::Error::custom(format!(
            "{what} has {min} to {MAX_PLAN_STEPS} steps, this one has {}; merge or split steps",
            steps.len()
        )));
    }
    if let Some(i) = steps.iter().position(|s| s.trim().is_empty()) {
        return Err(D::Error::custom(format!("step {} of {what} is empty", i + 1)));
    }
    Ok(steps)
}

/// Where the executor goes after a step, or after a round of tool calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// Ask the executor's model: the next step, or the next turn of this one.
    Executor,
    /// The step failed and replans are left: revise the plan.
    Replanner,
    /// The plan is done, or failed past its replans: let the finalizer judge.
    Finalizer,
}

const PLANNER: &str = "You are the planner. Break the task into 2 to 6 steps, in order. Each step is one \
                       action that can be carried out with the tools listed below; a step may use the \
                       results of earlier steps. Do not carry out the steps yourself.";
const EXECUTOR: &str = "You are the executor of a plan. Carry out only the current step, with the tools \
                        offered. When the step is done, reply with its result in one short sentence and no \
                        tool calls. If a tool refuses, correct the call if you can; otherwise reply with \
                        why the step cannot be done.";
const REPLANNER: &str = "You are the replanner. A step of the plan failed. Either revise the plan: replace \
                         the failed step and the steps after it with 1 to 6 new steps \
                         ({\"action\":\"revise\",\"steps\":[..]}), or, if nothing more can be done, say so \
                         ({\"action\":\"finish\",\"reason\":\"..\"}).";
const FINALIZER: &str = "You are the finalizer. Every step of the plan has been carried out. Answer the task \
                         using only the results below; do not add results of your own.";

fn tool_list<D>(cx: &Ctx<'_, D>) -> String {
    let tools: Vec<String> = cx.tools().iter().map(|t| format!("- {}: {}", t.name(), t.description())).collect();
    if tools.is_empty() { "Tools: none.".into() } else { format!("Tools:\n{}", tools.join("\n")) }
}

fn progress(s: &PlanExecuteState) -> String {
    let mut out = format!("Task: {}\nPlan:", s.task);
    for (i, step) in s.plan.iter().enumerate() {
        out.push_str(&format!("\n{}. {step}", i + 1));
        match s.result_of(i) {
            Some(r) => out.push_str(&format!(" -> done: {}", r.output)),
            None => {
                if let Some(r) = s.results.iter().rev().find(|r| r.index == i && &r.step == step) {
                    out.push_str(&format!(" -> FAILED: {}", r.output));
                }
            }
        }
    }
    out
}

/// The planner's turn: asks for a [`Plan`] (re-asking on a malformed one)
/// and starts the executor on its first step.
pub async fn plan_turn(
    s: &PlanExecuteState,
    cx: &Ctx<'_, PlanExecuteDeps>,
) -> Result<PlanExecuteStateUpdate, NodeError> {
    let deps = cx.deps();
    let messages = vec![
        deps.system(&format!("{PLANNER}\n{}", tool_list(cx))),
        Message::human(format!("Task: {}", s.task)).with_id("plan-ask"),
    ];
    let plan = cx.structured::<Plan, _>(&*deps.model, deps.request(messages), deps.max_reasks).await?.value;
    let trace = Message::ai(serde_json::to_string(&plan).unwrap_or_default()).with_id("plan");
    Ok(PlanExecuteState::update().plan(plan.steps).current(0).messages(vec![trace]))
}

/// The executor's model turn: asks the model for the next move on step
/// `current`, offering the node's tools. A reply with tool calls is
/// committed as it is (with its call ids) and the route is `None`: go to
/// the tool turn ([`execute_tools_turn`]). A reply without tool calls ends
/// the step, records its result, and says where to go next.
pub async fn execute_turn(
    s: &PlanExecuteState,
    cx: &Ctx<'_, PlanExecuteDeps>,
) -> Result<(PlanExecuteStateUpdate, Option<Route>), NodeError> {
    let deps = cx.deps();
    let Some(step) = s.plan.get(s.current) else {
        return Err(NodeError::fatal(format!(
            "the executor has no step {} in a plan of {}",
            s.current.saturating_add(1),
            s.plan.len()
        )));
    };
    // One execution of a step records one result: its number names the trace.
    let run = s.results.len();
    let mut trace = Vec::new();
    let mut running = match &s.running {
        Some(r) if r.index == s.current && r.step == *step => r.clone(),
        _ => {
            let ask = Message::human(format!(
                "{}\n\nCurrent step ({} of {}): {step}",
                progress(s),
                s.current + 1,
                s.plan.len()
            ))
            .with_id(format!("exec-{run}-ask"));
            trace.push(ask.clone());
            StepRun {
                index: s.current,
                step: step.clone(),
                turns: 0,
                conversation: vec![ask],
                observations: Vec::new(),
                refused: None,
            }
        }
    };
    let mut messages = Vec::with_capacity(running.conversation.len() + 1);
    messages.push(deps.system(EXECUTOR));
    messages.extend(running.conversation.iter().cloned());
    let request = deps.request(messages).with_tools(cx.tool_specs());
    let reply = cx.chat(&*deps.model, &request).await?;
    let calls = !reply.tool_calls.is_empty();
    let text = reply.text.trim().to_string();
    let message = reply.into_message(format!("exec-{run}-ai-{}", running.turns));
    running.turns = running.turns.saturating_add(1);
    trace.push(message.clone());
    if calls {
        running.conversation.push(message);
        let update = PlanExecuteState::update().running(Some(running)).messages(trace);
        return Ok((update, None));
    }
    let outcome = match (running.refused.take(), text.is_empty()) {
        (Some(refusal), true) => Err(refusal),
        (Some(refusal), false) => Err(format!("{refusal}; {text}")),
        (None, true) => Err("the model ended the step with an empty reply".into()),
        (None, false) => Ok(text),
    };
    let (update, route) = finish_step(s, deps, running, outcome, trace);
    Ok((update, Some(route)))
}

/// The executor's tool turn: runs the tool calls of the step's last model
/// turn through the gateway, exactly as they were committed (same call ids,
/// same arguments), and goes back to the model turn. A step whose model is
/// still calling tools after [`PlanExecuteDeps::max_turns_per_step`] model
/// turns fails here.
///
/// When a call pauses for an approval, this turn is what runs again on
/// resume, against the same checkpoint: the calls that ran before the pause
/// come back from the effect journal (tools that are not `read`), and the
/// paused call finds its approval. The model is not asked again.
pub async fn execute_tools_turn(
    s: &PlanExecuteState,
    cx: &Ctx<'_, PlanExecuteDeps>,
) -> Result<(PlanExecuteStateUpdate, Route), NodeError> {
    let deps = cx.deps();
    let Some(mut running) = s.running.clone() else {
        return Err(NodeError::fatal("the executor's tool turn ran with no step in progress"));
    };
    let Some(calls) = running.conversation.last().filter(|m| m.role == Role::Ai).map(|m| m.tool_calls.clone()) else {
        return Err(NodeError::fatal("the executor's tool turn ran before the model asked for a tool"));
    };
    let run = s.results.len();
    let mut trace = Vec::with_capacity(calls.len());
    let mut refused: Option<String> = None;
    for (call, observation) in calls.iter().zip(cx.call_tools(&calls).await?) {
        if let Some(code) = observation.code() {
            let detail = observation.body.get("detail").and_then(Value::as_str).unwrap_or_default();
            let code = serde_json::to_value(code).ok().and_then(|c| c.as_str().map(str::to_string));
            let refusal = format!("`{}` refused ({}): {detail}", call.name, code.unwrap_or_default());
            refused = Some(match refused.take() {
                Some(earlier) => format!("{earlier}; {refusal}"),
                None => refusal,
            });
        }
        running.observations.push(observation.body.clone());
        let message = observation.into_message().with_id(format!("exec-{run}-tool-{}", call.id));
        running.conversation.push(message.clone());
        trace.push(message);
    }
    running.refused = refused;
    if running.turns >= deps.max_turns_per_step {
        let outcome =
            Err(format!("still calling tools after {} model turns; the step was not finished", running.turns));
        return Ok(finish_step(s, deps, running, outcome, trace));
    }
    Ok((PlanExecuteState::update().running(Some(running)).messages(trace), Route::Executor))
}

/// Records the result of the step in progress, clears it, and picks the next node.
fn finish_step(
    s: &PlanExecuteState,
    deps: &PlanExecuteDeps,
    running: StepRun,
    outcome: Result<String, String>,
    trace: Vec<Message>,
) -> (PlanExecuteStateUpdate, Route) {
    let ok = outcome.is_ok();
    let result = StepResult {
        index: running.index,
        step: running.step,
        ok,
        output: outcome.unwrap_or_else(|e| e),
        observations: running.observations,
    };
    let last = running.index + 1 == s.plan.len();
    let (current, route) = match (ok, last) {
        (true, false) => (running.index + 1, Route::Executor),
        (true, true) => (running.index + 1, Route::Finalizer),
        (false, _) if s.replans < deps.max_replans => (running.index, Route::Replanner),
        (false, _) => (running.index, Route::Finalizer),
    };
    let update = PlanExecuteState::update().results(vec![result]).current(current).running(None).messages(trace);
    (update, route)
}

/// The replanner's turn: asks for a [`Revision`] of the failed step and
/// those after it. Returns the update and whether to go on executing
/// (`false`: the model asked to finish; the finalizer will check that).
pub async fn replan_turn(
    s: &PlanExecuteState,
    cx: &Ctx<'_, PlanExecuteDeps>,
) -> Result<(PlanExecuteStateUpdate, bool), NodeError> {
    let deps = cx.deps();
    let messages = vec![
        deps.system(&format!("{REPLANNER}\n{}", tool_list(cx))),
        Message::human(format!(
            "{}\n\nStep {} failed. Revise the steps from step {} on, or finish.",
            progress(s),
            s.current.saturating_add(1),
            s.current.saturating_add(1)
        ))
        .with_id(format!("replan-{}-ask", s.replans)),
    ];
    let revision = cx.structured::<Revision, _>(&*deps.model, deps.request(messages), deps.max_reasks).await?.value;
    let trace =
        Message::ai(serde_json::to_string(&revision).unwrap_or_default()).with_id(format!("replan-{}", s.replans));
    let update = PlanExecuteState::update().replans(s.replans + 1).messages(vec![trace]);
    Ok(match revision {
        Revision::Revise { steps } => {
            let mut plan = s.plan[..s.current.min(s.plan.len())].to_vec();
            plan.extend(steps);
            (update.plan(plan), true)
        }
        Revision::Finish { .. } => (update, false),
    })
}

/// The finalizer's turn: refuses (a fatal error, the run fails) unless every
/// step of the plan has a recorded successful result; then asks the model
/// for the answer from those results.
pub async fn finalize_turn(
    s: &PlanExecuteState,
    cx: &Ctx<'_, PlanExecuteDeps>,
) -> Result<PlanExecuteStateUpdate, NodeError> {
    let deps = cx.deps();
    let unresolved = s.unresolved();
    if s.plan.is_empty() || !unresolved.is_empty() {
        let steps: Vec<String> = unresolved
            .iter()
            .map(|(i, step)| {
                let why = s
                    .results
                    .iter()
                    .rev()
                    .find(|r| r.index == *i && r.step == *step)
                    .map_or_else(|| "never ran".to_string(), |r| format!("failed: {}", r.output));
                format!("step {} `{step}` ({why})", i + 1)
            })
            .collect();
        return Err(NodeError::fatal(format!(
            "refusing to answer: {} of the plan has no successful result ({} of {} replans used): {}",
            if steps.len() == 1 { "a step" } else { "some steps" },
            s.replans,
            deps.max_replans,
            if steps.is_empty() { "the plan is empty".to_string() } else { steps.join("; ") }
        )));
    }
    let messages = vec![deps.system(FINALIZER), Message::human(progress(s)).with_id("final-ask")];
    let reply = cx.chat(&*deps.model, &deps.request(messages)).await?;
    let answer = reply.text.trim().to_string();
    if answer.is_empty() {
        return Err(NodeError::correctable("the finalizer's model gave an empty answer"));
    }
    let trace = Message::ai(answer.clone()).with_id("final");
    Ok(PlanExecuteState::update().answer(Some(answer)).messages(vec![trace]))
}

/// Declares a Plan-and-Execute agent: a `#[graph]` module `name` with the
/// nodes `planner`, `executor` (the executor's model turns), `tools` (its
/// tool turns), `replanner` and `finalizer`. The executor's nodes are
/// allowed exactly the listed tools (checked at compile time); the planner
/// and replanner list them too, only to describe them to the model.
/// `graph()` in it returns `CompiledGraph<PlanExecuteState, PlanExecuteDeps>`.
///
/// `max_steps` bounds the super-steps: one for the planner, one per model
/// turn of the executor and one per round of tool calls, one per revision,
/// one for the finalizer. A plan step done with one round of tool calls
/// takes three.
///
/// See the [module docs](crate::prebuilt::plan_execute) for how to declare and run one.
#[macro_export]
macro_rules! plan_execute_agent {
    ($vis:vis mod $name:ident, tools = [$($tool:ident),* $(,)?], max_steps = $max:literal $(,)?) => {
        #[$crate::graph(
            state = $crate::prebuilt::plan_execute::PlanExecuteState,
            deps = $crate::prebuilt::plan_execute::PlanExecuteDeps,
            start = planner,
            max_steps = $max
        )]
        $vis mod $name {
            #[allow(unused_imports)]
            use super::*;

            #[$crate::node(goto = [executor], tools = [$($tool),*])]
            async fn planner(
                s: &$crate::prebuilt::plan_execute::PlanExecuteState,
                cx: &$crate::Ctx<$crate::prebuilt::plan_execute::PlanExecuteDeps>,
            ) -> ::core::result::Result<$crate::Step<$crate::prebuilt::plan_execute::PlanExecuteState>, $crate::NodeError> {
                let update = $crate::prebuilt::plan_execute::plan_turn(s, cx).await?;
                ::core::result::Result::Ok(goto!(executor, update))
            }

            #[$crate::node(goto = [tools, executor, replanner, finalizer], tools = [$($tool),*])]
            async fn executor(
                s: &$crate::prebuilt::plan_execute::PlanExecuteState,
                cx: &$crate::Ctx<$crate::prebuilt::plan_execute::PlanExecuteDeps>,
            ) -> ::core::result::Result<$crate::Step<$crate::prebuilt::plan_execute::PlanExecuteState>, $crate::NodeError> {
                use $crate::prebuilt::plan_execute::Route;
                let (update, route) = $crate::prebuilt::plan_execute::execute_turn(s, cx).await?;
                ::core::result::Result::Ok(match route {
                    ::core::option::Option::None => goto!(tools, update),
                    ::core::option::Option::Some(Route::Executor) => goto!(executor, update),
                    ::core::option::Option::Some(Route::Replanner) => goto!(replanner, update),
                    ::core::option::Option::Some(Route::Finalizer) => goto!(finalizer, update),
                })
            }

            #[$crate::node(goto = [executor, replanner, finalizer], tools = [$($tool),*])]
            async fn tools(
                s: &$crate::prebuilt::plan_execute::PlanExecuteState,
                cx: &$crate::Ctx<$crate::prebuilt::plan_execute::PlanExecuteDeps>,
            ) -> ::core::result::Result<$crate::Step<$crate::prebuilt::plan_execute::PlanExecuteState>, $crate::NodeError> {
                use $crate::prebuilt::plan_execute::Route;
                let (update, route) = $crate::prebuilt::plan_execute::execute_tools_turn(s, cx).await?;
                ::core::result::Result::Ok(match route {
                    Route::Executor => goto!(executor, update),
                    Route::Replanner => goto!(replanner, update),
                    Route::Finalizer => goto!(finalizer, update),
                })
            }

            #[$crate::node(goto = [executor, finalizer], tools = [$($tool),*])]
            async fn replanner(
                s: &$crate::prebuilt::plan_execute::PlanExecuteState,
                cx: &$crate::Ctx<$crate::prebuilt::plan_execute::PlanExecuteDeps>,
            ) -> ::core::result::Result<$crate::Step<$crate::prebuilt::plan_execute::PlanExecuteState>, $crate::NodeError> {
                let (update, go_on) = $crate::prebuilt::plan_execute::replan_turn(s, cx).await?;
                ::core::result::Result::Ok(if go_on { goto!(executor, update) } else { goto!(finalizer, update) })
            }

            #[$crate::node(goto = [END])]
            async fn finalizer(
                s: &$crate::prebuilt::plan_execute::PlanExecuteState,
                cx: &$crate::Ctx<$crate::prebuilt::plan_execute::PlanExecuteDeps>,
            ) -> ::core::result::Result<$crate::Step<$crate::prebuilt::plan_execute::PlanExecuteState>, $crate::NodeError> {
                let update = $crate::prebuilt::plan_execute::finalize_turn(s, cx).await?;
                ::core::result::Result::Ok(goto!(END, update))
            }
        }
    };
}
