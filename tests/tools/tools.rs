//! The tool gateway seen from a graph: argument validation, the node's
//! allowed set, the policy, direct calls, token budgets, unknown usage,
//! structured output in a node, and the ReAct loop over the
//! OpenAI-compatible adapter against a local HTTP server.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use agentflow::message::{Role, ToolCall};
use agentflow::model::{ChatReply, ChatRequest, OpenAiCompatible, OpenAiConfig, ScriptedModel};
use agentflow::prebuilt::react::{ReactDeps, ReactState};
use agentflow::prelude::*;
use agentflow::tool::{Code, Decision, Observation, RiskPolicy};
use agentflow::{Budget, ErrorClass, Limits};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::support::calculator::{Pair, add, add_runs, divide, divide_runs, multiply};

#[derive(Serialize, Deserialize, schemars::JsonSchema)]
pub struct Email {
    to: String,
}

/// Emails someone.
#[tool(risk = external)]
async fn send_email(args: Email) -> Result<String, ToolError> {
    Ok(format!("sent to {}", args.to))
}

/// A node that runs the tool calls it is given, as a model would ask for them.
#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Probe {
    calls: Vec<ToolCall>,
    observations: Vec<Observation>,
}

#[graph(state = Probe, start = gate)]
mod probe {
    use super::*;

    #[node(goto = [END], tools = [add, multiply, send_email])]
    async fn gate(s: &Probe, cx: &Ctx<()>) -> Result<Step<Probe>, NodeError> {
        let observations = cx.call_tools(&s.calls).await?;
        Ok(goto!(END, Probe::update().observations(observations)))
    }
}

fn calls(list: &[(&str, &str, Value)]) -> Probe {
    Probe {
        calls: list.iter().map(|(id, name, args)| ToolCall::new(*id, *name, args.clone())).collect(),
        ..Probe::default()
    }
}

fn detail(o: &Observation) -> &str {
    o.body["detail"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn arguments_are_validated_before_the_tool_runs() {
    let input = calls(&[
        ("call_unknown", "add", json!({"a": 1, "b": 2, "c": 3})),
        ("call_type", "add", json!({"a": "one", "b": 2})),
        ("call_string", "add", json!("{\"a\": 1e999, \"b\": 1}")),
        ("call_array", "add", json!([1, 2])),
        ("call_missing", "add", json!({"a": 1})),
        ("call_null", "add", json!({"a": null, "b": 1})),
        ("call_ok", "add", json!({"a": 1, "b": 2})),
    ]);
    let run = probe::graph().run(input, &()).await.unwrap();
    assert_eq!(run.outcome, Outcome::Completed);
    let obs = &run.state.observations;
    let ids: Vec<&str> = obs.iter().map(|o| o.call_id.as_str()).collect();
    assert_eq!(ids, ["call_unknown", "call_type", "call_string", "call_array", "call_missing", "call_null", "call_ok"]);
    for o in &obs[..6] {
        assert_eq!(o.code(), Some(Code::InvalidArgument), "{o:?}");
        assert_eq!(o.body["ok"], false);
    }
    assert!(detail(&obs[0]).contains("unknown field(s) c"), "{}", detail(&obs[0]));
    assert!(detail(&obs[1]).contains("invalid type: string \"one\", expected f64"), "{}", detail(&obs[1]));
    assert!(detail(&obs[2]).contains("must be a JSON object"), "{}", detail(&obs[2]));
    assert!(detail(&obs[3]).contains("must be a JSON object"), "{}", detail(&obs[3]));
    assert!(detail(&obs[4]).contains("missing field `b`"), "{}", detail(&obs[4]));
    assert!(detail(&obs[5]).contains("invalid type: null"), "{}", detail(&obs[5]));
    assert_eq!(obs[6].result(), Some(&json!(3.0)));
    // Only the valid call ran; refused calls count against the budget.
    assert_eq!(add_runs(), 1);
    assert_eq!(run.usage.tool_calls, 7);
    // The observation goes back to the model tied to its call id.
    let message = obs[1].clone().into_message();
    assert_eq!((message.role, message.tool_call_id.as_deref()), (Role::Tool, Some("call_type")));
    assert!(message.content.contains("\"code\":\"INVALID_ARGUMENT\""), "{}", message.content);
}

#[tokio::test]
async fn a_tool_outside_the_node_set_is_denied_and_never_run() {
    let input = calls(&[("call_1", "divide", json!({"a": 1, "b": 1})), ("call_2", "rm_rf", json!({}))]);
    let run = probe::graph().run(input, &()).await.unwrap();
    assert_eq!(run.outcome, Outcome::Completed);
    let obs = &run.state.observations;
    assert_eq!(obs[0].code(), Some(Code::PermissionDenied));
    assert_eq!(obs[0].call_id, "call_1");
    assert_eq!(detail(&obs[0]), "tool `divide` is not allowed in node `gate`; allowed: add, multiply, send_email");
    assert_eq!(obs[1].code(), Some(Code::PermissionDenied));
    assert!(detail(&obs[1]).starts_with("tool `rm_rf` is not allowed"), "{}", detail(&obs[1]));
    assert_eq!(divide_runs(), 0, "a tool outside the node's set never runs");
}

#[tokio::test]
async fn the_policy_can_deny_a_tool_and_approval_needs_a_store() {
    let graph = probe::graph().app().policy(RiskPolicy::default().tool("add", Decision::Deny));
    let input = calls(&[
        ("call_1", "add", json!({"a": 1, "b": 1})),
        ("call_2", "multiply", json!({"a": 2, "b": 3})),
        ("call_3", "send_email", json!({"to": "ada@example.com"})),
    ]);
    let run = graph.run(input, &()).await.unwrap();
    assert_eq!(run.outcome, Outcome::Completed);
    let obs = &run.state.observations;
    assert_eq!(obs[0].code(), Some(Code::PermissionDenied));
    assert_eq!(detail(&obs[0]), "the policy denies `add` (read risk)");
    assert_eq!(add_runs(), 0);
    assert_eq!(obs[1].result(), Some(&json!(6.0)));
    // External tools need a human's approval by default; without a store
    // there is nowhere to record it, so the call is refused, not run.
    assert_eq!(obs[2].code(), Some(Code::PermissionDenied));
    assert!(detail(&obs[2]).contains("needs a human's approval"), "{}", detail(&obs[2]));
}

/// A node calling its tools directly from code.
#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Direct {
    #[reduce(append)]
    observations: Vec<Observation>,
}

#[graph(state = Direct, start = direct)]
mod direct {
    use super::*;

    #[node(goto = [END], tools = [add, multiply])]
    async fn direct(_s: &Direct, cx: &Ctx<()>) -> Result<Step<Direct>, NodeError> {
        let observations = vec![
            cx.run_tool(add, Pair { a: 3.0, b: 4.0 }).await?,
            cx.run_tool(multiply, Pair { a: 1e308, b: 10.0 }).await?,
            cx.run_tool(add, Pair { a: f64::NAN, b: 1.0 }).await?,
        ];
        Ok(goto!(END, Direct::update().observations(observations)))
    }
}

#[tokio::test]
async fn run_tool_calls_an_allowed_tool_through_the_gateway() {
    let run = direct::graph().run(Direct::default(), &()).await.unwrap();
    assert_eq!(run.outcome, Outcome::Completed);
    let obs = &run.state.observations;
    assert_eq!(obs[0].call_id, "direct-add-1");
    assert_eq!(obs[0].result(), Some(&json!(7.0)));
    // A non-finite result is the tool's refusal, read by the model.
    assert_eq!(obs[1].code(), Some(Code::ToolError));
    assert!(detail(&obs[1]).contains("not a finite number"), "{}", detail(&obs[1]));
    // A non-finite input does not survive JSON (NaN becomes null): refused
    // before the tool runs.
    assert_eq!(obs[2].call_id, "direct-add-3");
    assert_eq!(obs[2].code(), Some(Code::InvalidArgument));
    assert_eq!(add_runs(), 1);
    assert_eq!(run.usage.tool_calls, 3);
}

/// A node asking a model once, through `cx.chat` and the run's budgets.
struct Asker {
    model: Arc<ScriptedModel>,
    max_output: u32,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Chat {
    reply: Option<String>,
}

#[graph(state = Chat, deps = Asker, start = ask)]
mod asker {
    use super::*;

    #[node(goto = [END])]
    async fn ask(_s: &Chat, cx: &Ctx<Asker>) -> Result<Step<Chat>, NodeError> {
        let deps = cx.deps();
        let request =
            ChatRequest::new(vec![agentflow::message::Message::human("hello")]).with_max_output_tokens(deps.max_output);
        let reply = cx.chat(&*deps.model, &request).await?;
        Ok(goto!(END, Chat::update().reply(Some(reply.text))))
    }
}

#[tokio::test]
async fn a_token_reservation_past_the_limit_is_refused_before_the_call() {
    let model = Arc::new(ScriptedModel::new().reply_text("never sent"));
    let deps = Asker { model: model.clone(), max_output: 150 };
    let graph = asker::graph();
    let run = graph.app().runner(&deps).limits(Limits::none().tokens(100)).run(Chat::default()).await.unwrap();
    assert_eq!(run.outcome, Outcome::BudgetExhausted { which: Budget::Tokens });
    assert_eq!(model.calls(), 0, "the model was never called");
    assert_eq!(run.usage.model_calls, 0);
    assert_eq!(run.usage.tokens, 0);

    // Within the limit the reservation is settled with the reported usage.
    let deps = Asker { model: Arc::new(ScriptedModel::new().reply_text("hi there")), max_output: 50 };
    let run = graph.app().runner(&deps).limits(Limits::none().tokens(100)).run(Chat::default()).await.unwrap();
    assert_eq!(run.outcome, Outcome::Completed);
    assert_eq!(run.usage.tokens, 3, "1 word in, 2 words out (the test double's estimate), not the 50 reserved");
    assert!(run.usage.usage_known());
}

#[tokio::test]
async fn unknown_usage_is_flagged_and_charged_at_the_reservation() {
    let reply = ChatReply { text: "no usage reported".into(), usage: None, ..ChatReply::default() };
    let model = Arc::new(ScriptedModel::new().reply(reply).unknown_usage());
    let deps = Asker { model, max_output: 64 };
    let run = asker::graph().run(Chat::default(), &deps).await.unwrap();
    assert_eq!(run.outcome, Outcome::Completed);
    assert_eq!(run.usage.unknown_usage_calls, 1);
    assert!(!run.usage.usage_known());
    assert_eq!(run.usage.tokens, 64, "the reservation stays charged, so the total is not silently low");
}

/// A closed set of verdicts: anything else is refused and asked again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
enum Verdict {
    Approve,
    Reject,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Review {
    verdict: Verdict,
    reason: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Reviewed {
    review: Option<Review>,
    reasks: u32,
}

#[graph(state = Reviewed, deps = Asker, start = review)]
mod reviewer {
    use super::*;

    #[node(goto = [END])]
    async fn review(_s: &Reviewed, cx: &Ctx<Asker>) -> Result<Step<Reviewed>, NodeError> {
        let request = ChatRequest::new(vec![agentflow::message::Message::human("Review refund #42.")]);
        let out = cx.structured::<Review, _>(&*cx.deps().model, request, 2).await?;
        Ok(goto!(END, Reviewed::update().review(Some(out.value)).reasks(out.reasks)))
    }
}

#[tokio::test]
async fn a_structured_output_node_re_asks_after_a_malformed_reply() {
    let model = Arc::new(ScriptedModel::new().reply_text(r#"{"verdict": "maybe", "reason": "unsure"}"#).reply_text(
        r#"```json
{"verdict": "approve", "reason": "the order was never delivered"}
```"#,
    ));
    let deps = Asker { model: model.clone(), max_output: 64 };
    let run = reviewer::graph().run(Reviewed::default(), &deps).await.unwrap();
    assert_eq!(run.outcome, Outcome::Completed);
    assert_eq!(
        run.state.review,
        Some(Review { verdict: Verdict::Approve, reason: "the order was never delivered".into() })
    );
    assert_eq!(run.state.reasks, 1);
    // Both calls went through the run's budget.
    assert_eq!(run.usage.model_calls, 2);
    let requests = model.requests();
    assert!(requests[0].response_schema.is_some());
    let correction = &requests[1].messages.last().unwrap().content;
    assert!(correction.contains("unknown variant `maybe`"), "{correction}");

    // Malformed past the bound: a correctable error, the run fails at the node.
    let model = Arc::new((0..3).fold(ScriptedModel::new(), |m, _| m.reply_text("approve!")));
    let deps = Asker { model, max_output: 64 };
    let run = reviewer::graph().run(Reviewed::default(), &deps).await.unwrap();
    let Outcome::Failed { node, error } = &run.outcome else { panic!("{:?}", run.outcome) };
    assert_eq!((node.as_str(), error.class), ("review", ErrorClass::Correctable));
    assert!(error.message.contains("after 2 re-asks"), "{error}");

    // The model-call budget covers the re-asks.
    let model = Arc::new((0..3).fold(ScriptedModel::new(), |m, _| m.reply_text("approve!")));
    let deps = Asker { model, max_output: 64 };
    let graph = reviewer::graph();
    let run = graph.app().runner(&deps).limits(Limits::none().model_calls(2)).run(Reviewed::default()).await.unwrap();
    assert_eq!(run.outcome, Outcome::BudgetExhausted { which: Budget::ModelCalls });
}

agentflow::react_agent!(mod calculator, tools = [add, multiply, divide], max_steps = 12);

/// Serves `replies` in order to one connection each on 127.0.0.1, as an
/// OpenAI-compatible server would; returns the base URL and the request bodies.
fn serve(replies: Vec<&'static str>) -> (String, std::thread::JoinHandle<Vec<Value>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    let server = std::thread::spawn(move || {
        let mut bodies = Vec::new();
        for reply in replies {
            let (mut stream, _) = listener.accept().unwrap();
            stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut buf = Vec::new();
            let mut chunk = [0; 4096];
            let body = loop {
                let n = stream.read(&mut chunk).unwrap();
                assert!(n > 0, "the client closed early");
                buf.extend_from_slice(&chunk[..n]);
                let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else { continue };
                let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .map_or(0, |v| v.trim().parse().unwrap());
                if buf.len() >= end + 4 + len {
                    break serde_json::from_slice::<Value>(&buf[end + 4..end + 4 + len]).unwrap();
                }
            };
            bodies.push(body);
            let response = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}",
                reply.len()
            );
            stream.write_all(response.as_bytes()).unwrap();
        }
        bodies
    });
    (base, server)
}

const CALL_ADD: &str = r#"{"id": "chatcmpl-1", "object": "chat.completion", "model": "qwen2.5:7b",
  "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": null,
    "tool_calls": [{"id": "call_x1", "type": "function", "function": {"name": "add", "arguments": "{\"a\": 3, \"b\": 4}"}}]}}],
  "usage": {"prompt_tokens": 120, "completion_tokens": 20, "total_tokens": 140}}"#;

const ANSWER: &str = r#"{"id": "chatcmpl-2", "object": "chat.completion", "model": "qwen2.5:7b",
  "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "3 + 4 = 7"}}]}"#;

/// The path `cargo run --example arithmetic -- --model openai ..` takes, with a
/// local server standing in for Ollama: recorded replies, not a model.
#[tokio::test]
async fn the_react_loop_runs_over_the_openai_compatible_adapter() {
    let (base, server) = serve(vec![CALL_ADD, ANSWER]);
    let config = OpenAiConfig::new(base, "qwen2.5").with_timeout(Duration::from_secs(10));
    let deps = ReactDeps::new(Arc::new(OpenAiCompatible::new(config).unwrap())).with_system("Use the tools.");
    let run = calculator::graph().run(ReactState::ask("What is 3 + 4?"), &deps).await.unwrap();
    assert_eq!(run.outcome, Outcome::Completed);
    assert_eq!(run.state.answer.as_deref(), Some("3 + 4 = 7"));
    assert_eq!(add_runs(), 1);
    // The second reply reported no usage: flagged, and charged at the reservation.
    assert_eq!((run.usage.model_calls, run.usage.tool_calls, run.usage.unknown_usage_calls), (2, 1, 1));
    assert_eq!(run.usage.tokens, 140 + 1024);

    let bodies = server.join().unwrap();
    let tools: Vec<&str> =
        bodies[0]["tools"].as_array().unwrap().iter().map(|t| t["function"]["name"].as_str().unwrap()).collect();
    assert_eq!(tools, ["add", "multiply", "divide"]);
    assert_eq!(bodies[0]["tools"][0]["function"]["parameters"]["properties"]["a"]["type"], "number");
    // The tool result goes back tied to the server's call id.
    let messages = bodies[1]["messages"].as_array().unwrap();
    let result = messages.iter().find(|m| m["role"] == "tool").unwrap();
    assert_eq!(result["tool_call_id"], "call_x1");
    assert_eq!(result["content"], r#"{"ok":true,"result":7.0}"#);
}
