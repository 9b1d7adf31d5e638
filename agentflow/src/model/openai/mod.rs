//! The OpenAI-compatible chat-completions client.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::json;

use super::{ChatChunk, ChatModel, ChatReply, ChatRequest, ChunkSink, ModelError, ReplyAssembler};

mod wire;
use wire::{
    ERROR_BODY_BYTES, SseLines, WireRequest, declared_length, error_chain, parse_chunk, parse_reply, parse_retry_after,
    read_bounded, read_prefix, status_error, transport_error, wire_request,
};

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

    fn provider_name(&self) -> &str {
        "openai"
    }

    fn request_model(&self) -> &str {
        &self.config.model
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
                if let Some(reason) = parsed.finish_reason {
                    finished = true;
                    reply.set_finish_reason(reason);
                }
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

#[cfg(test)]
mod tests {
    use super::super::assemble::parse_arguments;
    use super::wire::error_message;
    use super::*;
    use serde_json::json;

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

    #[test]
    fn a_streamed_chunk_carries_its_finish_reason() {
        let last = super::wire::parse_chunk(r#"{"choices":[{"delta":{},"finish_reason":"stop"}]}"#, 2).expect("chunk");
        assert_eq!(last.chunk.finish_reason.as_deref(), Some("stop"));
        let first = super::wire::parse_chunk(r#"{"choices":[{"delta":{"content":"hi"}}]}"#, 1).expect("chunk");
        assert_eq!((first.chunk.text.as_str(), first.chunk.finish_reason), ("hi", None));
    }
}
