//! A thread's event stream read by the AG-UI protocol's own client, `@ag-ui/client` (pinned by
//! `web/package-lock.json`, installed by `npm ci --prefix web`), under Node: `web/ag_ui_stream.mjs`
//! reads `examples/server.rs`'s stream with the client's `HttpAgent`, which parses the events,
//! checks each against the protocol's schemas, verifies their order and folds them into its
//! messages and state. Skipped without the install or `node` (one line says so), except under
//! `CI=true`, where that fails.

use std::process::Command;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::server::{Served, api};
use crate::support::openapi::web_dir;
use crate::support::temp::temp_dir;

/// Whether the client is installed and `node` runs (see `web_package_installed`).
fn client_installed() -> bool {
    crate::support::openapi::web_package_installed("@ag-ui/client", "the AG-UI client test")
}

/// Runs a `digest` of `sections` sections to its end on thread `thread` (started by `agent`,
/// waited for), and returns its state as the API shows it to `bob`.
pub(crate) async fn finished_digest(base: &str, thread: &str, sections: u32) -> Value {
    let (status, run) = api(
        base,
        "agent-demo-token",
        "POST",
        "/api/threads",
        Some(json!({ "graph": "digest", "thread": thread, "input": { "topic": "tides", "sections": sections, "pause_ms": 0 }, "wait": true })),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{run}");
    assert_eq!(run["status"], "completed", "{run}");
    let (status, state) = api(base, "bob-demo-token", "GET", &format!("/api/threads/{thread}/state"), None).await;
    assert_eq!(status, StatusCode::OK, "{state}");
    state["state"].clone()
}

/// The AG-UI event types of a finished `digest` of `sections` sections, in order.
pub(crate) fn digest_event_types(sections: u32) -> Vec<&'static str> {
    // The run opens with the state and messages it starts from.
    let mut types = vec!["RUN_STARTED", "STATE_SNAPSHOT", "MESSAGES_SNAPSHOT"];
    // The outline: the model's call of `outline` and the tool's result, then `sections`.
    types.extend([
        "STEP_STARTED",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "TOOL_CALL_RESULT",
        "STATE_DELTA",
        "STEP_FINISHED",
    ]);
    for _ in 0..sections {
        types.extend([
            "STEP_STARTED",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "STATE_DELTA",
            "STEP_FINISHED",
        ]);
    }
    types.extend(["STATE_SNAPSHOT", "RUN_FINISHED"]);
    types
}

/// `SEQ-IDX-K` as three numbers.
fn position(id: &str) -> (u64, u32, u32) {
    let parts: Vec<u64> =
        id.split('-').map(|p| p.parse().unwrap_or_else(|_| panic!("the id `{id}` is not SEQ-IDX-K"))).collect();
    assert_eq!(parts.len(), 3, "the id `{id}` is not SEQ-IDX-K");
    (parts[0], u32::try_from(parts[1]).unwrap(), u32::try_from(parts[2]).unwrap())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_ag_ui_client_reads_a_runs_stream_verifies_it_and_folds_the_state_the_server_shows() {
    if !client_installed() {
        return;
    }
    let dir = temp_dir("stream-ag-ui");
    let served = Served::start(&["--db", dir.join("server.redb").to_str().unwrap()]);
    let sections = 3;
    let state = finished_digest(&served.base, "digest-node", sections).await;

    let url = format!("{}/api/threads/digest-node/stream", served.base);
    let script = web_dir().join("ag_ui_stream.mjs");
    let out = tokio::task::spawn_blocking(move || {
        Command::new("node")
            .arg(script)
            .args([url.as_str(), "--token", "bob-demo-token", "--timeout", "60"])
            .output()
            .expect("run node web/ag_ui_stream.mjs")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the AG-UI client refused the stream ({}):\n{stderr}\n{stdout}", out.status);
    // The client warns about what it strips or cannot apply (unknown fields, a patch it cannot
    // apply to its state): a stream the protocol describes whole draws no warning.
    assert!(stderr.trim().is_empty(), "the AG-UI client warned:\n{stderr}");

    let mut lines: Vec<Value> = stdout.lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect();
    let folded = lines.pop().expect("the client's last line");
    let types: Vec<&str> = lines.iter().map(|e| e["type"].as_str().unwrap_or_default()).collect();
    assert_eq!(types, digest_event_types(sections), "{stdout}");
    assert_eq!(lines[0]["threadId"], "digest-node");
    let finished = lines.last().unwrap();
    assert_eq!(finished["runId"], lines[0]["runId"], "one run, started and finished");
    assert_eq!(finished["result"]["status"], "completed", "{finished}");
    let call = lines.iter().find(|e| e["type"] == "TOOL_CALL_START").unwrap();
    assert_eq!(call["toolCallName"], "outline", "{call}");

    // One SSE id per event, strictly increasing.
    let ids: Vec<(u64, u32, u32)> =
        folded["ids"].as_array().expect("the ids").iter().map(|id| position(id.as_str().unwrap())).collect();
    assert_eq!(ids.len(), lines.len(), "{folded}");
    assert!(ids.windows(2).all(|p| p[0] < p[1]), "ids not strictly increasing: {ids:?}");

    // What the client folded from the events is the state the API shows, and the conversation.
    assert_eq!(folded["state"], state, "the client's state");
    let texts: Vec<&str> = folded["messages"]
        .as_array()
        .expect("the client's messages")
        .iter()
        .filter(|m| m["role"] == "assistant")
        .filter_map(|m| m["content"].as_str())
        .filter(|c| !c.is_empty())
        .collect();
    let expected: Vec<String> =
        (1..=sections).map(|n| format!("Section {n} of {sections}: what is known about tides.")).collect();
    assert_eq!(texts, expected, "{folded}");
    let tool = folded["messages"].as_array().unwrap().iter().find(|m| m["role"] == "tool").expect("the tool's result");
    assert_eq!(tool["toolCallId"], "outline-1", "{tool}");
}
