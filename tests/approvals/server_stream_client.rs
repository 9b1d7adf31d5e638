//! A thread's stream read by the AG-UI protocol's own client, `@ag-ui/client` (pinned by
//! `web/package-lock.json`, installed by `npm ci --prefix web`), under Node: `web/ag_ui_stream.mjs`
//! reads it with the client's `HttpAgent`, which checks each event against the protocol's
//! schemas, verifies their order (a run opens with `RUN_STARTED`, one run at a time, ...) and
//! folds them into its messages, state and pending interrupts. A reply repeated (message ids are
//! derived from content) is one message, in a step and in a later run; a reader that starts in
//! the middle of the log folds the same state; a run that waits for an approval leaves it
//! pending; a run whose process died is closed before the run that goes on. Skipped without the
//! install or `node` (one line says so), except under `CI=true`, where that fails.

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentflow::access::Operation;
use agentflow::message::Message;
use agentflow::prelude::*;
use agentflow_store::{EventId, NewEvent, StepCommit, ThreadRecord};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::server_client::{Served, Who, policy, serve_with, user};
use crate::support::openapi::web_dir;

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
#[serde(default)]
pub struct Chat {
    #[reduce(messages)]
    pub messages: Vec<Message>,
    #[reduce(add)]
    pub turns: u32,
}

#[graph(state = Chat, start = hear)]
pub mod chat {
    use super::*;

    /// Hears the person, and answers twice at once.
    #[node(goto = [yes, also])]
    async fn hear(_s: &Chat) -> Step<Chat> {
        goto!([yes, also], Chat::update().turns(1))
    }

    /// "Sure." (its message's id is derived from its content).
    #[node(goto = [END])]
    async fn yes(_s: &Chat) -> Step<Chat> {
        goto!(END, Chat::update().messages(vec![Message::ai("Sure.")]))
    }

    /// "Sure." too, in the same step: the same message.
    #[node(goto = [END])]
    async fn also(_s: &Chat) -> Step<Chat> {
        goto!(END, Chat::update().messages(vec![Message::ai("Sure.")]))
    }
}

/// `agent` starts runs and follows them up; `bob` reads.
fn people() -> Vec<Value> {
    let agent: Vec<String> =
        ["start", "read_state", "list", "resume", "update_state"].iter().map(|r| r.to_string()).collect();
    let bob: Vec<String> = ["read_state", "list"].iter().map(|r| r.to_string()).collect();
    vec![user("agent", &agent, None), user("bob", &bob, None)]
}

async fn serve() -> Served {
    serve_with(&people(), |server, store| {
        server
            .access(policy().allow(Operation::UpdateState, "update_state"))
            .app(chat::graph().app().store(Arc::clone(store)), ())
    })
    .await
}

/// Whether the client is installed and `node` runs (see `web_package_installed`).
fn client_installed() -> bool {
    crate::support::openapi::web_package_installed("@ag-ui/client", "the AG-UI client test")
}

/// Thread `thread`'s stream read by the AG-UI client as `token`, after `after`, until `runs`
/// runs ended: the events it delivered, and what it folded (`ids`, `state`, `messages`,
/// `pendingInterrupts`). The client accepted every event and warned of nothing.
async fn read_with_client(
    served: &Served,
    thread: &str,
    token: &str,
    after: Option<&str>,
    runs: u32,
) -> (Vec<Value>, Value) {
    let url = format!("{}/api/threads/{thread}/stream", served.client.base());
    let mut args =
        vec![url, "--token".into(), token.into(), "--runs".into(), runs.to_string(), "--timeout".into(), "60".into()];
    if let Some(after) = after {
        args.extend(["--after".to_string(), after.to_string()]);
    }
    let script = web_dir().join("ag_ui_stream.mjs");
    let out = tokio::task::spawn_blocking(move || Command::new("node").arg(script).args(args).output())
        .await
        .unwrap()
        .expect("run node web/ag_ui_stream.mjs");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the AG-UI client refused the stream ({}):\n{stderr}\n{stdout}", out.status);
    // The client warns of what it strips or cannot apply (unknown fields, a patch that does not
    // apply to its state, a message it does not know): none here.
    assert!(stderr.trim().is_empty(), "the AG-UI client warned:\n{stderr}");
    let mut lines: Vec<Value> = stdout.lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect();
    let folded = lines.pop().expect("the client's last line");
    (lines, folded)
}

fn types(events: &[Value]) -> Vec<&str> {
    events.iter().map(|e| e["type"].as_str().unwrap_or_default()).collect()
}

/// The messages as the client folded them: `role: content` (`-` for none).
fn conversation(folded: &Value) -> Vec<String> {
    let list = folded["messages"].as_array().expect("the client's messages");
    list.iter()
        .map(|m| format!("{}: {}", m["role"].as_str().unwrap_or("?"), m["content"].as_str().unwrap_or("-")))
        .collect()
}

/// Polls (at most 60 s) until thread `thread`'s log holds `runs` ends.
async fn until_runs_end(served: &Served, thread: &str, runs: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let log = served.store.read_events(thread, None, 10_000).unwrap();
        if log.events.iter().filter(|e| e.kind == "run.finished").count() >= runs {
            return;
        }
        assert!(Instant::now() < deadline, "the runs of {thread} did not end: {:?}", log.events);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_ag_ui_client_gets_a_repeated_reply_once_and_the_state_each_run_starts_from() {
    if !client_installed() {
        return;
    }
    let served = serve().await;
    let agent = Who::Token("agent-token");
    let hi = json!({ "id": "human-1", "role": "human", "content": "hi" });
    let start = json!({ "graph": "chat", "thread": "chat-1", "input": { "messages": [hi] }, "wait": true });
    let run = served.client.post("/api/threads", &agent, Some(start)).await;
    assert_eq!(run.json["status"], "completed", "{}", run.json);
    // The same reply again, in the next run.
    let again = json!({ "id": "human-2", "role": "human", "content": "again" });
    let next = json!({ "graph": "chat", "thread": "chat-1", "input": { "messages": [again] } });
    let queued = served.client.post("/api/threads", &agent, Some(next)).await;
    assert_eq!(queued.status, 202, "{}", queued.json);
    until_runs_end(&served, "chat-1", 2).await;

    let (events, folded) = read_with_client(&served, "chat-1", "bob-token", None, 2).await;
    // Each run opens with the state and messages it starts from: the person's message reaches the
    // client that way.
    assert_eq!(types(&events)[..3], ["RUN_STARTED", "STATE_SNAPSHOT", "MESSAGES_SNAPSHOT"]);
    assert_eq!(events[2]["messages"], json!([{ "id": "human-1", "role": "user", "content": "hi" }]));
    // "Sure." was streamed once: by the first node of the first run.
    assert_eq!(types(&events).iter().filter(|t| **t == "TEXT_MESSAGE_CONTENT").count(), 1, "{events:?}");
    assert_eq!(types(&events).iter().filter(|t| **t == "RUN_STARTED").count(), 2);
    assert_eq!(conversation(&folded), ["user: hi", "assistant: Sure.", "user: again"]);
    let state = served.client.get("/api/threads/chat-1/state", &Who::Token("bob-token")).await.json;
    assert_eq!(folded["state"], state["state"], "the client's state is the thread's");
    assert_eq!(state["state"]["turns"], 2);

    // A reader that starts in the middle of the second run is brought in step, and folds the
    // same messages and state.
    let ids: Vec<&str> = folded["ids"].as_array().unwrap().iter().map(|i| i.as_str().unwrap()).collect();
    let second = events.iter().rposition(|e| e["type"] == "RUN_STARTED").unwrap();
    let within = ids[second + 3];
    let (late, late_folded) = read_with_client(&served, "chat-1", "bob-token", Some(within), 1).await;
    assert_eq!(types(&late)[0], "RUN_STARTED");
    assert_eq!(conversation(&late_folded), conversation(&folded));
    assert_eq!(late_folded["state"], folded["state"]);
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_ag_ui_client_holds_what_a_parked_run_waits_for() {
    if !client_installed() {
        return;
    }
    let served = serve().await;
    let start = json!({ "graph": "refunds", "input": { "amount": 40 }, "thread": "refund-7", "wait": true });
    let run = served.client.post("/api/threads", &Who::Token("agent-token"), Some(start)).await;
    assert_eq!(run.json["status"], "interrupted", "{}", run.json);
    let approval = run.json["approvals"][0]["id"].as_str().unwrap().to_string();
    let (events, folded) = read_with_client(&served, "refund-7", "bob-token", None, 1).await;
    assert_eq!(events.last().unwrap()["outcome"]["type"], "interrupt");
    let pending = folded["pendingInterrupts"].as_array().expect("the pending interrupts");
    assert_eq!(pending.len(), 1, "{folded}");
    assert_eq!((pending[0]["id"].as_str(), pending[0]["reason"].as_str()), (Some(&*approval), Some("approval")));
    assert_eq!(folded["state"]["amount"], 40);
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_ag_ui_client_reads_on_past_a_run_whose_process_died() {
    if !client_installed() {
        return;
    }
    let served = serve().await;
    // The log of a run that stopped after its first step (its process died), and of the run that
    // went on from its last commit.
    let event = |kind: &str, data: Value| NewEvent::new(kind, serde_json::to_vec(&data).unwrap());
    let step = |run: &str, seq: u64, note: &str| {
        event(
            "step",
            json!({ "run": run, "step": seq, "checkpoint": seq, "nodes": ["n"],
            "updates": [{ "node": "n", "instance": null, "update": { "note": note } }] }),
        )
    };
    let commits = [
        vec![event("run.started", json!({ "run": "r-1", "graph": "g", "resumed": false, "checkpoint": 0 }))],
        vec![step("r-1", 1, "first")],
        vec![
            event("run.started", json!({ "run": "r-2", "graph": "g", "resumed": true, "checkpoint": 1 })),
            step("r-2", 2, "second"),
            event("run.finished", json!({ "run": "r-2", "status": "completed", "checkpoint": 2, "detail": "" })),
        ],
    ];
    for (n, events) in commits.into_iter().enumerate() {
        let record = ThreadRecord::new("crashed", "agent", "fp-gone", 1, 1_000 + n as u64);
        served.store.commit_step(StepCommit::new(record).with_events(events)).unwrap();
    }
    assert_eq!(served.store.read_events("crashed", None, 10).unwrap().newest, Some(EventId::new(3, 2)));
    let (events, folded) = read_with_client(&served, "crashed", "bob-token", None, 2).await;
    assert_eq!(
        types(&events),
        [
            "RUN_STARTED",
            "STEP_STARTED",
            "STATE_DELTA",
            "STEP_FINISHED",
            "RUN_ERROR",
            "RUN_STARTED",
            "STEP_STARTED",
            "STATE_DELTA",
            "STEP_FINISHED",
            "RUN_FINISHED",
        ]
    );
    assert_eq!(events[4]["code"], "abandoned");
    assert!(events[4]["message"].as_str().unwrap().contains("run r-1 stopped without finishing"), "{}", events[4]);
    assert_eq!(folded["state"], json!({ "note": "second" }));
    served.stop().await;
}
