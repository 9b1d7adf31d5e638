//! What goes over the wire to an OpenAI-compatible server and back: the request and message
//! shapes, the server-sent event stream of a streamed reply and its chunks, and the reading of
//! bounded bodies and error replies.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::super::assemble::parse_arguments;
use super::super::{ChatChunk, ChatReply, ChatRequest, ModelError, ToolCallDelta, Usage};
use crate::core::message::{Message, Role, ToolCall};

/// Splits a server-sent event stream into the data of its events, across
/// network reads that may cut a line (or a UTF-8 character) anywhere.
#[derive(Default)]
pub(super) struct SseLines {
    /// Bytes of the line not finished yet.
    pub(super) partial: Vec<u8>,
    /// The `data:` lines of the event not finished yet.
    pub(super) data: Vec<String>,
}

impl SseLines {
    /// The data of the events `bytes` completes, in order.
    pub(super) fn feed(&mut self, bytes: &[u8]) -> Vec<String> {
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
pub(super) struct ParsedChunk {
    pub(super) chunk: ChatChunk,
    pub(super) model: Option<String>,
    /// Why the model stopped, on the chunk that says it (the stream is then complete).
    pub(super) finish_reason: Option<String>,
}

#[derive(Deserialize)]
pub(super) struct WireChunk {
    #[serde(default)]
    pub(super) model: Option<String>,
    #[serde(default)]
    pub(super) choices: Vec<WireChunkChoice>,
    #[serde(default)]
    pub(super) usage: Option<WireUsage>,
    #[serde(default)]
    pub(super) error: Option<Value>,
}

#[derive(Deserialize)]
pub(super) struct WireChunkChoice {
    #[serde(default)]
    pub(super) delta: Option<WireDelta>,
    #[serde(default)]
    pub(super) finish_reason: Option<String>,
}

#[derive(Deserialize)]
pub(super) struct WireDelta {
    #[serde(default)]
    pub(super) content: Option<String>,
    #[serde(default)]
    pub(super) refusal: Option<String>,
    #[serde(default)]
    pub(super) tool_calls: Vec<WireToolCallDelta>,
}

#[derive(Deserialize)]
pub(super) struct WireToolCallDelta {
    #[serde(default)]
    pub(super) index: Option<u32>,
    #[serde(default)]
    pub(super) id: Option<String>,
    #[serde(default)]
    pub(super) function: Option<WireFunctionDelta>,
}

#[derive(Deserialize)]
pub(super) struct WireFunctionDelta {
    #[serde(default)]
    pub(super) name: Option<String>,
    #[serde(default)]
    pub(super) arguments: Option<String>,
}

/// Event `n` (from 1) of a streamed reply.
pub(super) fn parse_chunk(data: &str, n: usize) -> Result<ParsedChunk, ModelError> {
    let wire: WireChunk = serde_json::from_str(data).map_err(|e| {
        ModelError::MalformedReply(format!("stream chunk {n} is not a chat-completion chunk ({e}): {}", shorten(data)))
    })?;
    if let Some(error) = wire.error {
        let message = error_message(&json!({ "error": error }).to_string());
        return Err(ModelError::Transport(format!("the server sent an error mid-stream: {message}")));
    }
    let mut chunk = ChatChunk::default();
    let mut finish_reason = None;
    if let Some(choice) = wire.choices.into_iter().next() {
        finish_reason = choice.finish_reason;
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
    chunk.finish_reason.clone_from(&finish_reason);
    Ok(ParsedChunk { chunk, model: wire.model.filter(|m| !m.is_empty()), finish_reason })
}

/// How much of an error status's body is read, for its message.
pub(super) const ERROR_BODY_BYTES: u64 = 64 * 1024;

/// The whole body, refused once it is (or says it will be) over `limit` bytes.
pub(super) async fn read_bounded(mut response: reqwest::Response, limit: u64) -> Result<Vec<u8>, ModelError> {
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
pub(super) async fn read_prefix(mut response: reqwest::Response, limit: u64) -> Vec<u8> {
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
pub(super) fn declared_length(response: &reqwest::Response) -> Option<u64> {
    let header = response.headers().get(reqwest::header::CONTENT_LENGTH);
    header.and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse().ok()).or_else(|| response.content_length())
}

pub(super) fn transport_error(err: reqwest::Error) -> ModelError {
    if err.is_timeout() { ModelError::Timeout } else { ModelError::Transport(error_chain(&err)) }
}

pub(super) fn error_chain(err: &dyn std::error::Error) -> String {
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
pub(super) fn parse_retry_after(value: &str) -> Option<Duration> {
    let secs: f64 = value.trim().parse().ok()?;
    if secs.is_nan() || secs < 0.0 {
        return None;
    }
    Some(Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX))
}

pub(super) fn status_error(status: u16, retry_after: Option<Duration>, body: &str) -> ModelError {
    let message = error_message(body);
    match status {
        429 => ModelError::RateLimited { retry_after, message },
        401 | 403 => ModelError::Auth { status, message },
        _ => ModelError::Http { status, message },
    }
}

/// The server's `error.message` (or `error` string), else the body, shortened.
pub(super) fn error_message(body: &str) -> String {
    let parsed: Option<Value> = serde_json::from_str(body).ok();
    let error = parsed.as_ref().and_then(|v| v.get("error"));
    let text = match error {
        Some(Value::String(s)) => s.as_str(),
        Some(e) => e.get("message").and_then(Value::as_str).unwrap_or(body),
        None => body,
    };
    shorten(text.trim())
}

pub(super) fn shorten(text: &str) -> String {
    const MAX: usize = 500;
    match text.char_indices().nth(MAX) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

#[derive(Serialize)]
pub(super) struct WireRequest<'a> {
    pub(super) model: &'a str,
    pub(super) messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(super) tools: Vec<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) response_format: Option<Value>,
    pub(super) stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) stream_options: Option<Value>,
}

#[derive(Serialize)]
pub(super) struct WireMessage<'a> {
    pub(super) role: &'static str,
    pub(super) content: Option<&'a str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(super) tool_calls: Vec<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) tool_call_id: Option<&'a str>,
}

pub(super) fn wire_request<'a>(model: &'a str, req: &'a ChatRequest) -> WireRequest<'a> {
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

pub(super) fn wire_message(m: &Message) -> WireMessage<'_> {
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
pub(super) struct WireReply {
    #[serde(default)]
    pub(super) model: String,
    pub(super) choices: Vec<WireChoice>,
    #[serde(default)]
    pub(super) usage: Option<WireUsage>,
}

#[derive(Deserialize)]
pub(super) struct WireChoice {
    pub(super) message: WireReplyMessage,
    #[serde(default)]
    pub(super) finish_reason: Option<String>,
}

#[derive(Deserialize)]
pub(super) struct WireReplyMessage {
    #[serde(default)]
    pub(super) content: Option<String>,
    #[serde(default)]
    pub(super) refusal: Option<String>,
    #[serde(default)]
    pub(super) tool_calls: Option<Vec<WireToolCall>>,
}

#[derive(Deserialize)]
pub(super) struct WireToolCall {
    #[serde(default)]
    pub(super) id: Option<String>,
    pub(super) function: WireFunction,
}

#[derive(Deserialize)]
pub(super) struct WireFunction {
    pub(super) name: String,
    #[serde(default)]
    pub(super) arguments: Value,
}

#[derive(Deserialize)]
pub(super) struct WireUsage {
    pub(super) prompt_tokens: Option<u64>,
    pub(super) completion_tokens: Option<u64>,
}

pub(super) fn parse_reply(body: &str) -> Result<ChatReply, ModelError> {
    let reply: WireReply = serde_json::from_str(body)
        .map_err(|e| ModelError::MalformedReply(format!("not a chat completion ({e}): {}", shorten(body))))?;
    let choice = reply
        .choices
        .into_iter()
        .next()
        .ok_or_else(|| ModelError::MalformedReply("the reply has no choices".into()))?;
    let (message, finish_reason) = (choice.message, choice.finish_reason);
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
        finish_reason,
    })
}
