//! Streaming tests of the OpenAI-compatible adapter (`chat_stream`, server-
//! sent events) against a hand-written HTTP/1.1 server on 127.0.0.1 that
//! writes its reply in small pieces, cutting lines and UTF-8 characters.
//!
//! - A streamed reply adds up to the same `ChatReply` as the whole one: text,
//!   tool calls assembled from argument deltas, usage, model.
//! - A stream cut off mid-reply is a transient error, and a node's retry
//!   policy asks again (the run's stream shows both attempts' chunks).
//! - A malformed chunk is a `MalformedReply` naming it.
#![cfg(feature = "openai")]

use std::sync::Mutex;
use std::time::Duration;

use agentflow::message::{Message, ToolCall};
use agentflow::model::{
    ChatChunk, ChatModel, ChatRequest, ChunkSink, ModelError, OpenAiCompatible, OpenAiConfig, Usage,
};
use agentflow::prelude::*;
use agentflow::{ErrorClass, Event, StreamMode, StreamPart};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// A bound on every test so a regression hangs no CI job.
const GUARD: Duration = Duration::from_secs(10);

/// Reads one request; returns its JSON body.
async fn read_request(stream: &mut TcpStream) -> Value {
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
    let head = String::from_utf8_lossy(&buf[..head_end]).to_lowercase();
    let len: usize =
        head.lines().find_map(|l| l.strip_prefix("content-length:")).map_or(0, |v| v.trim().parse().unwrap());
    while buf.len() < head_end + len {
        let mut chunk = [0; 4096];
        let n = stream.read(&mut chunk).await.unwrap();
        assert!(n > 0, "client closed mid-body");
        buf.extend_from_slice(&chunk[..n]);
    }
    serde_json::from_slice(&buf[head_end..head_end + len]).unwrap()
}

/// How one connection is answered.
enum Answer {
    /// A whole JSON reply.
    Whole(String),
    /// A server-sent event stream, written in pieces of `piece` bytes (each
    /// an HTTP chunk, flushed); `cut`: close the connection after this many
    /// pieces, without ending the body.
    Events { body: String, piece: usize, cut: Option<usize> },
}

/// Answers one connection per entry of `answers`, in order; returns the base
/// URL and the request bodies seen.
async fn serve(answers: Vec<Answer>) -> (String, JoinHandle<Vec<Value>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    let handle = tokio::spawn(async move {
        let mut seen = Vec::new();
        for answer in answers {
            let (mut stream, _) = listener.accept().await.unwrap();
            seen.push(read_request(&mut stream).await);
            match answer {
                Answer::Whole(body) => {
                    let head = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    );
                    stream.write_all((head + &body).as_bytes()).await.unwrap();
                }
                Answer::Events { body, piece, cut } => {
                    let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
                    stream.write_all(head.as_bytes()).await.unwrap();
                    for (n, bytes) in body.as_bytes().chunks(piece).enumerate() {
                        if cut == Some(n) {
                            break;
                        }
                        stream.write_all(format!("{:x}\r\n", bytes.len()).as_bytes()).await.unwrap();
                        stream.write_all(bytes).await.unwrap();
                        stream.write_all(b"\r\n").await.unwrap();
                        stream.flush().await.unwrap();
                    }
                    if cut.is_none() {
                        stream.write_all(b"0\r\n\r\n").await.unwrap();
                    }
                }
            }
            stream.shutdown().await.ok();
        }
        seen
    });
    (base, handle)
}

fn model(base: &str) -> OpenAiCompatible {
    OpenAiCompatible::new(OpenAiConfig::new(base, "qwen2.5").with_timeout(Duration::from_secs(5))).unwrap()
}

fn ask(text: &str) -> ChatRequest {
    ChatRequest::new(vec![Message::human(text)])
}

/// `events` as a server-sent event stream ending in `[DONE]`.
fn sse(events: &[Value]) -> String {
    let mut body: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
    body.push_str("data: [DONE]\n\n");
    body
}

fn delta(delta: Value) -> Value {
    json!({"id": "c1", "object": "chat.completion.chunk", "model": "qwen2.5:7b",
           "choices": [{"index": 0, "delta": delta, "finish_reason": null}]})
}

fn finish(reason: &str) -> Value {
    json!({"id": "c1", "object": "chat.completion.chunk", "model": "qwen2.5:7b",
           "choices": [{"index": 0, "delta": {}, "finish_reason": reason}]})
}

const TEXT: &str = "Seven — that is 3 + 4, café.";

/// The same answer as a whole reply and as events: text, two tool calls
/// whose arguments come in pieces (one not JSON), usage last.
fn whole_reply() -> String {
    json!({
        "id": "c1", "object": "chat.completion", "model": "qwen2.5:7b",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": TEXT,
            "tool_calls": [
                {"id": "call_a", "type": "function", "function": {"name": "add", "arguments": "{\"a\":3,\"b\":4}"}},
                {"id": "call_b", "type": "function", "function": {"name": "multiply", "arguments": "{\"a\": 7, oops"}}
            ]}}],
        "usage": {"prompt_tokens": 42, "completion_tokens": 17, "total_tokens": 59}
    })
    .to_string()
}

fn streamed_reply() -> String {
    let mut events = vec![delta(json!({"role": "assistant", "content": ""}))];
    for piece in ["Seven — ", "that is 3 + 4", ", café."] {
        events.push(delta(json!({"content": piece})));
    }
    events.push(delta(json!({"tool_calls": [
        {"index": 0, "id": "call_a", "type": "function", "function": {"name": "add", "arguments": ""}}]})));
    for piece in ["{\"a\"", ":3,\"b", "\":4}"] {
        events.push(delta(json!({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})));
    }
    events.push(delta(json!({"tool_calls": [
        {"index": 1, "id": "call_b", "type": "function", "function": {"name": "multiply", "arguments": "{\"a\": 7"}}]})));
    events.push(delta(json!({"tool_calls": [{"index": 1, "function": {"arguments": ", oops"}}]})));
    events.push(finish("tool_calls"));
    events.push(json!({"id": "c1", "object": "chat.completion.chunk", "model": "qwen2.5:7b", "choices": [],
                       "usage": {"prompt_tokens": 42, "completion_tokens": 17, "total_tokens": 59}}));
    sse(&events)
}

/// How many whole pieces of `piece` bytes of `body` come before `marker`.
fn pieces_before(body: &str, marker: &str, piece: usize) -> usize {
    body.find(marker).expect("the marker is in the body") / piece
}

/// Streams `req` from `model`, returning the result and the chunks handed over.
async fn stream_chat(
    model: &OpenAiCompatible,
    req: &ChatRequest,
) -> (Result<agentflow::model::ChatReply, ModelError>, Vec<ChatChunk>) {
    let chunks = Mutex::new(Vec::new());
    let push = |chunk: ChatChunk| chunks.lock().unwrap().push(chunk);
    let result = tokio::time::timeout(GUARD, model.chat_stream(req, &ChunkSink::new(&push))).await.expect("no hang");
    (result, chunks.into_inner().unwrap())
}

#[tokio::test]
async fn a_streamed_reply_in_small_pieces_equals_the_whole_reply() {
    let (base, _server) = serve(vec![Answer::Whole(whole_reply())]).await;
    let whole = model(&base).chat(&ask("3 + 4?")).await.unwrap();

    // 5-byte pieces cut SSE lines, JSON and the multi-byte characters anywhere.
    let (base, server) = serve(vec![Answer::Events { body: streamed_reply(), piece: 5, cut: None }]).await;
    let (streamed, chunks) = stream_chat(&model(&base), &ask("3 + 4?")).await;
    let streamed = streamed.unwrap();
    assert_eq!(streamed, whole);
    assert_eq!(streamed.text, TEXT);
    assert_eq!(
        streamed.tool_calls,
        vec![
            ToolCall::new("call_a", "add", json!({"a": 3, "b": 4})),
            ToolCall::new("call_b", "multiply", json!("{\"a\": 7, oops"))
        ]
    );
    assert_eq!(streamed.usage, Some(Usage::new(42, 17)));
    assert_eq!(streamed.model, "qwen2.5:7b");

    // The chunks are the deltas as they came (the empty role-only one left out).
    let texts: Vec<&str> = chunks.iter().map(|c| c.text.as_str()).filter(|t| !t.is_empty()).collect();
    assert_eq!(texts, ["Seven — ", "that is 3 + 4", ", café."]);
    let args: String =
        chunks.iter().flat_map(|c| &c.tool_calls).filter(|d| d.index == 0).map(|d| d.arguments.as_str()).collect();
    assert_eq!(args, "{\"a\":3,\"b\":4}");
    assert_eq!(chunks.iter().filter_map(|c| c.usage).collect::<Vec<_>>(), [Usage::new(42, 17)]);
    assert!(chunks.iter().all(|c| *c != ChatChunk::default()));

    let body = &server.await.unwrap()[0];
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
}

#[tokio::test]
async fn a_stream_without_done_ends_at_its_finish_reason() {
    let body: String =
        [delta(json!({"content": "7"})), finish("stop")].iter().map(|e| format!("data: {e}\n\n")).collect();
    let (base, _server) = serve(vec![Answer::Events { body, piece: 3, cut: None }]).await;
    let (reply, _) = stream_chat(&model(&base), &ask("3 + 4?")).await;
    let reply = reply.unwrap();
    assert_eq!(reply.text, "7");
    assert_eq!(reply.usage, None, "the server reported no usage");
}

#[tokio::test]
async fn a_stream_cut_mid_reply_is_a_transient_error() {
    // The connection drops in the middle of the body, after the text.
    let cut = pieces_before(&streamed_reply(), "call_a", 16);
    let (base, _server) = serve(vec![Answer::Events { body: streamed_reply(), piece: 16, cut: Some(cut) }]).await;
    let (result, chunks) = stream_chat(&model(&base), &ask("3 + 4?")).await;
    let err = result.unwrap_err();
    assert!(matches!(err, ModelError::Transport(_)), "{err:?}");
    assert_eq!(err.class(), ErrorClass::Transient);
    assert!(!chunks.is_empty(), "the chunks before the cut were handed over");

    // The body ends cleanly, but before `[DONE]` or a finish reason.
    let body: String = [delta(json!({"content": "Sev"}))].iter().map(|e| format!("data: {e}\n\n")).collect();
    let (base, _server) = serve(vec![Answer::Events { body, piece: 7, cut: None }]).await;
    let (result, _) = stream_chat(&model(&base), &ask("3 + 4?")).await;
    let err = result.unwrap_err();
    assert!(matches!(&err, ModelError::Transport(m) if m.contains("before `data: [DONE]`")), "{err}");
    assert_eq!(err.class(), ErrorClass::Transient);
}

#[tokio::test]
async fn a_malformed_chunk_is_a_malformed_reply_naming_it() {
    let body = format!("data: {}\n\ndata: {{\"choices\": [oops\n\ndata: [DONE]\n\n", delta(json!({"content": "7"})));
    let (base, _server) = serve(vec![Answer::Events { body, piece: 4, cut: None }]).await;
    let (result, chunks) = stream_chat(&model(&base), &ask("3 + 4?")).await;
    let err = result.unwrap_err();
    assert!(
        matches!(&err, ModelError::MalformedReply(m) if m.contains("stream chunk 2") && m.contains("oops")),
        "{err}"
    );
    assert_eq!(chunks.len(), 1, "the chunk before it was handed over");

    // An error object sent mid-stream carries the server's message.
    let body = format!("data: {}\n\n", json!({"error": {"message": "model overloaded"}}));
    let (base, _server) = serve(vec![Answer::Events { body, piece: 64, cut: None }]).await;
    let (result, _) = stream_chat(&model(&base), &ask("3 + 4?")).await;
    let err = result.unwrap_err();
    assert!(matches!(&err, ModelError::Transport(m) if m.contains("model overloaded")), "{err}");
}

// ------------------------------------------------------------------ in a run

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Asked {
    reply: String,
}

pub struct Deps {
    model: OpenAiCompatible,
}

#[graph(state = Asked, deps = Deps, start = ask)]
mod asker {
    use super::*;

    #[node(goto = [END], retry(attempts = 2, base = 1ms, jitter = false))]
    async fn ask(_s: &Asked, cx: &Ctx<Deps>) -> Result<Step<Asked>, NodeError> {
        let request = ChatRequest::new(vec![Message::human("3 + 4?")]).with_max_output_tokens(64);
        let reply = cx.chat(&cx.deps().model, &request).await?;
        Ok(goto!(END, Asked::update().reply(reply.text)))
    }
}

#[tokio::test]
async fn a_stream_cut_mid_reply_is_retried_by_the_node_and_the_run_streams_both_attempts() {
    let cut = pieces_before(&streamed_reply(), "café", 16);
    let answers = vec![
        Answer::Events { body: streamed_reply(), piece: 16, cut: Some(cut) },
        Answer::Events { body: streamed_reply(), piece: 16, cut: None },
    ];
    let (base, server) = serve(answers).await;
    let deps = Deps { model: model(&base) };
    let app = asker::graph().app();
    let mut stream =
        app.runner(&deps).stream_modes([StreamMode::Messages, StreamMode::Events]).stream(Asked::default());
    let mut texts = Vec::new();
    let mut retried_between = None;
    let run = loop {
        let item = tokio::time::timeout(GUARD, stream.next()).await.expect("no hang").expect("ends with Done");
        match item.part {
            StreamPart::Message { node: "ask", chunk, .. } => texts.push(chunk.text),
            StreamPart::Event(Event::NodeRetrying { error, .. }) => {
                assert_eq!(error.class, ErrorClass::Transient, "{error}");
                retried_between = Some(texts.len());
            }
            StreamPart::Done(run) => break run.expect("a valid run"),
            _ => {}
        }
    };
    assert_eq!(run.outcome, Outcome::Completed);
    assert_eq!(run.state.reply, TEXT);
    let cut = retried_between.expect("the node was retried");
    let first: String = texts[..cut].concat();
    let second: String = texts[cut..].concat();
    assert!(
        !first.is_empty() && TEXT.starts_with(&first) && first.len() < TEXT.len(),
        "a partial first attempt: {first:?}"
    );
    assert_eq!(second, TEXT, "the retry's chunks follow");
    // Counted as without a stream: both calls, the tokens the answer reported.
    assert_eq!(run.usage.model_calls, 2);
    assert_eq!(run.usage.tokens, 59);
    assert_eq!(server.await.unwrap().len(), 2);
}
