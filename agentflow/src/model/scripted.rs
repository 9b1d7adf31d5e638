//! [`ScriptedModel`]: a deterministic test double, not a language model.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use serde_json::Value;

use super::{ChatChunk, ChatModel, ChatReply, ChatRequest, ChunkSink, ModelError, ToolCallDelta, Usage};
use crate::core::message::ToolCall;

/// The name every [`ScriptedModel`] reports, in events and in
/// [`ChatReply::model`].
pub const SCRIPTED_MODEL_NAME: &str = "scripted-test-double";

type Responder = dyn Fn(&ChatRequest) -> Result<ChatReply, ModelError> + Send + Sync;
type Predicate = dyn Fn(&ChatRequest) -> bool + Send + Sync;

/// A **test double** that replays scripted replies in order. It understands
/// nothing: it is for tests and offline examples, and calls itself
/// `"scripted-test-double"`.
///
/// Each call records the request (see [`requests`](Self::requests)), checks
/// the expectations attached to the next scripted step, and serves that step.
/// When the script runs out it asks the [`respond_with`](Self::respond_with)
/// closure, if any, and otherwise fails with [`ModelError::ScriptExhausted`].
/// Calls are served in the order they arrive; concurrent callers get a
/// deterministic script only if they call in a deterministic order.
///
/// A reply reports a [`Usage`] unless the script says otherwise, so token
/// budgets count what a test scripts and nothing more:
///
/// - [`reply_text`](Self::reply_text) and the `reply_tool_call*` methods
///   report an *estimate*: one token per whitespace-separated word of the
///   request's messages (input) and of the reply (output), with tool calls
///   counted as their name plus their JSON arguments. Real tokenizers count
///   differently.
/// - A reply given whole with [`reply`](Self::reply) or returned by the
///   [`respond_with`](Self::respond_with) closure reports the usage it
///   carries, and zero tokens when it carries none (`usage: None`).
/// - [`with_usage`](Self::with_usage) sets the usage the step scripted last
///   reports.
/// - [`unknown_usage`](Self::unknown_usage) makes the step scripted last
///   report none, as a server that does not say: a run's budget then keeps
///   the call's reservation charged and counts it in
///   [`RunUsage::unknown_usage_calls`](crate::RunUsage::unknown_usage_calls).
///
/// [`chat_stream`](ChatModel::chat_stream) serves the same script and hands
/// the reply over in pieces: the text word by word (each word with the
/// whitespace after it), each tool call as a piece with its id and name and
/// then its arguments' JSON text in pieces of 8 characters, and last the
/// usage. [`stream_chunk_chars`](Self::stream_chunk_chars) cuts text and
/// arguments into pieces of a fixed number of characters instead. The cuts
/// are arbitrary, not a tokenizer's: they exercise the code that reads a
/// stream, nothing more.
///
/// ```
/// use agentflow::model::{ChatModel, ChatRequest, ScriptedModel};
/// use agentflow::message::Message;
/// use serde_json::json;
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let model = ScriptedModel::new()
///     .reply_tool_call("add", json!({"a": 3, "b": 4}))
///     .reply_text("3 + 4 = 7");
/// let req = ChatRequest::new(vec![Message::human("what is 3 + 4?")]);
/// let first = model.chat(&req).await.unwrap();
/// assert_eq!(first.tool_calls[0].id, "call_1");
/// assert_eq!(model.chat(&req).await.unwrap().text, "3 + 4 = 7");
/// assert!(model.chat(&req).await.is_err()); // script exhausted
/// assert_eq!(model.requests().len(), 3);
/// # });
/// ```
pub struct ScriptedModel {
    script: Mutex<Script>,
    responder: Option<Box<Responder>>,
    fresh_call_ids: bool,
    chunk_chars: Option<usize>,
    /// Whether a `respond_with` reply without a usage keeps `None` (unknown) instead of zero.
    responder_usage_unknown: bool,
}

#[derive(Default)]
struct Script {
    steps: VecDeque<Step>,
    requests: Vec<ChatRequest>,
    served: usize,
    next_call_id: usize,
}

struct Step {
    outcome: Result<ChatReply, ModelError>,
    usage: Report,
    expectations: Vec<(String, Box<Predicate>)>,
}

/// The usage a scripted step reports.
#[derive(Debug, Clone, Copy)]
enum Report {
    /// The word-count estimate.
    Estimate,
    /// The reply's own; zero tokens when it has none.
    AsGiven,
    /// This one.
    Set(Usage),
    /// None at all: unknown usage.
    Unknown,
}

/// A reply from the `respond_with` closure, reporting zero tokens when it carries no usage
/// (not unknown usage).
fn or_zero(mut reply: ChatReply) -> ChatReply {
    reply.usage.get_or_insert_with(Usage::default);
    reply
}

impl Default for ScriptedModel {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for ScriptedModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let script = self.lock();
        f.debug_struct("ScriptedModel")
            .field("remaining", &script.steps.len())
            .field("served", &script.served)
            .field("respond_with", &self.responder.is_some())
            .field("fresh_call_ids", &self.fresh_call_ids)
            .field("chunk_chars", &self.chunk_chars)
            .finish()
    }
}

impl ScriptedModel {
    /// An empty script.
    pub fn new() -> Self {
        ScriptedModel {
            script: Mutex::default(),
            responder: None,
            fresh_call_ids: false,
            chunk_chars: None,
            responder_usage_unknown: false,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Script> {
        self.script.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn push(mut self, outcome: Result<ChatReply, ModelError>, usage: Report) -> Self {
        let script = self.script.get_mut().unwrap_or_else(PoisonError::into_inner);
        script.steps.push_back(Step { outcome, usage, expectations: Vec::new() });
        self
    }

    /// The step scripted last, for the methods that change it.
    fn last_step(&mut self, method: &str) -> &mut Step {
        let script = self.script.get_mut().unwrap_or_else(PoisonError::into_inner);
        let Some(step) = script.steps.back_mut() else {
            panic!("`{method}` applies to the step scripted last; script a reply first")
        };
        step
    }

    /// Then serve `reply` as given, with the usage it carries, or zero tokens
    /// when it carries none (script unknown usage with
    /// [`unknown_usage`](Self::unknown_usage)).
    pub fn reply(self, reply: ChatReply) -> Self {
        self.push(Ok(reply), Report::AsGiven)
    }

    /// Then answer with text and no tool calls, with an estimated usage.
    pub fn reply_text(self, text: impl Into<String>) -> Self {
        self.push(Ok(ChatReply::text(text)), Report::Estimate)
    }

    /// Then ask for one tool call. Call ids are `call_1`, `call_2`, … in
    /// script order.
    pub fn reply_tool_call(self, name: impl Into<String>, arguments: Value) -> Self {
        self.reply_tool_calls([(name, arguments)])
    }

    /// Then ask for several tool calls in one reply (independent calls).
    pub fn reply_tool_calls<N: Into<String>>(mut self, calls: impl IntoIterator<Item = (N, Value)>) -> Self {
        let script = self.script.get_mut().unwrap_or_else(PoisonError::into_inner);
        let tool_calls = calls
            .into_iter()
            .map(|(name, arguments)| {
                script.next_call_id += 1;
                ToolCall::new(format!("call_{}", script.next_call_id), name, arguments)
            })
            .collect();
        let reply = ChatReply { tool_calls, ..ChatReply::default() };
        self.push(Ok(reply), Report::Estimate)
    }

    /// Then fail with `error` (e.g. a rate limit, to exercise retries).
    pub fn fail(self, error: ModelError) -> Self {
        self.push(Err(error), Report::AsGiven)
    }

    /// Make the step scripted last report `usage` (instead of the estimate, or
    /// of the usage its reply carries). A step that fails reports nothing.
    ///
    /// ```
    /// use agentflow::model::{ChatModel, ChatRequest, ScriptedModel, Usage};
    /// use agentflow::message::Message;
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let model = ScriptedModel::new().reply_text("a long answer").with_usage(Usage::new(900, 300));
    /// let reply = model.chat(&ChatRequest::new(vec![Message::human("hi")])).await.unwrap();
    /// assert_eq!(reply.usage, Some(Usage::new(900, 300)));
    /// # });
    /// ```
    ///
    /// # Panics
    ///
    /// If nothing has been scripted yet.
    #[must_use]
    pub fn with_usage(mut self, usage: Usage) -> Self {
        self.last_step("with_usage").usage = Report::Set(usage);
        self
    }

    /// Make the step scripted last report no usage (`usage: None`), as a
    /// server that does not say: a run's budget keeps the call's reservation
    /// charged (its `max_output_tokens`, or
    /// [`Limits::reserve_per_call`](crate::Limits::reserve_per_call)) and
    /// counts it in [`RunUsage::unknown_usage_calls`](crate::RunUsage::unknown_usage_calls).
    ///
    /// # Panics
    ///
    /// If nothing has been scripted yet.
    #[must_use]
    pub fn unknown_usage(mut self) -> Self {
        self.last_step("unknown_usage").usage = Report::Unknown;
        self
    }

    /// Attach an expectation to the step scripted last: when the request it
    /// answers does not satisfy `check`, the call fails with
    /// [`ModelError::UnexpectedRequest`] naming `description`.
    ///
    /// # Panics
    ///
    /// If nothing has been scripted yet.
    pub fn expect(
        mut self,
        description: impl Into<String>,
        check: impl Fn(&ChatRequest) -> bool + Send + Sync + 'static,
    ) -> Self {
        let script = self.script.get_mut().unwrap_or_else(PoisonError::into_inner);
        let step = script.steps.back_mut().expect("`expect` applies to the step scripted last; script a reply first");
        step.expectations.push((description.into(), Box::new(check)));
        self
    }

    /// Once the scripted steps are used up, answer every further call with
    /// `respond` instead of failing. A reply without a usage reports zero
    /// tokens, unless [`respond_with_unknown_usage`](Self::respond_with_unknown_usage)
    /// is set.
    pub fn respond_with(
        mut self,
        respond: impl Fn(&ChatRequest) -> Result<ChatReply, ModelError> + Send + Sync + 'static,
    ) -> Self {
        self.responder = Some(Box::new(respond));
        self
    }

    /// Let the replies of [`respond_with`](Self::respond_with) that carry no
    /// usage report none (`usage: None`, unknown usage, as
    /// [`unknown_usage`](Self::unknown_usage) does for a scripted step)
    /// instead of zero tokens.
    #[must_use]
    pub fn respond_with_unknown_usage(mut self) -> Self {
        self.responder_usage_unknown = true;
        self
    }

    /// Hand out a fresh id for every tool call on every model call, as real
    /// APIs do: each served reply's call ids (scripted or from
    /// [`respond_with`](Self::respond_with)) get the suffix `-{n}`, `n` the
    /// 1-based number of the model call (`call_1` served by the third call
    /// becomes `call_1-3`). Asking again with the same request therefore
    /// never yields the same call id twice; a graph that re-asks the model
    /// after a pause sees new ids, as it would in production.
    #[must_use]
    pub fn fresh_call_ids(mut self) -> Self {
        self.fresh_call_ids = true;
        self
    }

    /// Make [`chat_stream`](ChatModel::chat_stream) cut the reply's text and
    /// tool-call arguments into pieces of `chars` characters (at least 1)
    /// instead of word by word.
    #[must_use]
    pub fn stream_chunk_chars(mut self, chars: usize) -> Self {
        self.chunk_chars = Some(chars.max(1));
        self
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<ChatRequest> {
        self.lock().requests.clone()
    }

    /// The most recent request.
    pub fn last_request(&self) -> Option<ChatRequest> {
        self.lock().requests.last().cloned()
    }

    /// How many calls were made.
    pub fn calls(&self) -> usize {
        self.lock().requests.len()
    }

    /// How many scripted steps have not been served yet.
    pub fn remaining(&self) -> usize {
        self.lock().steps.len()
    }
}

/// The test double's token estimate: the number of whitespace-separated words.
pub fn estimate_tokens(text: &str) -> u64 {
    text.split_whitespace().count() as u64
}

fn estimate_calls(calls: &[ToolCall]) -> u64 {
    calls.iter().map(|call| estimate_tokens(&call.name) + estimate_tokens(&call.arguments.to_string())).sum()
}

/// `text` cut into pieces of `n` characters.
fn pieces(text: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(n).map(|c| c.iter().collect()).collect()
}

/// The chunks [`ScriptedModel::chat_stream`] hands `reply` over in.
fn chunks_of(reply: &ChatReply, chunk_chars: Option<usize>) -> Vec<ChatChunk> {
    let mut out: Vec<ChatChunk> = match chunk_chars {
        Some(n) => pieces(&reply.text, n),
        None => reply.text.split_inclusive(char::is_whitespace).map(str::to_owned).collect(),
    }
    .into_iter()
    .map(ChatChunk::text)
    .collect();
    for (i, call) in reply.tool_calls.iter().enumerate() {
        let index = u32::try_from(i).unwrap_or(u32::MAX);
        let head = ToolCallDelta::new(index, Some(call.id.clone()), Some(call.name.clone()), "");
        out.push(ChatChunk::tool_calls(vec![head]));
        let arguments = match &call.arguments {
            Value::String(raw) => raw.clone(),
            other => other.to_string(),
        };
        for piece in pieces(&arguments, chunk_chars.unwrap_or(8)) {
            out.push(ChatChunk::tool_calls(vec![ToolCallDelta::new(index, None, None, piece)]));
        }
    }
    if let Some(usage) = reply.usage {
        out.push(ChatChunk::usage(usage));
    }
    // The last chunk says why the model stopped.
    if let Some(reason) = &reply.finish_reason {
        match out.last_mut() {
            Some(last) => last.finish_reason = Some(reason.clone()),
            None => out.push(ChatChunk::finish(reason.clone())),
        }
    }
    out
}

fn estimate_usage(req: &ChatRequest, reply: &ChatReply) -> Usage {
    let input = req.messages.iter().map(|m| estimate_tokens(&m.content) + estimate_calls(&m.tool_calls)).sum();
    let output = estimate_tokens(&reply.text) + estimate_calls(&reply.tool_calls);
    Usage::new(input, output)
}

#[async_trait]
impl ChatModel for ScriptedModel {
    fn name(&self) -> &str {
        SCRIPTED_MODEL_NAME
    }

    fn provider_name(&self) -> &str {
        "agentflow.scripted"
    }

    async fn chat(&self, req: &ChatRequest) -> Result<ChatReply, ModelError> {
        let mut script = self.lock();
        let call = script.requests.len();
        script.requests.push(req.clone());
        let fresh = |mut reply: ChatReply| {
            if self.fresh_call_ids {
                for tool_call in &mut reply.tool_calls {
                    tool_call.id = format!("{}-{}", tool_call.id, call + 1);
                }
            }
            if reply.model.is_empty() {
                reply.model = SCRIPTED_MODEL_NAME.to_owned();
            }
            if reply.finish_reason.is_none() {
                let reason = if reply.tool_calls.is_empty() { "stop" } else { "tool_calls" };
                reply.finish_reason = Some(reason.to_owned());
            }
            reply
        };
        let Some(step) = script.steps.pop_front() else {
            return match &self.responder {
                Some(respond) if self.responder_usage_unknown => respond(req).map(fresh),
                Some(respond) => respond(req).map(or_zero).map(fresh),
                None => Err(ModelError::ScriptExhausted { served: script.served }),
            };
        };
        script.served += 1;
        if let Some((expectation, _)) = step.expectations.iter().find(|(_, check)| !check(req)) {
            return Err(ModelError::UnexpectedRequest { call, expectation: expectation.clone() });
        }
        let mut reply = step.outcome?;
        reply.usage = match step.usage {
            Report::Estimate => Some(estimate_usage(req, &reply)),
            Report::AsGiven => Some(reply.usage.unwrap_or_default()),
            Report::Set(usage) => Some(usage),
            Report::Unknown => None,
        };
        if reply.model.is_empty() {
            reply.model = SCRIPTED_MODEL_NAME.to_owned();
        }
        Ok(fresh(reply))
    }

    async fn chat_stream(&self, req: &ChatRequest, chunks: &ChunkSink<'_>) -> Result<ChatReply, ModelError> {
        let reply = self.chat(req).await?;
        for chunk in chunks_of(&reply, self.chunk_chars) {
            chunks.send(chunk).await;
        }
        Ok(reply)
    }
}
