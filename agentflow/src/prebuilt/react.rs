//! The ReAct tool loop: a model node and a tool node, alternating until the
//! model answers without calling a tool, a budget ends the run, or the model
//! repeats a call that already gave the same result.
//!
//! Declare one with [`react_agent!`](crate::react_agent), naming its tools;
//! the macro expands to a `#[graph]` module, so the tool list is checked at
//! compile time like any node's:
//!
//! ```
//! use std::sync::Arc;
//!
//! use agentflow::model::ScriptedModel;
//! use agentflow::prebuilt::react::{ReactDeps, ReactState};
//! use agentflow::prelude::*;
//!
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! pub struct Pair {
//!     a: f64,
//!     b: f64,
//! }
//!
//! /// Adds two numbers.
//! #[tool(risk = read)]
//! async fn add(args: Pair) -> Result<f64, ToolError> {
//!     Ok(args.a + args.b)
//! }
//!
//! agentflow::react_agent!(pub mod calculator, tools = [add], max_steps = 8);
//!
//! # fn main() {
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! // A scripted test double stands in for the model here.
//! let model = ScriptedModel::new()
//!     .reply_tool_call("add", serde_json::json!({ "a": 3, "b": 4 }))
//!     .reply_text("3 + 4 = 7");
//! let deps = ReactDeps::new(Arc::new(model));
//! let run = calculator::graph().run(ReactState::ask("what is 3 + 4?"), &deps).await?;
//! assert_eq!(run.outcome, Outcome::Completed);
//! assert_eq!(run.state.answer.as_deref(), Some("3 + 4 = 7"));
//! # Ok::<(), agentflow::RunError>(())
//! # }).unwrap();
//! # }
//! ```

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::core::error::NodeError;
use crate::core::message::{Message, Role};
use crate::ctx::Ctx;
use crate::model::{ChatModel, ChatRequest};
use crate::tool::canonical_json;

/// The state of a ReAct run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, crate::State)]
pub struct ReactState {
    /// The conversation: the question, the model's turns, the tool results.
    #[reduce(messages)]
    pub messages: Vec<Message>,
    /// The model's final answer, once it answers without calling a tool.
    pub answer: Option<String>,
    /// Every tool call seen so far with its result, to detect a model that
    /// repeats itself without learning anything new.
    #[reduce(append)]
    pub seen: Vec<String>,
}

impl ReactState {
    /// A conversation that starts with a human's question.
    pub fn ask(question: impl Into<String>) -> Self {
        ReactState { messages: vec![Message::human(question).with_id("human-0")], ..ReactState::default() }
    }
}

/// What a ReAct graph needs to run.
#[derive(Clone)]
pub struct ReactDeps {
    /// The model.
    pub model: Arc<dyn ChatModel>,
    /// The system prompt, sent first on every model call.
    pub system: Option<String>,
    /// The most output tokens a model call may use (reserved against the
    /// token budget before the call).
    pub max_output_tokens: Option<u32>,
}

impl std::fmt::Debug for ReactDeps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReactDeps").field("model", &self.model.name()).field("system", &self.system).finish()
    }
}

impl ReactDeps {
    /// A model with no system prompt.
    pub fn new(model: Arc<dyn ChatModel>) -> Self {
        ReactDeps { model, system: None, max_output_tokens: None }
    }

    /// Sets the system prompt.
    #[must_use]
    pub fn with_system(mut self, system: impl Into<String>) -> Self {
        self.system = Some(system.into());
        self
    }
}

/// An agent's own deps wrap the [`ReactDeps`] and add what its tools reach
/// (`react_agent!(mod name, deps = MyDeps, ..)`, tools taking `&MyDeps`).
impl AsRef<ReactDeps> for ReactDeps {
    fn as_ref(&self) -> &ReactDeps {
        self
    }
}

/// The model's turn: asks the model with the node's tools offered. Returns
/// the update and whether the model called tools.
pub async fn model_turn<D: AsRef<ReactDeps>>(
    s: &ReactState,
    cx: &Ctx<'_, D>,
) -> Result<(ReactStateUpdate, bool), NodeError> {
    let deps = cx.deps().as_ref();
    let mut messages = Vec::with_capacity(s.messages.len() + 1);
    if let Some(system) = &deps.system {
        messages.push(Message::system(system.clone()).with_id("system"));
    }
    messages.extend(s.messages.iter().cloned());
    let mut request = ChatRequest::new(messages).with_tools(cx.tool_specs());
    if let Some(max) = deps.max_output_tokens {
        request = request.with_max_output_tokens(max);
    }
    let reply = cx.chat(&*deps.model, &request).await?;
    let calls = !reply.tool_calls.is_empty();
    let answer = (!calls).then(|| reply.text.clone());
    // Ids from the position in the conversation: a replay produces the same ones.
    let message = reply.into_message(format!("ai-{}", s.messages.len()));
    let mut update = ReactState::update().messages(vec![message]);
    if let Some(answer) = answer {
        update = update.answer(Some(answer));
    }
    Ok((update, calls))
}

/// The tools' turn: runs the last model message's tool calls through the
/// gateway and appends their observations. A call the model already made
/// with the same arguments and the same result stops the loop: the model
/// is not learning anything new.
pub async fn tool_turn<D: Sync + 'static>(s: &ReactState, cx: &Ctx<'_, D>) -> Result<ReactStateUpdate, NodeError> {
    let Some(last) = s.messages.iter().rev().find(|m| m.role == Role::Ai) else {
        return Err(NodeError::fatal("the tool node ran before the model asked for a tool"));
    };
    let observations = cx.call_tools(&last.tool_calls).await?;
    let mut seen = Vec::new();
    let mut messages = Vec::new();
    for (call, observation) in last.tool_calls.iter().zip(observations) {
        let signature = format!("{}|{}|{}", call.name, canonical_json(&call.arguments), observation.body);
        if s.seen.contains(&signature) || seen.contains(&signature) {
            return Err(NodeError::fatal(format!(
                "the model repeated the call `{}` with arguments {} and got the same result again; \
                 stopping the loop instead of spending the budget",
                call.name, call.arguments
            )));
        }
        seen.push(signature);
        messages.push(observation.into_message().with_id(format!("tool-{}", call.id)));
    }
    Ok(ReactState::update().messages(messages).seen(seen))
}

/// Declares a ReAct agent: a `#[graph]` module `name` with a `model` node
/// and a `tools` node allowed exactly the listed tools (checked at compile
/// time). `graph()` in it returns `CompiledGraph<ReactState, ReactDeps>`.
///
/// With `deps = MyDeps` (where `MyDeps: AsRef<ReactDeps>`), the graph's
/// deps are `MyDeps`: the model is read from its `ReactDeps`, and the tools
/// may take `&MyDeps` (or `cx: &ToolCx<MyDeps>`) to reach their clients.
///
/// See the [module docs](crate::prebuilt::react) for a complete example.
#[macro_export]
macro_rules! react_agent {
    ($vis:vis mod $name:ident, tools = [$($tool:ident),* $(,)?], max_steps = $max:literal $(,)?) => {
        $crate::react_agent!($vis mod $name, deps = $crate::prebuilt::react::ReactDeps, tools = [$($tool),*], max_steps = $max);
    };
    ($vis:vis mod $name:ident, deps = $deps:ty, tools = [$($tool:ident),* $(,)?], max_steps = $max:literal $(,)?) => {
        #[$crate::graph(
            state = $crate::prebuilt::react::ReactState,
            deps = $deps,
            start = model,
            max_steps = $max
        )]
        $vis mod $name {
            #[allow(unused_imports)]
            use super::*;

            #[$crate::node(goto = [tools, END], tools = [$($tool),*])]
            async fn model(
                s: &$crate::prebuilt::react::ReactState,
                cx: &$crate::Ctx<$deps>,
            ) -> ::core::result::Result<$crate::Step<$crate::prebuilt::react::ReactState>, $crate::NodeError> {
                let (update, calls) = $crate::prebuilt::react::model_turn(s, cx).await?;
                ::core::result::Result::Ok(if calls { goto!(tools, update) } else { goto!(END, update) })
            }

            #[$crate::node(goto = [model], tools = [$($tool),*])]
            async fn tools(
                s: &$crate::prebuilt::react::ReactState,
                cx: &$crate::Ctx<$deps>,
            ) -> ::core::result::Result<$crate::Step<$crate::prebuilt::react::ReactState>, $crate::NodeError> {
                let update = $crate::prebuilt::react::tool_turn(s, cx).await?;
                ::core::result::Result::Ok(goto!(model, update))
            }
        }
    };
}
