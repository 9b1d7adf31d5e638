//! The chat-model contract: [`ChatModel`], its request and reply, and
//! [`ModelError`]. Adapters and helpers build on it; it depends on none of them.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::core::error::{ErrorClass, NodeError};
use crate::core::message::{Message, ToolCall, ToolSpec};
use crate::core::usage::Usage;
use crate::model::chunk::{ChatChunk, ChunkSink};

/// What to send to a model.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    /// The conversation so far.
    pub messages: Vec<Message>,
    /// The tools the model may call.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolSpec>,
    /// Upper bound on the tokens of the reply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u32>,
    /// Ask for a JSON reply matching this schema (structured output).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_schema: Option<ResponseSchema>,
    /// Sampling temperature; `None` leaves the server default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
}

impl ChatRequest {
    /// A request with these messages and nothing else set.
    pub fn new(messages: Vec<Message>) -> Self {
        ChatRequest { messages, ..Self::default() }
    }
    /// Offer these tools.
    pub fn with_tools(mut self, tools: Vec<ToolSpec>) -> Self {
        self.tools = tools;
        self
    }
    /// Bound the reply's length.
    pub fn with_max_output_tokens(mut self, max: u32) -> Self {
        self.max_output_tokens = Some(max);
        self
    }
    /// Ask for JSON matching `schema`.
    pub fn with_response_schema(mut self, schema: ResponseSchema) -> Self {
        self.response_schema = Some(schema);
        self
    }
    /// Set the sampling temperature.
    pub fn with_temperature(mut self, temperature: f32) -> Self {
        self.temperature = Some(temperature);
        self
    }
}

/// A JSON schema the reply must match, with a name for the wire format.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResponseSchema {
    /// Short name (`[a-zA-Z0-9_-]`, at most 64 characters on OpenAI).
    pub name: String,
    /// The JSON schema.
    pub schema: Value,
}

/// What a model answered.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatReply {
    /// The text; may be empty when the model only calls tools.
    pub text: String,
    /// The tools the model asked to run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// Tokens used; `None` when the server did not say (budgets flag it).
    pub usage: Option<Usage>,
    /// The model that answered, as reported by the server.
    pub model: String,
    /// Why the model stopped (`stop`, `length`, `tool_calls`, ...), as the server said;
    /// `None` when it did not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
}

impl ChatReply {
    /// A text reply with unknown usage.
    pub fn text(text: impl Into<String>) -> Self {
        ChatReply { text: text.into(), ..Self::default() }
    }
    /// The reply as an AI message with the given id.
    ///
    /// Tool-call arguments nested deeper than [`MAX_JSON_DEPTH`](crate::persist::MAX_JSON_DEPTH)
    /// levels are cut to one level past it, so the message can be committed with the state: the
    /// tool gateway refuses such a call with an `INVALID_ARGUMENT` observation either way, and
    /// the model can correct it.
    pub fn into_message(mut self, id: impl Into<String>) -> Message {
        for call in &mut self.tool_calls {
            crate::tool::clip_deep_args(&mut call.arguments);
        }
        Message::ai_with_tool_calls(self.text, self.tool_calls).with_id(id)
    }
}

/// A chat model: messages in, a reply out.
#[async_trait]
pub trait ChatModel: Send + Sync {
    /// A name for events and logs (the adapter and model).
    fn name(&self) -> &str;
    /// The provider, as the OpenTelemetry `gen_ai.provider.name` attribute names it (`openai`,
    /// `anthropic`, ...); `unknown` unless the adapter says.
    fn provider_name(&self) -> &str {
        "unknown"
    }
    /// The model a request asks for (the `gen_ai.request.model` attribute); the name by default.
    fn request_model(&self) -> &str {
        self.name()
    }
    /// Send one request and wait for the reply.
    async fn chat(&self, req: &ChatRequest) -> Result<ChatReply, ModelError>;

    /// Send one request and hand the reply to `chunks` piece by piece as it
    /// arrives; returns the whole reply, which the chunks add up to (see
    /// [`ReplyAssembler`](crate::model::ReplyAssembler)).
    ///
    /// The default calls [`ChatModel::chat`] and sends the reply as one
    /// chunk ([`ChatChunk::whole`]), so every model can be streamed; an
    /// adapter that can stream overrides it ([`OpenAiCompatible`](crate::model::OpenAiCompatible)
    /// does, with server-sent events). Errors are those of `chat`; chunks
    /// sent before an error are not taken back.
    async fn chat_stream(&self, req: &ChatRequest, chunks: &ChunkSink<'_>) -> Result<ChatReply, ModelError> {
        let reply = self.chat(req).await?;
        chunks.send(ChatChunk::whole(&reply)).await;
        Ok(reply)
    }
}

#[async_trait]
impl<M: ChatModel + ?Sized> ChatModel for Arc<M> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn provider_name(&self) -> &str {
        (**self).provider_name()
    }
    fn request_model(&self) -> &str {
        (**self).request_model()
    }
    async fn chat(&self, req: &ChatRequest) -> Result<ChatReply, ModelError> {
        (**self).chat(req).await
    }
    async fn chat_stream(&self, req: &ChatRequest, chunks: &ChunkSink<'_>) -> Result<ChatReply, ModelError> {
        (**self).chat_stream(req, chunks).await
    }
}

#[async_trait]
impl<M: ChatModel + ?Sized> ChatModel for Box<M> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn provider_name(&self) -> &str {
        (**self).provider_name()
    }
    fn request_model(&self) -> &str {
        (**self).request_model()
    }
    async fn chat(&self, req: &ChatRequest) -> Result<ChatReply, ModelError> {
        (**self).chat(req).await
    }
    async fn chat_stream(&self, req: &ChatRequest, chunks: &ChunkSink<'_>) -> Result<ChatReply, ModelError> {
        (**self).chat_stream(req, chunks).await
    }
}

#[async_trait]
impl<M: ChatModel + ?Sized> ChatModel for &M {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn provider_name(&self) -> &str {
        (**self).provider_name()
    }
    fn request_model(&self) -> &str {
        (**self).request_model()
    }
    async fn chat(&self, req: &ChatRequest) -> Result<ChatReply, ModelError> {
        (**self).chat(req).await
    }
    async fn chat_stream(&self, req: &ChatRequest, chunks: &ChunkSink<'_>) -> Result<ChatReply, ModelError> {
        (**self).chat_stream(req, chunks).await
    }
}

/// Why a model call failed. [`ModelError::class`] says what to do about it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// The server asked us to slow down (HTTP 429).
    #[error("rate limited{}: {message}", fmt_after(*retry_after))]
    RateLimited {
        /// How long the server asked us to wait (`Retry-After`).
        retry_after: Option<Duration>,
        /// The server's message.
        message: String,
    },
    /// No reply within the configured time.
    #[error("model call timed out")]
    Timeout,
    /// The server answered with an error status.
    #[error("http status {status}: {message}")]
    Http {
        /// The HTTP status code.
        status: u16,
        /// The server's message (its `error.message`, or the raw body).
        message: String,
    },
    /// The request never got an HTTP answer (connection refused or reset).
    #[error("transport error: {0}")]
    Transport(String),
    /// The server's reply does not follow the wire format.
    #[error("malformed reply: {0}")]
    MalformedReply(String),
    /// The credentials were refused (HTTP 401/403).
    #[error("authentication failed (http {status}): {message}; check the API key")]
    Auth {
        /// 401 or 403.
        status: u16,
        /// The server's message.
        message: String,
    },
    /// The model's output does not satisfy what was asked (e.g. the schema of
    /// a structured reply); the model can be told and asked again.
    #[error("invalid model output: {detail}")]
    InvalidOutput {
        /// What is wrong, worded for the model.
        detail: String,
        /// The offending output.
        raw: String,
    },
    /// The server's reply is larger than the adapter accepts (see
    /// `OpenAiConfig::max_response_bytes`); the body was not read past the
    /// limit.
    #[error(
        "the model server's reply is larger than the limit of {limit} bytes{}; \
         bound the reply with `max_output_tokens`, or raise the limit \
         (`OpenAiConfig::with_max_response_bytes`) if replies this large are expected",
        declared.map_or_else(String::new, |n| format!(" (it announced {n} bytes)"))
    )]
    ResponseTooLarge {
        /// The limit, in bytes.
        limit: u64,
        /// The length the server announced (`Content-Length`), if it did.
        declared: Option<u64>,
    },
    /// The adapter is misconfigured (missing model name, bad URL).
    #[error("model configuration: {0}")]
    Config(String),
    /// [`ScriptedModel`](crate::model::ScriptedModel) was called more often than it was scripted.
    #[error("scripted test double exhausted after {served} replies; script more replies")]
    ScriptExhausted {
        /// How many replies it had served.
        served: usize,
    },
    /// [`ScriptedModel`](crate::model::ScriptedModel) received a request its script did not expect.
    #[error("scripted test double: call {call} broke expectation `{expectation}`")]
    UnexpectedRequest {
        /// Zero-based index of the call.
        call: usize,
        /// The expectation's description.
        expectation: String,
    },
}

fn fmt_after(after: Option<Duration>) -> String {
    after.map_or_else(String::new, |d| format!(" (retry after {d:?})"))
}

impl ModelError {
    /// How the executor should treat this error.
    ///
    /// Transient: rate limits, timeouts, transport faults, malformed replies,
    /// HTTP 408/409/5xx. Correctable: [`ModelError::InvalidOutput`]. Fatal:
    /// authentication, other HTTP 4xx, an oversized reply, configuration,
    /// script errors.
    pub fn class(&self) -> ErrorClass {
        match self {
            ModelError::RateLimited { .. }
            | ModelError::Timeout
            | ModelError::Transport(_)
            | ModelError::MalformedReply(_) => ErrorClass::Transient,
            ModelError::Http { status, .. } if *status >= 500 || matches!(status, 408 | 409) => ErrorClass::Transient,
            ModelError::InvalidOutput { .. } => ErrorClass::Correctable,
            ModelError::Http { .. }
            | ModelError::Auth { .. }
            | ModelError::ResponseTooLarge { .. }
            | ModelError::Config(_)
            | ModelError::ScriptExhausted { .. }
            | ModelError::UnexpectedRequest { .. } => ErrorClass::Fatal,
        }
    }

    /// The wait the server asked for, if any.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ModelError::RateLimited { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

impl From<ModelError> for NodeError {
    fn from(err: ModelError) -> Self {
        let node = NodeError::new(err.class(), err.to_string());
        match err.retry_after() {
            Some(delay) => node.with_retry_after(delay),
            None => node,
        }
    }
}
