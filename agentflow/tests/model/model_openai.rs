//! Wire-format tests of the OpenAI-compatible adapter against a hand-written
//! HTTP/1.1 server on 127.0.0.1 that serves recorded replies and captures the
//! request.
#![cfg(feature = "openai")]

use std::time::{Duration, Instant};

use agentflow::message::{Message, ToolCall, ToolSpec};
use agentflow::model::{ChatModel, ChatRequest, ModelError, OpenAiCompatible, OpenAiConfig, ResponseSchema, Usage};
use agentflow::{ErrorClass, NodeError};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// What the server saw.
struct Captured {
    request_line: String,
    headers: Vec<(String, String)>,
    body: Value,
}

impl Captured {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

async fn read_request(stream: &mut TcpStream) -> Captured {
    let mut buf = Vec::new();
    let head_end = loop {
        let mut chunk = [0; 4096];
        let n = stream.read(&mut chunk).await.unwrap();
        assert!(n > 0, "client closed before sending a request");
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8(buf[..head_end].to_vec()).unwrap();
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap().to_owned();
    let headers: Vec<(String, String)> =
        lines.filter_map(|l| l.split_once(':')).map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned())).collect();
    let len: usize =
        headers.iter().find(|(k, _)| k.eq_ignore_ascii_case("content-length")).map_or(0, |(_, v)| v.parse().unwrap());
    while buf.len() < head_end + len {
        let mut chunk = [0; 4096];
        let n = stream.read(&mut chunk).await.unwrap();
        assert!(n > 0, "client closed mid-body");
        buf.extend_from_slice(&chunk[..n]);
    }
    Captured { request_line, headers, body: serde_json::from_slice(&buf[head_end..head_end + len]).unwrap() }
}

fn http(status: &str, headers: &[(&str, &str)], body: &str) -> String {
    let mut out = format!("HTTP/1.1 {status}\r\nContent-Length: {}\r\n", body.len());
    out.push_str("Content-Type: application/json\r\nConnection: close\r\n");
    for (k, v) in headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out + "\r\n" + body
}

/// Serve one request with `response` (or never answer if `None`); returns the
/// base URL and the captured request.
async fn serve_once(response: Option<String>) -> (String, JoinHandle<Captured>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    let handle = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let captured = read_request(&mut stream).await;
        match response {
            Some(response) => {
                stream.write_all(response.as_bytes()).await.unwrap();
                stream.shutdown().await.unwrap();
            }
            None => tokio::time::sleep(Duration::from_secs(30)).await,
        }
        captured
    });
    (base, handle)
}

fn model(base: &str) -> OpenAiCompatible {
    OpenAiCompatible::new(OpenAiConfig::new(base, "qwen2.5").with_timeout(Duration::from_secs(5))).unwrap()
}

fn ask(text: &str) -> ChatRequest {
    ChatRequest::new(vec![Message::human(text)])
}

const TOOL_REPLY: &str = r#"{
  "id": "chatcmpl-1", "object": "chat.completion", "model": "qwen2.5:7b",
  "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
    "role": "assistant", "content": null,
    "tool_calls": [
      {"id": "call_a", "type": "function", "function": {"name": "add", "arguments": "{\"a\":3,\"b\":4}"}},
      {"id": "call_b", "type": "function", "function": {"name": "multiply", "arguments": "{\"a\": 7, oops"}}
    ]}}],
  "usage": {"prompt_tokens": 42, "completion_tokens": 17, "total_tokens": 59}
}"#;

#[tokio::test]
async fn request_wire_format() {
    let (base, server) = serve_once(Some(http("200 OK", &[], TOOL_REPLY))).await;
    let model = OpenAiCompatible::new(OpenAiConfig::new(&base, "qwen2.5").with_api_key("sk-test")).unwrap();
    let add = ToolSpec::new(
        "add",
        "Add two numbers.",
        json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
               "required": ["a", "b"], "additionalProperties": false}),
    );
    let req = ChatRequest::new(vec![
        Message::system("Use the tools."),
        Message::human("3 + 4?"),
        Message::ai_with_tool_calls("", vec![ToolCall::new("call_1", "add", json!({"a": 3, "b": 4}))]),
        Message::tool("call_1", r#"{"ok":true,"value":7.0}"#),
    ])
    .with_tools(vec![add])
    .with_max_output_tokens(64)
    .with_temperature(0.0);
    model.chat(&req).await.unwrap();
    let seen = server.await.unwrap();

    assert_eq!(seen.request_line, "POST /v1/chat/completions HTTP/1.1");
    assert_eq!(seen.header("authorization"), Some("Bearer sk-test"));
    assert_eq!(seen.header("content-type"), Some("application/json"));
    assert_eq!(
        seen.body,
        json!({
            "model": "qwen2.5",
            "stream": false,
            "max_tokens": 64,
            "temperature": 0.0,
            "messages": [
                {"role": "system", "content": "Use the tools."},
                {"role": "user", "content": "3 + 4?"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_1", "type": "function",
                     "function": {"name": "add", "arguments": "{\"a\":3,\"b\":4}"}}]},
                {"role": "tool", "content": "{\"ok\":true,\"value\":7.0}", "tool_call_id": "call_1"},
            ],
            "tools": [{"type": "function", "function": {
                "name": "add", "description": "Add two numbers.",
                "parameters": {"type": "object",
                    "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                    "required": ["a", "b"], "additionalProperties": false}}}],
        })
    );
}

#[tokio::test]
async fn response_schema_goes_out_as_response_format() {
    let reply = r#"{"model":"m","choices":[{"message":{"role":"assistant","content":"{}"}}]}"#;
    let (base, server) = serve_once(Some(http("200 OK", &[], reply))).await;
    let schema = ResponseSchema { name: "Verdict".into(), schema: json!({"type": "object"}) };
    model(&base).chat(&ask("judge").with_response_schema(schema)).await.unwrap();
    let seen = server.await.unwrap();
    assert_eq!(
        seen.body["response_format"],
        json!({"type": "json_schema", "json_schema": {"name": "Verdict", "schema": {"type": "object"}}})
    );
    assert!(seen.body.get("tools").is_none());
    assert!(seen.body.get("max_tokens").is_none());
}

#[tokio::test]
async fn parses_tool_calls_and_usage() {
    let (base, _server) = serve_once(Some(http("200 OK", &[], TOOL_REPLY))).await;
    let reply = model(&base).chat(&ask("3 + 4, then * 5")).await.unwrap();
    assert_eq!(reply.text, "");
    assert_eq!(reply.model, "qwen2.5:7b");
    assert_eq!(reply.usage, Some(Usage::new(42, 17)));
    assert_eq!(
        reply.tool_calls,
        vec![
            ToolCall::new("call_a", "add", json!({"a": 3, "b": 4})),
            // Invalid JSON arguments are carried verbatim, for the tool layer to reject.
            ToolCall::new("call_b", "multiply", json!("{\"a\": 7, oops")),
        ]
    );
    let message = reply.into_message("m-1");
    assert_eq!(message.id, "m-1");
    assert_eq!(message.tool_calls.len(), 2);
}

#[tokio::test]
async fn missing_usage_is_unknown_and_no_key_sends_no_auth() {
    let reply = r#"{"model":"llama3","choices":[{"message":{"role":"assistant","content":"7"}}]}"#;
    let (base, server) = serve_once(Some(http("200 OK", &[], reply))).await;
    let reply = model(&base).chat(&ask("3 + 4?")).await.unwrap();
    assert_eq!(reply.text, "7");
    assert!(reply.tool_calls.is_empty());
    assert_eq!(reply.usage, None);
    assert_eq!(server.await.unwrap().header("authorization"), None);
}

#[tokio::test]
async fn rate_limit_with_retry_after_is_transient() {
    let body = r#"{"error":{"message":"Rate limit reached","type":"requests"}}"#;
    let (base, _server) = serve_once(Some(http("429 Too Many Requests", &[("Retry-After", "2")], body))).await;
    let err = model(&base).chat(&ask("hi")).await.unwrap_err();
    assert_eq!(
        err,
        ModelError::RateLimited { retry_after: Some(Duration::from_secs(2)), message: "Rate limit reached".into() }
    );
    assert_eq!(err.class(), ErrorClass::Transient);
    let node = NodeError::from(err);
    assert_eq!(node.class, ErrorClass::Transient);
    assert_eq!(node.retry_after, Some(Duration::from_secs(2)));
}

#[tokio::test]
async fn server_error_is_transient() {
    let (base, _server) = serve_once(Some(http("500 Internal Server Error", &[], "upstream exploded"))).await;
    let err = model(&base).chat(&ask("hi")).await.unwrap_err();
    assert_eq!(err, ModelError::Http { status: 500, message: "upstream exploded".into() });
    assert_eq!(err.class(), ErrorClass::Transient);
}

#[tokio::test]
async fn bad_request_is_fatal() {
    let body = r#"{"error":"model \"nope\" not found, try pulling it first"}"#;
    let (base, _server) = serve_once(Some(http("404 Not Found", &[], body))).await;
    let err = model(&base).chat(&ask("hi")).await.unwrap_err();
    assert!(matches!(&err, ModelError::Http { status: 404, message } if message.contains("pulling")));
    assert_eq!(err.class(), ErrorClass::Fatal);
}

#[tokio::test]
async fn unauthorized_is_fatal() {
    let body = r#"{"error":{"message":"Incorrect API key provided","code":"invalid_api_key"}}"#;
    let (base, _server) = serve_once(Some(http("401 Unauthorized", &[], body))).await;
    let err = model(&base).chat(&ask("hi")).await.unwrap_err();
    assert_eq!(err, ModelError::Auth { status: 401, message: "Incorrect API key provided".into() });
    assert_eq!(err.class(), ErrorClass::Fatal);
    assert_eq!(NodeError::from(err).class, ErrorClass::Fatal);
}

#[tokio::test]
async fn silent_server_times_out() {
    let (base, _server) = serve_once(None).await;
    let model = OpenAiCompatible::new(OpenAiConfig::new(&base, "m").with_timeout(Duration::from_millis(200))).unwrap();
    let started = Instant::now();
    let err = model.chat(&ask("hi")).await.unwrap_err();
    assert_eq!(err, ModelError::Timeout);
    assert_eq!(err.class(), ErrorClass::Transient);
    assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
}

#[tokio::test]
async fn malformed_json_is_reported() {
    let (base, _server) = serve_once(Some(http("200 OK", &[], "{\"choices\": [ oops"))).await;
    let err = model(&base).chat(&ask("hi")).await.unwrap_err();
    assert!(matches!(&err, ModelError::MalformedReply(m) if m.contains("oops")), "{err}");
    assert_eq!(err.class(), ErrorClass::Transient);

    let (base, _server) = serve_once(Some(http("200 OK", &[], r#"{"choices":[]}"#))).await;
    let err = model(&base).chat(&ask("hi")).await.unwrap_err();
    assert!(matches!(err, ModelError::MalformedReply(_)), "{err}");
}

#[tokio::test]
async fn refused_connection_is_transport() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    drop(listener);
    let err = model(&base).chat(&ask("hi")).await.unwrap_err();
    assert!(matches!(err, ModelError::Transport(_)), "{err}");
    assert_eq!(err.class(), ErrorClass::Transient);
}

// ---------------------------------------------------------------- bounded replies

/// Accepts one request and answers with `head` (status line and headers),
/// then `body_chunks` as a chunked body: `None` for an endless one. Returns
/// the base URL and a handle to the bytes of body written before the client
/// hung up.
async fn serve_chunked(head: &'static str, body_chunks: Option<Vec<String>>) -> (String, JoinHandle<u64>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    let handle = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        read_request(&mut stream).await;
        stream.write_all(head.as_bytes()).await.unwrap();
        let mut written = 0u64;
        match body_chunks {
            Some(chunks) => {
                for chunk in chunks {
                    stream.write_all(format!("{:x}\r\n{chunk}\r\n", chunk.len()).as_bytes()).await.unwrap();
                    written += chunk.len() as u64;
                }
                stream.write_all(b"0\r\n\r\n").await.unwrap();
            }
            None => {
                let chunk = format!("{:x}\r\n{}\r\n", 64 * 1024, "x".repeat(64 * 1024));
                // Until the client stops reading and closes the connection.
                while stream.write_all(chunk.as_bytes()).await.is_ok() {
                    written += 64 * 1024;
                }
            }
        }
        written
    });
    (base, handle)
}

const CHUNKED_HEAD: &str = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";

#[tokio::test]
async fn a_huge_content_length_is_refused_before_the_body_is_read() {
    // 768 MiB announced; only the start of it ever comes, and the server
    // then holds the connection open. Reading the body would end in the
    // client's timeout; the announced length alone ends the call.
    let head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 805306368\r\n\r\n{\"choices\":";
    let (base, _server) = serve_once_raw(head).await;
    let model = OpenAiCompatible::new(OpenAiConfig::new(&base, "m").with_timeout(Duration::from_secs(20))).unwrap();
    let err = model.chat(&ask("hi")).await.unwrap_err();
    assert_eq!(
        err,
        ModelError::ResponseTooLarge { limit: OpenAiConfig::DEFAULT_MAX_RESPONSE_BYTES, declared: Some(805_306_368) }
    );
    assert_eq!(err.class(), ErrorClass::Fatal);
    let text = err.to_string();
    assert!(text.contains("8388608 bytes") && text.contains("with_max_response_bytes"), "{text}");
}

/// Sends `response` and keeps the connection open.
async fn serve_once_raw(response: &'static str) -> (String, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    let handle = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        read_request(&mut stream).await;
        stream.write_all(response.as_bytes()).await.unwrap();
        tokio::time::sleep(Duration::from_secs(60)).await;
    });
    (base, handle)
}

#[tokio::test]
async fn an_endless_chunked_body_is_dropped_once_it_passes_the_limit() {
    let (base, server) = serve_chunked(CHUNKED_HEAD, None).await;
    let config = OpenAiConfig::new(&base, "m").with_timeout(Duration::from_secs(20)).with_max_response_bytes(1 << 20);
    let model = OpenAiCompatible::new(config).unwrap();
    let err = model.chat(&ask("hi")).await.unwrap_err();
    assert_eq!(err, ModelError::ResponseTooLarge { limit: 1 << 20, declared: None });
    // The client hung up: the server's writes fail and it stops, having got
    // out no more than the limit plus what the sockets buffer.
    let written = tokio::time::timeout(Duration::from_secs(60), server).await.expect("the client hung up").unwrap();
    assert!(written < 64 << 20, "{written} bytes written");
}

#[tokio::test]
async fn the_reply_bound_is_configurable() {
    let reply = r#"{"model":"m","choices":[{"message":{"role":"assistant","content":"seven"}}]}"#;
    let limit = reply.len() as u64 - 1;
    // A Content-Length one byte over the bound is refused...
    let (base, _server) = serve_once(Some(http("200 OK", &[], reply))).await;
    let config = OpenAiConfig::new(&base, "m").with_max_response_bytes(limit);
    let err = OpenAiCompatible::new(config).unwrap().chat(&ask("hi")).await.unwrap_err();
    assert_eq!(err, ModelError::ResponseTooLarge { limit, declared: Some(limit + 1) });
    // ...and so is the same body sent chunked, without a length.
    let (base, _server) = serve_chunked(CHUNKED_HEAD, Some(vec![reply[..10].into(), reply[10..].into()])).await;
    let config = OpenAiConfig::new(&base, "m").with_max_response_bytes(limit);
    let err = OpenAiCompatible::new(config).unwrap().chat(&ask("hi")).await.unwrap_err();
    assert_eq!(err, ModelError::ResponseTooLarge { limit, declared: None });
    // At the bound exactly, chunked, it is read whole.
    let (base, _server) = serve_chunked(CHUNKED_HEAD, Some(vec![reply[..10].into(), reply[10..].into()])).await;
    let config = OpenAiConfig::new(&base, "m").with_max_response_bytes(limit + 1);
    let answer = OpenAiCompatible::new(config).unwrap().chat(&ask("hi")).await.unwrap();
    assert_eq!(answer.text, "seven");
}

#[tokio::test]
async fn an_error_status_with_a_huge_body_keeps_only_a_prefix_for_its_message() {
    let head = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n";
    let (base, _server) = serve_chunked(head, None).await;
    let model = OpenAiCompatible::new(OpenAiConfig::new(&base, "m").with_timeout(Duration::from_secs(20))).unwrap();
    let err = model.chat(&ask("hi")).await.unwrap_err();
    let ModelError::Http { status: 503, message } = &err else { panic!("{err:?}") };
    // The message is the start of the body, shortened.
    assert!(message.starts_with("xxxx") && message.chars().count() <= 501, "{message}");
    assert_eq!(err.class(), ErrorClass::Transient);
}
