//! The scripted test double: replay, recording, expectations, exhaustion.

use std::sync::Arc;
use std::time::Duration;

use agentflow::message::{Message, Role, ToolCall};
use agentflow::model::{ChatModel, ChatReply, ChatRequest, ModelError, ScriptedModel, Usage, UsageTally};
use agentflow::reducer::HasId;
use agentflow::{ErrorClass, NodeError};
use serde_json::json;

fn ask(text: &str) -> ChatRequest {
    ChatRequest::new(vec![Message::human(text)])
}

#[tokio::test]
async fn arithmetic_tool_loop_script() {
    let model = ScriptedModel::new()
        .reply_tool_call("add", json!({"a": 3, "b": 4}))
        .reply_tool_call("multiply", json!({"a": 7, "b": 5}))
        .reply_text("(3 + 4) * 5 = 35");
    assert_eq!(model.name(), "scripted-test-double");
    let mut messages = vec![Message::human("what is (3 + 4) * 5?")];

    let first = model.chat(&ChatRequest::new(messages.clone())).await.unwrap();
    assert_eq!(first.tool_calls, vec![ToolCall::new("call_1", "add", json!({"a": 3, "b": 4}))]);
    assert_eq!(first.model, "scripted-test-double");
    messages.push(first.into_message("ai-1"));
    messages.push(Message::tool("call_1", r#"{"ok":true,"value":7.0}"#));

    let second = model.chat(&ChatRequest::new(messages.clone())).await.unwrap();
    assert_eq!(second.tool_calls[0].id, "call_2");
    messages.push(second.into_message("ai-2"));
    messages.push(Message::tool("call_2", r#"{"ok":true,"value":35.0}"#));

    let last = model.chat(&ChatRequest::new(messages)).await.unwrap();
    assert_eq!(last.text, "(3 + 4) * 5 = 35");
    assert!(last.tool_calls.is_empty());

    let requests = model.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(requests[2].messages.len(), 5);
    assert_eq!(requests[2].messages[4].tool_call_id.as_deref(), Some("call_2"));
    assert_eq!(model.remaining(), 0);

    let err = model.chat(&ask("more")).await.unwrap_err();
    assert_eq!(err, ModelError::ScriptExhausted { served: 3 });
    assert_eq!(err.class(), ErrorClass::Fatal);
    assert_eq!(model.calls(), 4);
}

#[tokio::test]
async fn usage_is_a_word_count_estimate() {
    let model = ScriptedModel::new().reply_text("seven it is").reply(ChatReply::text("usage unknown")).unknown_usage();
    let reply = model.chat(&ask("three plus four")).await.unwrap();
    assert_eq!(reply.usage, Some(Usage::new(3, 3)));
    // Unknown usage, when the script asks for it.
    let reply = model.chat(&ask("again")).await.unwrap();
    assert_eq!(reply.usage, None);

    let mut tally = UsageTally::default();
    tally.record(Some(Usage::new(3, 3)));
    tally.record(None);
    assert_eq!((tally.known.total(), tally.calls, tally.is_complete()), (6, 2, false));
}

/// A reply given whole without a usage, or from the closure, reports zero tokens, not unknown
/// usage (which a budget would charge at the call's reservation); a script may set a reply's
/// usage, or ask for unknown usage, explicitly.
#[tokio::test]
async fn usage_is_zero_unless_the_script_gives_one_or_asks_for_none() {
    let given = ChatReply { usage: Some(Usage::new(7, 2)), ..ChatReply::text("carries its own") };
    let model = ScriptedModel::new()
        .reply(ChatReply::text("no usage given"))
        .reply(given)
        .reply_text("set by the script")
        .with_usage(Usage::new(40, 2))
        .reply_tool_call("add", json!({"a": 1}))
        .unknown_usage()
        .reply(ChatReply::text("set, over the reply's own"))
        .with_usage(Usage::new(1, 1))
        .respond_with(|_| Ok(ChatReply::text("from the closure")));
    let mut usages = Vec::new();
    for _ in 0..6 {
        usages.push(model.chat(&ask("q")).await.unwrap().usage);
    }
    assert_eq!(
        usages,
        [
            Some(Usage::new(0, 0)),
            Some(Usage::new(7, 2)),
            Some(Usage::new(40, 2)),
            None,
            Some(Usage::new(1, 1)),
            Some(Usage::new(0, 0))
        ]
    );
    // The closure's replies may report unknown usage too, when asked to.
    let model = ScriptedModel::new().respond_with(|_| Ok(ChatReply::text("unknown"))).respond_with_unknown_usage();
    assert_eq!(model.chat(&ask("q")).await.unwrap().usage, None);
    // A stream hands the same usage over last.
    let model = ScriptedModel::new().reply(ChatReply::text("streamed"));
    let chunks = std::sync::Mutex::new(Vec::new());
    let push = |chunk: agentflow::model::ChatChunk| chunks.lock().unwrap().push(chunk);
    let reply = model.chat_stream(&ask("q"), &agentflow::model::ChunkSink::new(&push)).await.unwrap();
    assert_eq!(reply.usage, Some(Usage::new(0, 0)));
    let last = chunks.lock().unwrap().last().and_then(|c| c.usage);
    assert_eq!(last, Some(Usage::new(0, 0)));
}

#[test]
#[should_panic(expected = "script a reply first")]
fn with_usage_needs_a_scripted_step() {
    let _ = ScriptedModel::new().with_usage(Usage::new(1, 1));
}

#[tokio::test]
async fn parallel_tool_calls_and_failures() {
    let model = ScriptedModel::new()
        .fail(ModelError::RateLimited { retry_after: Some(Duration::from_millis(10)), message: "slow down".into() })
        .reply_tool_calls([("add", json!({"a": 1, "b": 2})), ("add", json!({"a": 3, "b": 4}))]);
    let err = model.chat(&ask("x")).await.unwrap_err();
    let node = NodeError::from(err);
    assert_eq!(node.class, ErrorClass::Transient);
    assert_eq!(node.retry_after, Some(Duration::from_millis(10)));
    let reply = model.chat(&ask("x")).await.unwrap();
    let ids: Vec<_> = reply.tool_calls.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["call_1", "call_2"]);
}

#[tokio::test]
async fn expectations_check_what_was_sent() {
    let model = ScriptedModel::new()
        .reply_text("ok")
        .expect("the question comes last", |req| req.messages.last().is_some_and(|m| m.role == Role::Human))
        .reply_text("never")
        .expect("tools are offered", |req| !req.tools.is_empty());
    assert_eq!(model.chat(&ask("q")).await.unwrap().text, "ok");
    let err = model.chat(&ask("q")).await.unwrap_err();
    assert_eq!(err, ModelError::UnexpectedRequest { call: 1, expectation: "tools are offered".into() });
    assert_eq!(err.class(), ErrorClass::Fatal);
}

#[tokio::test]
async fn respond_with_takes_over_after_the_script() {
    let model = ScriptedModel::new()
        .reply_text("scripted")
        .respond_with(|req| Ok(ChatReply::text(format!("echo {}", req.messages.len()))));
    assert_eq!(model.chat(&ask("a")).await.unwrap().text, "scripted");
    assert_eq!(model.chat(&ask("b")).await.unwrap().text, "echo 1");
    assert_eq!(model.chat(&ask("c")).await.unwrap().text, "echo 1");
    assert_eq!(model.last_request().unwrap().messages[0].content, "c");
}

#[tokio::test]
async fn shared_and_boxed_models() {
    let shared: Arc<dyn ChatModel> = Arc::new(ScriptedModel::new().reply_text("a"));
    assert_eq!(shared.name(), "scripted-test-double");
    assert_eq!(shared.chat(&ask("q")).await.unwrap().text, "a");
    let boxed: Box<dyn ChatModel> = Box::new(ScriptedModel::new().reply_text("b"));
    assert_eq!(boxed.chat(&ask("q")).await.unwrap().text, "b");
}

#[test]
fn messages_reducer_replaces_by_id() {
    use agentflow::reducer::Messages;
    let mut history = vec![Message::human("3 + 4?"), Message::ai("thinking").with_id("ai-1")];
    history.merge_messages(vec![Message::ai("7").with_id("ai-1"), Message::human("thanks")]);
    let texts: Vec<_> = history.iter().map(|m| m.content.as_str()).collect();
    assert_eq!(texts, ["3 + 4?", "7", "thanks"]);
}

#[test]
fn messages_round_trip_through_serde() {
    let messages = vec![
        Message::system("s"),
        Message::human("h"),
        Message::ai_with_tool_calls("", vec![ToolCall::new("c1", "add", json!({"a": 1}))]),
        Message::tool("c1", "2"),
    ];
    let text = serde_json::to_string(&messages).unwrap();
    let back: Vec<Message> = serde_json::from_str(&text).unwrap();
    assert_eq!(back, messages);
    assert_eq!(back[3].id(), Message::tool("c1", "2").id());
    let wire = serde_json::to_value(&messages[1]).unwrap();
    assert_eq!(wire, json!({"id": messages[1].id, "role": "human", "content": "h"}));
}

#[tokio::test]
async fn fresh_call_ids_give_every_model_call_new_ids() {
    let same_call = |_: &ChatRequest| {
        Ok(ChatReply { tool_calls: vec![ToolCall::new("c", "add", json!({}))], ..ChatReply::default() })
    };
    let model = ScriptedModel::new()
        .reply_tool_calls([("add", json!({"a": 1})), ("multiply", json!({"a": 2}))])
        .respond_with(same_call)
        .fresh_call_ids();
    let first = model.chat(&ask("go")).await.unwrap();
    let ids: Vec<&str> = first.tool_calls.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["call_1-1", "call_2-1"]);
    // The same answer asked for twice comes back with two different ids.
    let second = model.chat(&ask("go")).await.unwrap();
    let third = model.chat(&ask("go")).await.unwrap();
    assert_eq!(second.tool_calls[0].id, "c-2");
    assert_eq!(third.tool_calls[0].id, "c-3");
    assert_eq!(third.tool_calls[0].arguments, json!({}));
}

/// The test double streams its scripted reply in pieces that add up to it.
#[tokio::test]
async fn chat_stream_hands_the_reply_over_in_pieces_that_add_up_to_it() {
    use agentflow::model::{ChatChunk, ChunkSink, ReplyAssembler};
    use std::sync::Mutex;

    // Word by word by default; in pieces of a fixed number of characters if asked.
    let words = ScriptedModel::new().reply_text("a café on the corner").reply_tool_call("add", json!({"a": 3, "b": 4}));
    let chars = ScriptedModel::new().reply_text("déjà vu").stream_chunk_chars(3);
    let req = ChatRequest::new(vec![Message::human("hi there")]);
    let chunks = Mutex::new(Vec::new());
    let push = |chunk: ChatChunk| chunks.lock().unwrap().push(chunk);
    let sink = ChunkSink::new(&push);
    let cases =
        [(&words, &["a ", "café ", "on ", "the ", "corner"][..]), (&words, &[]), (&chars, &["déj", "à v", "u"])];
    for (model, expected_pieces) in cases {
        let reply = model.chat_stream(&req, &sink).await.unwrap();
        let got = std::mem::take(&mut *chunks.lock().unwrap());
        let mut assembled = ReplyAssembler::new();
        got.iter().for_each(|c| assembled.push(c));
        assembled.set_model(reply.model.clone());
        assert_eq!(assembled.finish(), reply, "the pieces add up to the reply");
        let texts: Vec<&str> = got.iter().map(|c| c.text.as_str()).filter(|t| !t.is_empty()).collect();
        assert_eq!(texts, expected_pieces);
        assert_eq!(got.last().and_then(|c| c.usage), reply.usage, "usage comes last");
        if !reply.tool_calls.is_empty() {
            assert!(got.iter().filter(|c| !c.tool_calls.is_empty()).count() > 2, "arguments in pieces: {got:?}");
        }
    }
    assert_eq!((words.calls(), chars.calls()), (2, 1));
}
