//! The `otel` example, run as a user runs it, exporting its spans over OTLP/HTTP to a receiver
//! this test runs on 127.0.0.1 (`support::otlp`, which decodes the protobuf with the protocol's
//! own types): one process starts a refund that waits for a person's approval and exits; a
//! second process approves it and resumes the thread to its end.
//!
//! What the receiver gets must be one trace: every span of both processes under the thread's
//! stored trace id, both `invoke_agent` spans children of the `create_thread` root the first
//! process made, `chat` and `execute_tool` spans under their node's span, the approval's wait
//! and decision, and the GenAI attributes with the values the run had. Without the content
//! opt-in no message, argument or result is on any span; with it they are. With or without it,
//! no text of any span (name, status, attributes, events and their attributes) holds:
//! - the customer's name, a `#[state(pii)]` field, in any case: it is in the message (once as
//!   written, once in capitals: masking ignores case) and in the error message of the failed
//!   first attempt of `plan` (error messages are never exported);
//! - the credential-shaped key planted in the model's instructions (redacted by the scan);
//! - the payment key the tool resolves from the environment. That key is not credential-shaped
//!   (the scan would not catch it) and the tool does not return it: what this proves is that a
//!   resolved secret the tool does not return reaches no span, not that a returned one is masked.
//!
//! The example's source is compiled into this test binary, which runs it in child processes of
//! itself ([`example`]), so no cargo build happens while the tests run.

#[path = "../../examples/otel.rs"]
#[allow(dead_code, reason = "these tests run the example's `main`")]
mod otel_example;

use std::path::Path;
use std::process::{Command, ExitCode, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::support::otlp::{OtlpReceiver, ReceivedSpan, by_id, named, parent_of};
use crate::support::process::own_test;
use crate::support::stores::open_redb;
use crate::support::temp::temp_dir;
use agentflow::Store;

/// Set in a child process: the example's command-line arguments, as a JSON array of strings.
const CHILD_ARGS: &str = "AGENTFLOW_OTEL_EXAMPLE_ARGS";

/// The customer's name: personal data, planted in the state's `#[state(pii)]` field, in the
/// message the model reads (also in capitals) and, by the example, in the error of `plan`'s
/// failed first attempt.
const PII_CANARY: &str = "Ada Canary7Q Lovelace";
/// A credential in the model's instructions (a Stripe-shaped live key).
const PROMPT_KEY_CANARY: &str = "sk_live_51Pq8ZxT2kLm9VbN4cRw7Yd3H";
/// The payment provider's key the refund tool resolves from `PAYMENTS_API_KEY` and does not
/// return. Deliberately not credential-shaped: only its absence from the tool's result and
/// the spans keeps it off them, not the credential scan.
const ENV_KEY_CANARY: &str = "horse-battery-staple-7731";

/// The attributes only the content opt-in may put on spans.
const CONTENT_KEYS: [&str; 5] = [
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.system_instructions",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
];

#[test]
#[ignore = "child process of the tests in this file: runs the `otel` example's `main`"]
fn otel_example_child() {
    let Ok(args) = std::env::var(CHILD_ARGS) else { return };
    let args: Vec<String> = serde_json::from_str(&args).unwrap();
    // The harness printed `test otel_example_child ... ` without a line break.
    println!();
    assert_eq!(otel_example::run_with_args(args.clone()), ExitCode::SUCCESS, "the example failed: {args:?}");
}

/// A process running the example with `args`, exporting to `receiver`, with the content opt-in
/// set to `capture`; no other `OTEL_*` variable of this process reaches it.
pub(crate) fn example(receiver: &OtlpReceiver, capture: bool, args: &[&str]) -> Command {
    let mut cmd = own_test(module_path!(), "otel_example_child");
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("OTEL_") {
            cmd.env_remove(name);
        }
    }
    cmd.env(CHILD_ARGS, serde_json::to_string(args).unwrap())
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint())
        .env("OTEL_BSP_SCHEDULE_DELAY", "50")
        .env("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", if capture { "true" } else { "false" })
        .env("PAYMENTS_API_KEY", ENV_KEY_CANARY);
    cmd
}

/// Runs `cmd` to its end (at most 2 minutes) and asserts it succeeded; its stdout.
pub(crate) fn run(cmd: &mut Command) -> String {
    let limit = Duration::from_secs(120);
    let child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start the example");
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let Ok(output) = rx.recv_timeout(limit) else {
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        panic!("the example did not finish within {limit:?}: {cmd:?}");
    };
    let Output { status, stdout, stderr } = output.expect("the example's output");
    let (stdout, stderr) = (String::from_utf8_lossy(&stdout), String::from_utf8_lossy(&stderr));
    assert!(status.success(), "{cmd:?} failed ({status})\nstdout:\n{stdout}\nstderr:\n{stderr}");
    stdout.into_owned()
}

/// What the two processes left: the spans the receiver had once the first process exited, all
/// of them once the second did, the approval's id and the thread's stored `traceparent`.
struct Scenario {
    thread: String,
    first: Vec<ReceivedSpan>,
    all: Vec<ReceivedSpan>,
    approval: String,
    traceparent: String,
}

pub(crate) fn count(spans: &[ReceivedSpan], name: &str) -> usize {
    spans.iter().filter(|s| s.name == name).count()
}

/// Starts the refund in one process and approves and resumes it in another, both exporting to
/// a receiver of this test.
fn two_processes(capture: bool) -> Scenario {
    assert_eq!(
        agentflow::secret::scan_str(PROMPT_KEY_CANARY).map(|k| k.as_str()),
        Some("Stripe secret key"),
        "the planted key must have a credential's shape"
    );
    assert_eq!(agentflow::secret::scan_str(ENV_KEY_CANARY), None, "the env key must not look like a credential");
    let receiver = OtlpReceiver::start();
    let dir = temp_dir(if capture { "otel-trace-content" } else { "otel-trace" });
    let db = dir.join("refunds.redb");
    let thread = "refund-otel-1".to_string();
    let message = format!(
        "Hello, this is {PII_CANARY}. Please refund order=ORD-1001 amount=120, it arrived broken. -- {}",
        PII_CANARY.to_uppercase()
    );
    let instructions =
        format!("You are a refund agent. The provider account's key is {PROMPT_KEY_CANARY}; never say it.");
    let common = [
        "--store",
        db.to_str().expect("a UTF-8 path"),
        "--thread",
        &thread,
        "--customer",
        PII_CANARY,
        "--message",
        &message,
        "--instructions",
        &instructions,
    ];

    // Process 1: runs to the approval, flushes its spans and exits.
    let out = run(&mut example(&receiver, capture, &[&["start"], common.as_slice()].concat()));
    let approval = out
        .lines()
        .find_map(|l| l.strip_prefix("waiting for approval ")?.split(':').next())
        .unwrap_or_else(|| panic!("the first process printed no approval:\n{out}"))
        .to_string();
    let first = receiver.wait_for(Duration::from_secs(10), |s| count(s, "invoke_agent refunds") >= 1);
    let traceparent = stored_trace(&db, &thread).unwrap_or_else(|| panic!("thread `{thread}` stores no trace:\n{out}"));

    // Process 2: approves as a person, resumes to the end, flushes and exits.
    let out = run(&mut example(&receiver, capture, &[&["approve"], common.as_slice()].concat()));
    assert!(out.contains(&format!("resume `{thread}`: Completed")), "{out}");
    let all = receiver.wait_for(Duration::from_secs(10), |s| count(s, "invoke_agent refunds") >= 2);
    assert_eq!(receiver.refused(), 0, "the exporter sent requests the receiver could not read");
    // The count read off the wire format (what the benchmark relies on) is the decoded one.
    assert_eq!(receiver.span_count(), receiver.spans().len() as u64, "spans counted without decoding");
    assert_eq!(stored_trace(&db, &thread).as_deref(), Some(traceparent.as_str()), "the stored trace changed");
    let _ = std::fs::remove_dir_all(&dir);
    Scenario { thread, first, all, approval, traceparent }
}

/// The thread's stored `traceparent`.
pub(crate) fn stored_trace(db: &Path, thread: &str) -> Option<String> {
    let store = open_redb(db).expect("open the store file");
    store.thread(thread).expect("read the thread").expect("the thread is stored").trace
}

/// The span's chain of ancestors' names, nearest first.
fn ancestry(spans: &[ReceivedSpan], span: &ReceivedSpan) -> Vec<String> {
    let mut out = Vec::new();
    let mut at = span;
    while let Some(parent) = parent_of(spans, at) {
        out.push(parent.name.clone());
        at = parent;
        if out.len() > 20 {
            break;
        }
    }
    out
}

/// The one span named `name` among `spans`.
fn one<'a>(spans: &'a [ReceivedSpan], name: &str) -> &'a ReceivedSpan {
    let found = named(spans, name);
    assert_eq!(found.len(), 1, "one `{name}` span expected; got {}: {:?}", found.len(), names(spans));
    found[0]
}

fn names(spans: &[ReceivedSpan]) -> Vec<&str> {
    spans.iter().map(|s| s.name.as_str()).collect()
}

/// The parent of `span`, which must be among `spans`.
fn parent<'a>(spans: &'a [ReceivedSpan], span: &ReceivedSpan) -> &'a ReceivedSpan {
    parent_of(spans, span).unwrap_or_else(|| {
        panic!("the parent {:?} of `{}` was not received; spans: {:?}", span.parent_span_id, span.name, names(spans))
    })
}

/// The shape every run has, with or without contents: one trace, its parents, its attributes.
fn assert_one_trace_with_genai_attributes(s: &Scenario) {
    // OpenTelemetry wants an attribute key once per span (a field recorded twice is exported twice).
    for span in &s.all {
        let mut keys: Vec<&str> = span.attributes.iter().map(|(k, _)| k.as_str()).collect();
        keys.sort_unstable();
        let before = keys.len();
        keys.dedup();
        assert_eq!(keys.len(), before, "span `{}` repeats an attribute key: {:?}", span.name, span.attributes);
    }
    let all = &s.all;
    // The stored context: `00-{trace id}-{span id of create_thread}-{flags}`.
    let parts: Vec<&str> = s.traceparent.split('-').collect();
    assert_eq!(parts.len(), 4, "a W3C traceparent: {}", s.traceparent);
    let (trace_id, root_id) = (parts[1], parts[2]);

    // One trace across both processes.
    let traces: std::collections::BTreeSet<&str> = all.iter().map(|s| s.trace_id.as_str()).collect();
    assert_eq!(traces.into_iter().collect::<Vec<_>>(), [trace_id], "spans outside the thread's trace");

    // The root: made by the first process, closed at once, the stored span.
    let root = one(all, "create_thread");
    assert!(s.first.iter().any(|f| f.span_id == root.span_id), "create_thread came from the first process");
    assert_eq!((root.span_id.as_str(), root.parent_span_id.as_deref()), (root_id, None), "the stored root");
    assert_eq!(root.str_attr("gen_ai.conversation.id"), Some(s.thread.as_str()));
    assert_eq!(root.str_attr("gen_ai.agent.name"), Some("refunds"));

    // One invocation per process, both children of the root.
    let invokes = named(all, "invoke_agent refunds");
    assert_eq!(invokes.len(), 2, "{:?}", names(all));
    let (started, resumed) = match s.first.iter().any(|f| f.span_id == invokes[0].span_id) {
        true => (invokes[0], invokes[1]),
        false => (invokes[1], invokes[0]),
    };
    assert!(s.first.iter().any(|f| f.span_id == started.span_id), "the first invocation is the first process's");
    assert!(s.first.iter().all(|f| f.span_id != resumed.span_id), "the resume came after the first process ended");
    let pid = |span: &ReceivedSpan| span.resource.iter().find(|(k, _)| k == "process.pid").map(|(_, v)| v.clone());
    assert!(
        pid(started).is_some() && pid(started) != pid(resumed),
        "two processes: {:?} {:?}",
        pid(started),
        pid(resumed)
    );
    for (span, was_resumed, outcome) in [(started, false, "interrupted"), (resumed, true, "completed")] {
        assert_eq!(span.parent_span_id.as_deref(), Some(root_id), "invoke_agent is a child of create_thread");
        assert_eq!(span.str_attr("gen_ai.operation.name"), Some("invoke_agent"));
        assert_eq!(span.str_attr("gen_ai.agent.name"), Some("refunds"));
        assert_eq!(span.str_attr("gen_ai.conversation.id"), Some(s.thread.as_str()));
        assert_eq!(span.bool_attr("agentflow.resumed"), Some(was_resumed));
        assert_eq!(span.str_attr("agentflow.outcome"), Some(outcome));
        assert_eq!(span.resource_str("service.name"), Some("refund-agent"));
    }

    // Model calls: under their node, under a step, under the invocation.
    let chats = named(all, "chat scripted-test-double");
    assert_eq!(chats.len(), 2, "one model call per process: {:?}", names(all));
    let in_first = |span: &ReceivedSpan| s.first.iter().any(|f| f.span_id == span.span_id);
    let (planned, replied): (Vec<&ReceivedSpan>, Vec<&ReceivedSpan>) = chats.iter().partition(|c| in_first(c));
    assert_eq!((planned.len(), replied.len()), (1, 1), "one model call in each process");
    for (chat, node, invoke, reason) in
        [(planned[0], "plan", started, "tool_calls"), (replied[0], "reply", resumed, "stop")]
    {
        let node_span = parent(all, chat);
        assert_eq!(node_span.name, format!("node {node}"), "chat's parent: {:?}", ancestry(all, chat));
        assert_eq!(node_span.str_attr("agentflow.node"), Some(node));
        let step = parent(all, node_span);
        assert_eq!(step.name, "step", "a node's parent is its step: {:?}", ancestry(all, chat));
        assert_eq!(parent(all, step).span_id, invoke.span_id, "{:?}", ancestry(all, chat));
        let n = step.int_attr("agentflow.step").unwrap_or_else(|| panic!("a step number: {:?}", step.attributes));
        assert_eq!(node_span.int_attr("agentflow.step"), Some(n), "the node's step is its parent's");
        // `plan`'s first attempt fails (its error quotes the customer) and the second succeeds.
        let attempts = if node == "plan" { 2 } else { 1 };
        assert_eq!(node_span.int_attr("agentflow.attempt"), Some(attempts), "{:?}", node_span.attributes);
        assert_ne!(node_span.status.0, 2, "the retried node succeeded: {:?}", node_span.status);
        assert_eq!(chat.kind, 3, "a chat is a client span");
        assert_eq!(chat.str_attr("gen_ai.operation.name"), Some("chat"));
        assert_eq!(chat.str_attr("gen_ai.provider.name"), Some("agentflow.scripted"));
        assert_eq!(chat.str_attr("gen_ai.request.model"), Some("scripted-test-double"));
        assert_eq!(chat.str_attr("gen_ai.response.model"), Some("scripted-test-double"));
        let (input, output) = (chat.int_attr("gen_ai.usage.input_tokens"), chat.int_attr("gen_ai.usage.output_tokens"));
        assert!(
            input.is_some_and(|n| n > 0) && output.is_some_and(|n| n > 0),
            "usage {input:?} {output:?}: {:?}",
            chat.attributes
        );
        assert_eq!(chat.str_array_attr("gen_ai.response.finish_reasons"), Some(vec![reason]), "{:?}", chat.attributes);
    }

    // The refund: the first process stops it for an approval, under the refund node.
    let wait = one(all, "await_approval process_refund");
    assert!(s.first.iter().any(|f| f.span_id == wait.span_id), "the wait is the first process's");
    assert!(ancestry(all, wait).contains(&"node refund".to_string()), "{:?}", ancestry(all, wait));
    assert_eq!(wait.str_attr("agentflow.approval.id"), Some(s.approval.as_str()));
    assert_eq!(wait.str_attr("gen_ai.tool.name"), Some("process_refund"));

    // The person's decision, in the second process, in the thread's trace.
    let decision = one(all, "approval_decision process_refund");
    assert!(s.first.iter().all(|f| f.span_id != decision.span_id), "the decision is the second process's");
    assert_eq!(decision.parent_span_id.as_deref(), Some(root_id), "the decision is a child of create_thread");
    assert_eq!(decision.str_attr("agentflow.approval.id"), Some(s.approval.as_str()));
    assert_eq!(decision.str_attr("agentflow.approval.decision"), Some("approved"));
    assert_eq!(decision.str_attr("gen_ai.tool.name"), Some("process_refund"));
    assert!(decision.int_attr("agentflow.approval.waited_ms").is_some_and(|ms| ms >= 0), "{:?}", decision.attributes);
    assert!(decision.texts().iter().all(|t| !t.contains("alice")), "no approver's name on the span");

    // The call that ran, in the second process: under the refund node, with the model's id.
    let ran: Vec<&ReceivedSpan> = named(all, "execute_tool process_refund")
        .into_iter()
        .filter(|t| s.first.iter().all(|f| f.span_id != t.span_id))
        .collect();
    assert_eq!(ran.len(), 1, "the refund runs once, in the second process: {:?}", names(all));
    let tool = ran[0];
    let node_span = parent(all, tool);
    assert_eq!(node_span.name, "node refund", "{:?}", ancestry(all, tool));
    assert_eq!(parent(all, parent(all, node_span)).span_id, resumed.span_id, "{:?}", ancestry(all, tool));
    assert_eq!(tool.str_attr("gen_ai.operation.name"), Some("execute_tool"));
    assert_eq!(tool.str_attr("gen_ai.tool.name"), Some("process_refund"));
    assert_eq!(tool.str_attr("gen_ai.tool.call.id"), Some("call_refund_1"));
    assert_eq!(tool.str_attr("gen_ai.tool.type"), Some("function"));
    assert_ne!(tool.status.0, 2, "the refund succeeded: {:?}", tool.status);

    // Every span's parent was received (nothing dangles), but the root's.
    for span in all {
        if let Some(p) = &span.parent_span_id {
            assert!(by_id(all, p).is_some(), "`{}` has a parent {p} that was not received", span.name);
        }
    }
}

/// Asserts `needle` is in no text of any span (`texts()`: names, status messages, attributes,
/// events' names and attributes), in any case.
fn nowhere(spans: &[ReceivedSpan], needle: &str, what: &str) {
    let needle = needle.to_lowercase();
    for span in spans {
        let texts = span.texts();
        let hit = texts.iter().find(|t| t.to_lowercase().contains(&needle));
        assert!(hit.is_none(), "{what} is on span `{}`: {:?}", span.name, hit);
    }
}

fn no_canary_anywhere(spans: &[ReceivedSpan]) {
    nowhere(spans, PII_CANARY, "the customer's name (personal data)");
    nowhere(spans, "Canary7Q", "part of the customer's name (personal data)");
    nowhere(spans, PROMPT_KEY_CANARY, "the key in the instructions");
    nowhere(spans, ENV_KEY_CANARY, "the payment key from the environment");
    // Nor the rest of the failed attempt's error message.
    nowhere(spans, "account lookup", "the failed attempt's error message");
}

#[test]
fn two_processes_export_one_trace_with_genai_attributes_and_no_content() {
    let s = two_processes(false);
    assert_one_trace_with_genai_attributes(&s);
    for span in &s.all {
        for key in CONTENT_KEYS {
            assert!(span.attr(key).is_none(), "`{key}` is on span `{}` without the opt-in", span.name);
        }
    }
    // Nothing of the conversation either, under another name.
    nowhere(&s.all, "arrived broken", "the customer's message");
    nowhere(&s.all, "on their way back", "the model's answer");
    no_canary_anywhere(&s.all);
}

#[test]
fn with_the_opt_in_contents_are_on_spans_masked_and_without_secrets() {
    let s = two_processes(true);
    assert_one_trace_with_genai_attributes(&s);
    let all = &s.all;
    let mask = agentflow::access::personal::MASK;

    let chats = named(all, "chat scripted-test-double");
    for chat in &chats {
        let input = chat.str_attr("gen_ai.input.messages").unwrap_or_else(|| panic!("no input messages on {chat:?}"));
        let input: Value = serde_json::from_str(input).expect("input messages are JSON");
        let user = input.as_array().and_then(|m| m.iter().find(|m| m["role"] == "user")).expect("a user message");
        let text = user["parts"][0]["content"].as_str().expect("a text part");
        assert!(text.contains("order=ORD-1001") && text.contains(&format!("this is {mask}.")), "{text}");
        // The name in capitals is masked too (masking ignores case).
        assert!(text.ends_with(&format!("broken. -- {mask}")), "{text}");
        let output = chat.str_attr("gen_ai.output.messages").expect("output messages");
        let _: Value = serde_json::from_str(output).expect("output messages are JSON");
        let system = chat.str_attr("gen_ai.system_instructions").expect("the system instructions");
        assert!(system.contains("You are a refund agent") && system.contains("[redacted"), "{system}");
    }
    let asked = chats.iter().find_map(|c| c.str_attr("gen_ai.output.messages").filter(|o| o.contains("tool_call")));
    let asked: Value = serde_json::from_str(asked.expect("the first call's output asks for the tool")).unwrap();
    let call = asked[0]["parts"].as_array().and_then(|p| p.iter().find(|p| p["type"] == "tool_call")).expect("a call");
    assert_eq!(
        (&call["id"], &call["name"]),
        (&Value::from("call_refund_1"), &Value::from("process_refund")),
        "{asked}"
    );
    let answered = chats.iter().find_map(|c| c.str_attr("gen_ai.output.messages").filter(|o| o.contains("Dear")));
    assert!(answered.expect("the answer").contains(&format!("Dear {mask}, 120 EUR")), "{answered:?}");

    let ran =
        named(all, "execute_tool process_refund").into_iter().find(|t| t.attr("gen_ai.tool.call.result").is_some());
    let ran = ran.expect("the call that ran carries its result");
    let args: Value = serde_json::from_str(ran.str_attr("gen_ai.tool.call.arguments").expect("arguments")).unwrap();
    assert_eq!(args, serde_json::json!({ "order_id": "ORD-1001", "amount": 120 }));
    let result = ran.str_attr("gen_ai.tool.call.result").unwrap();
    // The tool resolved the key (a key not starting `sk_live_` is a test key; no key would be
    // `sandbox`) and did not return it.
    assert!(result.contains("\"provider_mode\":\"test\""), "{result}");

    no_canary_anywhere(all);
}
