//! The OpenAI-compatible chat-completions client.

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::assemble::parse_arguments;
use super::{
    ChatChunk, ChatModel, ChatReply, ChatRequest, ChunkSink, ModelError, ReplyAssembler, ToolCallDelta, Usage,
};
use crate::message::{Message, Role, ToolCall};

/// Where and how to reach an OpenAI-compatible server.
#[derive(Clone)]
pub struct OpenAiConfig {
    /// API root, up to and including the version (`https://api.openai.com/v1`,
    /// `http://localhost:11434/v1`); `/chat/completions` is appended.
    pub base_url: String,
    /// The model to ask (`gpt-4o-mini`, `qwen2.5`).
    pub model: String,
    /// Sent as `Authorization: Bearer ..`; `None` for servers without keys (Ollama).
    pub api_key: Option<String>,
    /// Bound on a whole call, from connecting to the end of the body.
    pub timeout: Duration,
    /// The largest reply body accepted, in bytes (default
    /// [`Self::DEFAULT_MAX_RESPONSE_BYTES`]); a larger one fails the call
    /// with [`ModelError::ResponseTooLarge`].
    pub max_response_bytes: u64,
}

impl std::fmt::Debug for OpenAiConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiConfig")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("timeout", &self.timeout)
            .field("max_response_bytes", &self.max_response_bytes)
            .finish()
    }
}

impl OpenAiConfig {
    /// OpenAI's public API root.
    pub const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";
    /// Ollama's OpenAI-compatible endpoint on this machine.
    pub const OLLAMA_BASE_URL: &str = "http://localhost:11434/v1";
    /// The default call timeout (local models can be slow).
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);
    /// The default bound on a reply's body: 8 MiB, far above any chat
    /// completion a model's output bound allows.
    pub const DEFAULT_MAX_RESPONSE_BYTES: u64 = 8 * 1024 * 1024;

    /// A config for `model` at `base_url`, without key, with the default
    /// timeout and reply bound.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        OpenAiConfig {
            base_url: base_url.into(),
            model: model.into(),
            api_key: None,
            timeout: Self::DEFAULT_TIMEOUT,
            max_response_bytes: Self::DEFAULT_MAX_RESPONSE_BYTES,
        }
    }

    /// A local Ollama server serving `model`.
    pub fn ollama(model: impl Into<String>) -> Self {
        Self::new(Self::OLLAMA_BASE_URL, model)
    }

    /// Send this API key.
    pub fn with_api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }

    /// Bound each call by `timeout`.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Accept reply bodies of at most `bytes` bytes (see [`OpenAiCompatible`] for how the bound is enforced).
    pub fn with_max_response_bytes(mut self, bytes: u64) -> Self {
        self.max_response_bytes = bytes;
        self
    }

    /// Read `OPENAI_BASE_URL` (default [`Self::OPENAI_BASE_URL`]),
    /// `OPENAI_API_KEY` (optional) and `AGENTFLOW_MODEL` (required) from the
    /// environment. Empty values count as unset.
    pub fn from_env() -> Result<Self, ModelError> {
        Self::from_lookup(|key| std::env::var(key).ok())
    }

    /// Like [`from_env`](Self::from_env), reading variables through `var`.
    pub fn from_lookup(var: impl Fn(&str) -> Option<String>) -> Result<Self, ModelError> {
        let var = |key| var(key).filter(|v: &String| !v.trim().is_empty());
        let model = var("AGENTFLOW_MODEL").ok_or_else(|| {
            ModelError::Config(
                "`AGENTFLOW_MODEL` is not set; set it to the model name (e.g. `qwen2.5` on Ollama)".into(),
            )
        })?;
        let base_url = var("OPENAI_BASE_URL").unwrap_or_else(|| Self::OPENAI_BASE_URL.into());
        Ok(OpenAiConfig { api_key: var("OPENAI_API_KEY"), ..Self::new(base_url, model) })
    }
}

/// A [`ChatModel`] speaking the OpenAI chat-completions wire format over HTTP.
///
/// [`OpenAiCompatible`]: the chat-completions HTTP API (`POST
/// {base_url}/chat/completions`), as served by OpenAI, Ollama
/// (`http://localhost:11434/v1`), vLLM, llama.cpp and others.
///
/// Wire mapping: roles system/human/ai/tool become system/user/assistant/tool;
/// tool calls travel as `{"type": "function", "function": {"name", "arguments"}}`
/// with the arguments as a JSON *string*; tools as `{"type": "function",
/// "function": {"name", "description", "parameters"}}`; the reply bound as
/// `max_tokens`; a response schema as `response_format: {"type":
/// "json_schema", ...}`. Usage comes from `prompt_tokens` and
/// `completion_tokens`; a reply without them has unknown usage (`None`).
///
/// Tool-call arguments that are not valid JSON do not fail the reply: the call
/// is kept with its raw text as `Value::String`, so the tool layer answers it
/// with an invalid-argument observation tied to its call id and the model can
/// correct itself. Empty arguments (`""`) read as `{}`.
///
/// Errors: 429 is [`ModelError::RateLimited`] with `Retry-After` (seconds),
/// 401/403 [`ModelError::Auth`], other statuses [`ModelError::Http`], an
/// expired client timeout [`ModelError::Timeout`], a body that is not a chat
/// completion [`ModelError::MalformedReply`], a body larger than
/// [`OpenAiConfig::max_response_bytes`] [`ModelError::ResponseTooLarge`];
/// see [`ModelError::class`].
///
/// The reply's body is read with a bound: a `Content-Length` above
/// [`OpenAiConfig::max_response_bytes`] is refused before any of the body is
/// read, and a body without a length (chunked) is read until it passes the
/// bound and then dropped, with the connection. At most that many bytes of
/// a body are held in memory. The body of an error status is read up to
/// 64 KiB (at most the bound) and only that prefix is kept for the message.
///
/// Streaming: [`ChatModel::chat_stream`] asks with `"stream": true` and hands
/// on the server-sent chunks as they arrive (text, tool-call argument deltas,
/// the usage last); see its documentation on this type for how a stream that
/// breaks off is reported.
///
/// ```no_run
/// use agentflow::model::{OpenAiCompatible, OpenAiConfig};
///
/// let local = OpenAiCompatible::new(OpenAiConfig::ollama("qwen2.5"))?;
/// let from_env = OpenAiCompatible::from_env()?;
/// # Ok::<(), agentflow::model::ModelError>(())
/// ```
#[derive(Debug, Clone)]
pub struct OpenAiCompatible {
    config: OpenAiConfig,
    endpoint: String,
    name: String,
    client: reqwest::Client,
}

impl OpenAiCompatible {
    /// An adapter for `config`. Fails on an empty model name, a URL that is
    /// not http(s), or an `https` URL when the `tls` feature is off.
    pub fn new(config: OpenAiConfig) -> Result<Self, ModelError> {
        if config.model.trim().is_empty() {
            return Err(ModelError::Config("the model name is empty".into()));
        }
        let base = config.base_url.trim_end_matches('/');
        let https = base.starts_with("https://");
        if !https && !base.starts_with("http://") {
            return Err(ModelError::Config(format!("base url `{base}` must start with `http://` or `https://`")));
        }
        if https && !cfg!(feature = "tls") {
            return Err(ModelError::Config(format!("base url `{base}` needs https; enable agentflow's `tls` feature")));
        }
        let client = reqwest::Client::builder()
            .timeout(config.timeout)
            .build()
            .map_err(|e| ModelError::Config(error_chain(&e)))?;
        Ok(OpenAiCompatible {
            endpoint: format!("{base}/chat/completions"),
            name: format!("openai-compatible:{}", config.model),
            config,
            client,
        })
    }

    /// An adapter configured from the environment ([`OpenAiConfig::from_env`]).
    pub fn from_env() -> Result<Self, ModelError> {
        Self::new(OpenAiConfig::from_env()?)
    }

    /// The configuration in use.
    pub fn config(&self) -> &OpenAiConfig {
        &self.config
    }
}

#[async_trait]
impl ChatModel for OpenAiCompatible {
    fn name(&self) -> &str {
        &self.name
    }

    async fn chat(&self, req: &ChatRequest) -> Result<ChatReply, ModelError> {
        let response = self.send(&wire_request(&self.config.model, req)).await?;
        let body = read_bounded(response, self.config.max_response_bytes).await?;
        parse_reply(&String::from_utf8_lossy(&body))
    }

    /// Asks with `"stream": true` (and `stream_options.include_usage`) and
    /// reads the server-sent events as they arrive: each `data:` event is a
    /// `chat.completion.chunk` whose text and tool-call deltas go to
    /// `chunks` at once, in order; the usage comes in the last one. The reply
    /// is what the chunks add up to ([`ReplyAssembler`]); for the same answer
    /// it equals the reply of [`ChatModel::chat`].
    ///
    /// The stream ends at `data: [DONE]`, or at the end of the body after a
    /// chunk with a `finish_reason`. A body that ends before either (the
    /// connection dropped mid-reply) is a transient
    /// [`ModelError::Transport`], so the node's retry policy asks again; a
    /// chunk that is not a chat-completion chunk is a
    /// [`ModelError::MalformedReply`] naming it (transient, like a whole
    /// reply that does not parse); an `error` object sent mid-stream is a
    /// transient [`ModelError::Transport`] with the server's message.
    /// Chunks with nothing in them (the first, naming the role) are not
    /// handed on. The body is bounded by [`OpenAiConfig::max_response_bytes`]
    /// and the whole call by [`OpenAiConfig::timeout`], as for a whole reply.
    async fn chat_stream(&self, req: &ChatRequest, chunks: &ChunkSink<'_>) -> Result<ChatReply, ModelError> {
        let mut wire = wire_request(&self.config.model, req);
        wire.stream = true;
        wire.stream_options = Some(json!({"include_usage": true}));
        let mut response = self.send(&wire).await?;
        let limit = self.config.max_response_bytes;
        let declared = declared_length(&response);
        let mut events = SseLines::default();
        let mut reply = ReplyAssembler::new();
        let (mut read, mut seen, mut finished) = (0u64, 0usize, false);
        while let Some(bytes) = response.chunk().await.map_err(transport_error)? {
            read = read.saturating_add(bytes.len() as u64);
            if read > limit {
                return Err(ModelError::ResponseTooLarge { limit, declared });
            }
            for data in events.feed(&bytes) {
                if data.trim() == "[DONE]" {
                    return Ok(reply.finish());
                }
                seen += 1;
                let parsed = parse_chunk(&data, seen)?;
                if let Some(model) = parsed.model {
                    reply.set_model(model);
                }
                finished |= parsed.finished;
                if parsed.chunk != ChatChunk::default() {
                    reply.push(&parsed.chunk);
                    chunks.send(parsed.chunk).await;
                }
            }
        }
        if finished {
            return Ok(reply.finish());
        }
        Err(ModelError::Transport(format!(
            "the reply stream ended after {seen} chunk(s), before `data: [DONE]` or a `finish_reason`"
        )))
    }
}

impl OpenAiCompatible {
    /// Posts `wire`; a status other than 2xx is the call's error.
    async fn send(&self, wire: &WireRequest<'_>) -> Result<reqwest::Response, ModelError> {
        let mut http = self.client.post(&self.endpoint).json(wire);
        if let Some(key) = &self.config.api_key {
            http = http.bearer_auth(key);
        }
        let response = http.send().await.map_err(transport_error)?;
        let status = response.status().as_u16();
        let retry_after =
            response.headers().get("retry-after").and_then(|v| v.to_str().ok()).and_then(parse_retry_after);
        if !(200..300).contains(&status) {
            let prefix = read_prefix(response, ERROR_BODY_BYTES.min(self.config.max_response_bytes)).await;
            return Err(status_error(status, retry_after, &String::from_utf8_lossy(&prefix)));
        }
        Ok(response)
    }
}

/// Splits a server-sent event stream into the data of its events, across
/// network reads that may cut a line (or a UTF-8 character) anywhere.
#[derive(Default)]
struct SseLines {
    /// Bytes of the line not finished yet.
    partial: Vec<u8>,
    /// The `data:` lines of the event not finished yet.
    data: Vec<String>,
}

impl SseLines {
    /// The data of the events `bytes` completes, in order.
    fn feed(&mut self, bytes: &[u8]) -> Vec<String> {
        let mut out = Vec::new();
        self.partial.extend_from_slice(bytes);
        let mut start = 0;
        while let Some(end) = self.partial[start..].iter().position(|&b| b == b'\n') {
            let line = &self.partial[start..start + end];
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let line = String::from_utf8_lossy(line);
            if line.is_empty() {
                if !self.data.is_empty() {
                    out.push(std::mem::take(&mut self.data).join("\n"));
                }
            } else if let Some(value) = line.strip_prefix("data:") {
                self.data.push(value.strip_prefix(' ').unwrap_or(value).to_owned());
            }
            // Comments (`:`) and the other fields (`event:`, `id:`, `retry:`) carry nothing here.
            start += end + 1;
        }
        self.partial.drain(..start);
        out
    }
}

/// One `chat.completion.chunk`, read.
struct ParsedChunk {
    chunk: ChatChunk,
    model: Option<String>,
    finished: bool,
}

#[derive(Deserialize)]
struct WireChunk {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    choices: Vec<WireChunkChoice>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct WireChunkChoice {
    #[serde(default)]
    delta: Option<WireDelta>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct WireDelta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    refusal: Option<String>,
    #[serde(default)]
    tool_calls: Vec<WireToolCallDelta>,
}

#[derive(Deserialize)]
struct WireToolCallDelta {
    #[serde(default)]
    index: Option<u32>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<WireFunctionDelta>,
}

#[derive(Deserialize)]
struct WireFunctionDelta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

/// Event `n` (from 1) of a streamed reply.
fn parse_chunk(data: &str, n: usize) -> Result<ParsedChunk, ModelError> {
    let wire: WireChunk = serde_json::from_str(data).map_err(|e| {
        ModelError::MalformedReply(format!("stream chunk {n} is not a chat-completion chunk ({e}): {}", shorten(data)))
    })?;
    if let Some(error) = wire.error {
        let message = error_message(&json!({ "error": error }).to_string());
        return Err(ModelError::Transport(format!("the server sent an error mid-stream: {message}")));
    }
    let mut chunk = ChatChunk::default();
    let mut finished = false;
    if let Some(choice) = wire.choices.into_iter().next() {
        finished = choice.finish_reason.is_some();
        if let Some(delta) = choice.delta {
            chunk.text = delta.content.or(delta.refusal).unwrap_or_default();
            chunk.tool_calls = delta
                .tool_calls
                .into_iter()
                .enumerate()
                .map(|(i, call)| {
                    let index = call.index.unwrap_or(u32::try_from(i).unwrap_or(u32::MAX));
                    let (name, arguments) = call.function.map_or((None, None), |f| (f.name, f.arguments));
                    ToolCallDelta::new(index, call.id, name, arguments.unwrap_or_default())
                })
                .collect();
        }
    }
    chunk.usage = wire.usage.and_then(|u| Some(Usage::new(u.prompt_tokens?, u.completion_tokens?)));
    Ok(ParsedChunk { chunk, model: wire.model.filter(|m| !m.is_empty()), finished })
}

/// How much of an error status's body is read, for its message.
const ERROR_BODY_BYTES: u64 = 64 * 1024;

/// The whole body, refused once it is (or says it will be) over `limit` bytes.
async fn read_bounded(mut response: reqwest::Response, limit: u64) -> Result<Vec<u8>, ModelError> {
    let declared = declared_length(&response);
    if let Some(length) = declared.filter(|&length| length > limit) {
        return Err(ModelError::ResponseTooLarge { limit, declared: Some(length) });
    }
    // Within the limit here, so the capacity is bounded by it.
    let mut body = Vec::with_capacity(usize::try_from(declared.unwrap_or(0)).unwrap_or(0));
    while let Some(chunk) = response.chunk().await.map_err(transport_error)? {
        if (body.len() as u64).saturating_add(chunk.len() as u64) > limit {
            return Err(ModelError::ResponseTooLarge { limit, declared });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// At most the first `limit` bytes of the body; what arrived before a read
/// error (the status is the news, not the body).
async fn read_prefix(mut response: reqwest::Response, limit: u64) -> Vec<u8> {
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let mut body = Vec::new();
    while body.len() < limit {
        match response.chunk().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk[..chunk.len().min(limit - body.len())]),
            Ok(None) | Err(_) => break,
        }
    }
    body
}

/// The body's length as the server announced it (`Content-Length`).
fn declared_length(response: &reqwest::Response) -> Option<u64> {
    let header = response.headers().get(reqwest::header::CONTENT_LENGTH);
    header.and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse().ok()).or_else(|| response.content_length())
}

fn transport_error(err: reqwest::Error) -> ModelError {
    if err.is_timeout() { ModelError::Timeout } else { ModelError::Transport(error_chain(&err)) }
}

fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text = format!("{text}: {cause}");
        source = cause.source();
    }
    text
}

/// `Retry-After` in seconds; the HTTP-date form is not used by model APIs.
/// A wait too long for a `Duration` (`1e20`, `inf`) reads as the longest
/// one: the node's retry policy caps it at its `max_delay` anyway.
fn parse_retry_after(value: &str) -> Option<Duration> {
    let secs: f64 = value.trim().parse().ok()?;
    if secs.is_nan() || secs < 0.0 {
        return None;
    }
    Some(Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX))
}

fn status_error(status: u16, retry_after: Option<Duration>, body: &str) -> ModelError {
    let message = error_message(body);
    match status {
        429 => ModelError::RateLimited { retry_after, message },
        401 | 403 => ModelError::Auth { status, message },
        _ => ModelError::Http { status, message },
    }
}

/// The server's `error.message` (or `error` string), else the body, shortened.
fn error_message(body: &str) -> String {
    let parsed: Option<Value> = serde_json::from_str(body).ok();
    let error = parsed.as_ref().and_then(|v| v.get("error"));
    let text = match error {
        Some(Value::String(s)) => s.as_str(),
        Some(e) => e.get("message").and_then(Value::as_str).unwrap_or(body),
        None => body,
    };
    shorten(text.trim())
}

fn shorten(text: &str) -> String {
    const MAX: usize = 500;
    match text.char_indices().nth(MAX) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

#[derive(Serialize)]
struct WireRequest<'a> {
    model: &'a str,
    messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_format: Option<Value>,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<Value>,
}

#[derive(Serialize)]
struct WireMessage<'a> {
    role: &'static str,
    content: Option<&'a str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<&'a str>,
}

fn wire_request<'a>(model: &'a str, req: &'a ChatRequest) -> WireRequest<'a> {
    WireRequest {
        model,
        messages: req.messages.iter().map(wire_message).collect(),
        tools: req
            .tools
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": t.name, "description": t.description, "parameters": t.parameters,
                }})
            })
            .collect(),
        max_tokens: req.max_output_tokens,
        temperature: req.temperature,
        response_format: req
            .response_schema
            .as_ref()
            .map(|s| json!({"type": "json_schema", "json_schema": {"name": s.name, "schema": s.schema}})),
        stream: false,
        stream_options: None,
    }
}

fn wire_message(m: &Message) -> WireMessage<'_> {
    let role = match m.role {
        Role::System => "system",
        Role::Human => "user",
        Role::Ai => "assistant",
        Role::Tool => "tool",
    };
    let tool_calls: Vec<Value> = m
        .tool_calls
        .iter()
        .map(|c| {
            // Arguments kept verbatim because they were not JSON go back verbatim.
            let arguments = match &c.arguments {
                Value::String(raw) => raw.clone(),
                other => other.to_string(),
            };
            json!({"id": c.id, "type": "function",
                   "function": {"name": c.name, "arguments": arguments}})
        })
        .collect();
    let content = (!m.content.is_empty() || tool_calls.is_empty()).then_some(m.content.as_str());
    WireMessage { role, content, tool_calls, tool_call_id: m.tool_call_id.as_deref() }
}

#[derive(Deserialize)]
struct WireReply {
    #[serde(default)]
    model: String,
    choices: Vec<WireChoice>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct WireChoice {
    message: WireReplyMessage,
}

#[derive(Deserialize)]
struct WireReplyMessage {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    refusal: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<WireToolCall>>,
}

#[derive(Deserialize)]
struct WireToolCall {
    #[serde(default)]
    id: Option<String>,
    function: WireFunction,
}

#[derive(Deserialize)]
struct WireFunction {
    name: String,
    #[serde(default)]
    arguments: Value,
}

#[derive(Deserialize)]
struct WireUsage {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
}

fn parse_reply(body: &str) -> Result<ChatReply, ModelError> {
    let reply: WireReply = serde_json::from_str(body)
        .map_err(|e| ModelError::MalformedReply(format!("not a chat completion ({e}): {}", shorten(body))))?;
    let choice = reply
        .choices
        .into_iter()
        .next()
        .ok_or_else(|| ModelError::MalformedReply("the reply has no choices".into()))?;
    let message = choice.message;
    let tool_calls = message
        .tool_calls
        .unwrap_or_default()
        .into_iter()
        .enumerate()
        .map(|(i, call)| {
            let id = call.id.unwrap_or_else(|| format!("call_{}", i + 1));
            ToolCall::new(id, call.function.name, parse_arguments(call.function.arguments))
        })
        .collect();
    let usage = reply.usage.and_then(|u| Some(Usage::new(u.prompt_tokens?, u.completion_tokens?)));
    Ok(ChatReply {
        text: message.content.or(message.refusal).unwrap_or_default(),
        tool_calls,
        usage,
        model: reply.model,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_seconds() {
        assert_eq!(parse_retry_after("2"), Some(Duration::from_secs(2)));
        assert_eq!(parse_retry_after(" 0.5 "), Some(Duration::from_millis(500)));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
        assert_eq!(parse_retry_after("-1"), None);
        assert_eq!(parse_retry_after("NaN"), None);
    }

    #[test]
    fn an_absurd_retry_after_reads_as_the_longest_wait() {
        assert_eq!(parse_retry_after("86400"), Some(Duration::from_secs(86_400)));
        assert_eq!(parse_retry_after("1e20"), Some(Duration::MAX));
        assert_eq!(parse_retry_after("inf"), Some(Duration::MAX));
    }

    #[test]
    fn arguments() {
        assert_eq!(parse_arguments(json!("{\"a\":1}")), json!({"a": 1}));
        assert_eq!(parse_arguments(json!("")), json!({}));
        assert_eq!(parse_arguments(json!("{oops")), json!("{oops"));
        assert_eq!(parse_arguments(json!({"a": 1})), json!({"a": 1}));
    }

    #[test]
    fn error_messages() {
        assert_eq!(error_message(r#"{"error":{"message":"slow down"}}"#), "slow down");
        assert_eq!(error_message(r#"{"error":"model not found"}"#), "model not found");
        assert_eq!(error_message("upstream down\n"), "upstream down");
    }

    #[test]
    fn config_from_lookup() {
        let cfg = OpenAiConfig::from_lookup(|k| match k {
            "AGENTFLOW_MODEL" => Some("qwen2.5".into()),
            "OPENAI_BASE_URL" => Some(OpenAiConfig::OLLAMA_BASE_URL.into()),
            "OPENAI_API_KEY" => Some(String::new()),
            _ => None,
        })
        .unwrap();
        assert_eq!(cfg.base_url, OpenAiConfig::OLLAMA_BASE_URL);
        assert_eq!(cfg.api_key, None);
        assert!(!format!("{:?}", cfg.clone().with_api_key("sk-secret")).contains("sk-secret"));
        let err = OpenAiConfig::from_lookup(|_| None).unwrap_err();
        assert!(err.to_string().contains("AGENTFLOW_MODEL"), "{err}");
    }

    #[test]
    fn rejects_bad_urls() {
        assert!(OpenAiCompatible::new(OpenAiConfig::new("localhost:11434", "m")).is_err());
        assert!(OpenAiCompatible::new(OpenAiConfig::ollama("")).is_err());
        let https = OpenAiCompatible::new(OpenAiConfig::new(OpenAiConfig::OPENAI_BASE_URL, "m"));
        assert_eq!(https.is_ok(), cfg!(feature = "tls"));
    }
}
