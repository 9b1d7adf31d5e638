//! A thread's runs as server-sent events (`GET /api/threads/{thread}/stream`): a run on a redb
//! store that waits for an approval, read as AG-UI events, read again from a `Last-Event-ID`,
//! followed live until the approved run ends; personal fields masked for a reader who may not see
//! them; a position past the log's end refused; the streams one user may hold open, and ended
//! when their caller may no longer read; and starts made idempotent by `Idempotency-Key`. The
//! AG-UI protocol's own client reads the streams in [`server_stream_client`](super::server_stream_client).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use agentflow::access::{AccessPolicy, Actor, Operation, RoleAccess};
use agentflow::message::Message;
use agentflow::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::server_client::{Served, Who, policy, serve_with, user};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
#[serde(default)]
pub struct Profile {
    #[state(pii)]
    pub email: String,
    #[reduce(messages)]
    pub messages: Vec<Message>,
    pub greeted: bool,
}

#[graph(state = Profile, start = greet)]
pub mod profile {
    use super::*;

    /// Greets the person by the address they gave.
    #[node(goto = [END])]
    async fn greet(s: &Profile) -> Step<Profile> {
        let hello = Message::ai(format!("Hello, {}!", s.email));
        goto!(END, Profile::update().email(s.email.to_uppercase()).messages(vec![hello]).greeted(true))
    }
}

fn roles(names: &[&str]) -> Vec<String> {
    names.iter().map(|r| r.to_string()).collect()
}

/// `agent` starts runs; `alice` decides refunds and sees personal data; `bob` only reads.
fn people() -> Vec<Value> {
    vec![
        user("agent", &roles(&["start", "read_state", "list"]), None),
        user("alice", &roles(&["decide", "refunds", "read_state", "list", "see_personal_data"]), None),
        user("bob", &roles(&["read_state", "list", "start"]), None),
    ]
}

async fn serve() -> Served {
    serve_with(&people(), |server, store| server.app(profile::graph().app().store(std::sync::Arc::clone(store)), ()))
        .await
}

/// The events of a stream's text: each one's `id:` and its `data:` as JSON.
fn events(text: &str) -> Vec<(Option<String>, Value)> {
    text.split("\n\n")
        .filter_map(|block| {
            let id = block.lines().find_map(|l| l.strip_prefix("id: ")).map(str::to_string);
            let data = block.lines().find_map(|l| l.strip_prefix("data: "))?;
            Some((id, serde_json::from_str(data).expect("each event's data is JSON")))
        })
        .collect()
}

fn types(events: &[(Option<String>, Value)]) -> Vec<String> {
    events.iter().map(|(_, e)| e["type"].as_str().unwrap().to_string()).collect()
}

/// `SEQ-IDX-K` as three numbers, to compare in order.
fn position(id: &str) -> (u64, u64, u64) {
    let parts: Vec<u64> = id.split('-').map(|p| p.parse().expect("a number")).collect();
    assert_eq!(parts.len(), 3, "{id}");
    (parts[0], parts[1], parts[2])
}

/// Whether two reads of a log are the same events with the same ids. The state a run's end shows
/// is the thread's when read unless the log names the checkpoint: compared apart.
fn same(a: &[(Option<String>, Value)], b: &[(Option<String>, Value)]) {
    let strip = |events: &[(Option<String>, Value)]| -> Vec<(Option<String>, Value)> {
        let mut events = events.to_vec();
        for (_, e) in &mut events {
            if e["type"] == "STATE_SNAPSHOT" {
                e["snapshot"] = Value::Null;
            }
        }
        events
    };
    assert_eq!(strip(a), strip(b));
}

/// The events of a read that have an id (an entry's own), and the ids.
fn with_ids(events: &[(Option<String>, Value)]) -> Vec<(Option<String>, Value)> {
    events.iter().filter(|(id, _)| id.is_some()).cloned().collect()
}

/// Reads a live stream until an event passes `done`: every event up to it.
async fn read_until(response: &mut reqwest::Response, done: impl Fn(&Value) -> bool) -> Vec<(Option<String>, Value)> {
    let mut bytes = Vec::new();
    let read = async {
        loop {
            let chunk = response.chunk().await.expect("the stream goes on").expect("the stream is not over");
            bytes.extend_from_slice(&chunk);
            let Some(end) = bytes.windows(2).rposition(|w| w == b"\n\n") else { continue };
            let complete = std::str::from_utf8(&bytes[..end]).expect("whole events are text");
            if events(complete).iter().any(|(_, e)| done(e)) {
                return events(complete);
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(30), read).await.expect("the event came in time")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_waiting_for_an_approval_streams_as_ag_ui_events_and_goes_on_from_the_last_event_id() {
    let served = serve().await;
    let (agent, alice) = (Who::Token("agent-token"), Who::Token("alice-token"));
    let start = json!({ "graph": "refunds", "input": { "amount": 40 }, "thread": "refund-1", "wait": true });
    let run = served.client.post("/api/threads", &agent, Some(start)).await.json;
    assert_eq!(run["status"], "interrupted", "{run}");
    let approval = run["approvals"][0]["id"].as_str().unwrap().to_string();

    let first = served.client.get("/api/threads/refund-1/stream?follow=false", &agent).await;
    assert_eq!(first.status, 200, "{}", first.text);
    assert!(first.headers["content-type"].to_str().unwrap().starts_with("text/event-stream"));
    let parked = events(&first.text);
    let kinds = types(&parked);
    // The run starts with the state it starts from; the step that asks for the approval is not
    // committed (the run parks before it ends); the run ends with the state and what it waits
    // for.
    assert_eq!(kinds, ["RUN_STARTED", "STATE_SNAPSHOT", "CUSTOM", "STATE_SNAPSHOT", "RUN_FINISHED"]);
    assert_eq!(parked[0].1["threadId"], "refund-1");
    assert_eq!(parked[1].1["snapshot"]["amount"], 40, "the input");
    let run_id = parked[0].1["runId"].as_str().expect("the run's id").to_string();
    let waits = parked.iter().find(|(_, e)| e["name"] == "agentflow.interrupt").expect("the run parks").1.clone();
    assert_eq!(waits["value"]["approvals"][0]["id"], approval.as_str(), "{waits}");
    assert_eq!(waits["value"]["approvals"][0]["tool"], "refund");
    let finished = &parked.last().unwrap().1;
    assert_eq!(
        (finished["runId"].as_str(), finished["result"]["status"].as_str()),
        (Some(&*run_id), Some("interrupted"))
    );
    // What the run waits for, as the protocol's interrupt outcome.
    assert_eq!(finished["outcome"]["type"], "interrupt", "{finished}");
    let interrupt = &finished["outcome"]["interrupts"][0];
    assert_eq!((interrupt["id"].as_str(), interrupt["reason"].as_str()), (Some(&*approval), Some("approval")));
    assert_eq!(interrupt["metadata"]["tool"], "refund");
    assert_eq!(parked[parked.len() - 2].1["snapshot"]["amount"], 40);
    // Every event has an id, strictly increasing.
    let ids: Vec<(u64, u64, u64)> = parked.iter().map(|(id, _)| position(id.as_deref().expect("an id"))).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");

    // Followed live: the stream waits, then the approved run's events come as it commits them.
    let mut live = served.client.open("/api/threads/refund-1/stream", &alice, &[]).await;
    assert_eq!(live.status(), 200);
    let last = parked.last().unwrap().0.clone().unwrap();
    let path = format!("/api/threads/refund-1/approvals/{approval}/approve");
    assert_eq!(served.client.post(&path, &alice, Some(json!({}))).await.status, 200);
    let followed = read_until(&mut live, |e| e["type"] == "RUN_FINISHED" && e["result"]["status"] == "completed").await;
    same(&followed[..parked.len()], &parked);
    let resumed = &followed[parked.len()..];
    assert_eq!(resumed[0].1["type"], "RUN_STARTED");
    assert_ne!(resumed[0].1["runId"], run_id.as_str(), "the resumed run is another run");
    assert_eq!(
        types(resumed),
        [
            "RUN_STARTED",
            "STATE_SNAPSHOT",
            "STEP_STARTED",
            "STATE_DELTA",
            "STEP_FINISHED",
            "STATE_SNAPSHOT",
            "RUN_FINISHED"
        ]
    );
    assert_eq!(resumed[1].1["snapshot"]["outcome"], Value::Null, "the state the resumed run goes on from");
    assert_eq!(resumed[2].1["stepName"], "pay");
    let delta = &resumed[3].1["delta"][0];
    assert_eq!((delta["op"].as_str(), delta["path"].as_str()), (Some("add"), Some("/outcome")));
    assert_eq!(delta["value"]["result"]["refunded"], 40);
    assert_eq!(resumed[5].1["snapshot"]["outcome"]["result"]["refunded"], 40);
    assert_eq!(resumed.last().unwrap().1["result"]["status"], "completed");
    assert!(resumed.last().unwrap().1.get("outcome").is_none());
    drop(live);

    // From the last event read: exactly what came after it (a run's start opens it).
    let after = served
        .client
        .open("/api/threads/refund-1/stream?follow=false", &agent, &[("last-event-id", last.as_str())])
        .await;
    let after = events(&after.text().await.unwrap());
    same(&after, resumed);
    // From within an entry, as `?after=`: the entry's events up to the position again without
    // ids, then the rest with theirs. The first run's end no longer shows the state: the next
    // run's start does.
    let within = followed[1].0.clone().unwrap();
    let rest = events(
        &served.client.get(&format!("/api/threads/refund-1/stream?follow=false&after={within}"), &agent).await.text,
    );
    assert_eq!(types(&rest[..2]), ["RUN_STARTED", "STATE_SNAPSHOT"]);
    assert!(rest[..2].iter().all(|(id, _)| id.is_none()), "{rest:?}");
    let old_end = parked[parked.len() - 2].0.clone();
    let expected: Vec<_> = with_ids(&followed[2..]).into_iter().filter(|(id, _)| *id != old_end).collect();
    same(&rest[2..], &expected);
    // A log entry's `SEQ-IDX`: the entries after it.
    let (seq, idx, _) = position(&within);
    let entry =
        served.client.get(&format!("/api/threads/refund-1/stream?follow=false&after={seq}-{idx}"), &agent).await;
    let entry = with_ids(&events(&entry.text));
    assert!(entry.iter().all(|(id, _)| {
        let (s, i, _) = position(id.as_deref().unwrap());
        (s, i) > (seq, idx)
    }));
    same(&entry[entry.len() - 1..], &followed[followed.len() - 1..]);
    // A position that is no event id is refused, and one past the log's newest entry (ids never
    // start again: no id of this thread); a thread not there is 404.
    let bad = served.client.open("/api/threads/refund-1/stream", &agent, &[("last-event-id", "yesterday")]).await;
    assert_eq!(bad.status(), 400);
    let past = served.client.get("/api/threads/refund-1/stream?after=99-0-0", &agent).await;
    assert_eq!(past.status, 400, "{}", past.text);
    let message = past.json["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("`99-0-0` is past the newest event"), "{message}");
    assert_eq!(served.client.get("/api/threads/nowhere/stream", &agent).await.status, 404);
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reader_without_personal_data_permission_reads_masked_values() {
    let served = serve().await;
    let (agent, alice, bob) = (Who::Token("agent-token"), Who::Token("alice-token"), Who::Token("bob-token"));
    let start = json!({ "graph": "profile", "input": { "email": "ada@example.com" }, "thread": "p-1", "wait": true });
    let run = served.client.post("/api/threads", &agent, Some(start)).await;
    assert_eq!(run.json["status"], "completed", "{}", run.json);

    let masked = events(&served.client.get("/api/threads/p-1/stream?follow=false", &bob).await.text);
    let delta = masked.iter().find(|(_, e)| e["type"] == "STATE_DELTA").expect("the step's delta").1.clone();
    assert!(
        delta["delta"].as_array().unwrap().iter().any(|op| op["path"] == "/email" && op["value"] == "•••"),
        "{delta}"
    );
    assert!(!delta.to_string().contains("ADA@"), "{delta}");
    let snapshots: Vec<&Value> =
        masked.iter().filter(|(_, e)| e["type"] == "STATE_SNAPSHOT").map(|(_, e)| &e["snapshot"]).collect();
    assert_eq!(snapshots.len(), 2, "the run's start and its end");
    assert_eq!((snapshots[0]["email"].as_str(), snapshots[0]["greeted"].as_bool()), (Some("•••"), Some(false)));
    assert_eq!((snapshots[1]["email"].as_str(), snapshots[1]["greeted"].as_bool()), (Some("•••"), Some(true)));
    assert!(!masked.iter().any(|(_, e)| e.to_string().contains("ADA@")));
    // The AI message comes whole, as text events.
    let text = masked.iter().find(|(_, e)| e["type"] == "TEXT_MESSAGE_CONTENT").expect("the greeting").1.clone();
    assert_eq!(text["delta"], "Hello, ada@example.com!");
    let started = masked.iter().find(|(_, e)| e["type"] == "TEXT_MESSAGE_START").unwrap();
    assert_eq!(started.1["role"], "assistant");
    assert!(served.audit("p-1", "personal_data.read").is_empty(), "nothing personal was shown to bob");

    let shown = served.client.get("/api/threads/p-1/stream?follow=false", &alice).await.text;
    assert!(shown.contains("ADA@EXAMPLE.COM"), "{shown}");
    let reads = served.audit("p-1", "personal_data.read");
    assert_eq!(reads.len(), 1);
    assert_eq!((reads[0].actor.as_str(), reads[0].detail["surface"].as_str()), ("alice", Some("stream")));

    // A session cookie reads it too, without the CSRF header (a GET: an EventSource sends none).
    let (cookie, _) = served.client.login("alice-token").await;
    let session = Who::Session { cookie: &cookie, csrf: None };
    let read = served.client.get("/api/threads/p-1/stream?follow=false", &session).await;
    assert_eq!(read.status, 200, "{}", read.text);
    assert_eq!(events(&read.text).len(), events(&shown).len());
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn one_user_holds_at_most_sixteen_streams_open() {
    let served = serve().await;
    let (agent, bob) = (Who::Token("agent-token"), Who::Token("bob-token"));
    let start = json!({ "graph": "profile", "input": { "email": "x@example.com" }, "thread": "p-2", "wait": true });
    assert_eq!(served.client.post("/api/threads", &agent, Some(start)).await.json["status"], "completed");
    let mut open = Vec::new();
    for _ in 0..16 {
        let stream = served.client.open("/api/threads/p-2/stream", &bob, &[]).await;
        assert_eq!(stream.status(), 200);
        open.push(stream);
    }
    let refused = served.client.get("/api/threads/p-2/stream?follow=false", &bob).await;
    assert_eq!(refused.status, 429, "{}", refused.text);
    assert_eq!(refused.json["error"]["code"], "too_many_streams");
    // Another user's streams are counted apart.
    assert_eq!(served.client.get("/api/threads/p-2/stream?follow=false", &agent).await.status, 200);
    // A stream that ends frees its place.
    open.pop();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let again = served.client.get("/api/threads/p-2/stream?follow=false", &bob).await;
        if again.status == 200 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the closed stream's place was never freed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Shutting down ends the open streams (the server waits for its connections to close).
    served.stop().await;
    for mut stream in open {
        let ended =
            tokio::time::timeout(Duration::from_secs(30), async { while let Ok(Some(_)) = stream.chunk().await {} });
        ended.await.expect("the stream ended with the server");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_start_sent_again_with_its_idempotency_key_answers_as_the_first() {
    let served = serve().await;
    let (agent, bob) = (Who::Token("agent-token"), Who::Token("bob-token"));
    let body = json!({ "graph": "gated", "input": {} });
    let first = served.client.post_with("/api/threads", &agent, &body, &[("idempotency-key", "key-1")]).await;
    assert_eq!(first.status, 202, "{}", first.json);
    let again = served.client.post_with("/api/threads", &agent, &body, &[("idempotency-key", "key-1")]).await;
    assert_eq!((again.status, &again.json), (202, &first.json), "the same answer");
    let thread = first.json["thread"].as_str().unwrap().to_string();
    let runs: Vec<_> = served.store.list_runs().unwrap().into_iter().filter(|r| r.graph == "gated").collect();
    assert_eq!(runs.len(), 1, "one run: {runs:?}");
    assert_eq!(served.audit(&thread, "run.submitted").len(), 1);

    // The key with another request is refused, starting nothing.
    let other = json!({ "graph": "gated", "input": { "passed": false } });
    let reused = served.client.post_with("/api/threads", &agent, &other, &[("idempotency-key", "key-1")]).await;
    assert_eq!(reused.status, 422, "{}", reused.json);
    assert_eq!(reused.json["error"]["code"], "idempotency_key_reused");
    // Another caller's key is another key.
    let theirs = served.client.post_with("/api/threads", &bob, &body, &[("idempotency-key", "key-1")]).await;
    assert_eq!(theirs.status, 202, "{}", theirs.json);
    assert_ne!(theirs.json["thread"], first.json["thread"]);
    // A key that is not 1 to 200 printable ASCII characters is refused.
    let long = "k".repeat(201);
    let refused = served.client.post_with("/api/threads", &agent, &body, &[("idempotency-key", long.as_str())]).await;
    assert_eq!(refused.status, 400, "{}", refused.json);

    // A thread the caller names, sent again once the worker created it: the same answer too.
    let named = json!({ "graph": "gated", "input": {}, "thread": "named-1" });
    let first = served.client.post_with("/api/threads", &agent, &named, &[("idempotency-key", "key-2")]).await;
    assert_eq!(first.status, 202, "{}", first.json);
    served.until_status(&agent, "named-1", "running").await;
    let again = served.client.post_with("/api/threads", &agent, &named, &[("idempotency-key", "key-2")]).await;
    assert_eq!((again.status, &again.json), (202, &first.json));
    // One that named its tenant too, sent again once the thread is queued: the same answer, not
    // the follow-up's "leave `tenant` out".
    let tenanted = json!({ "graph": "gated", "input": {}, "thread": "named-2", "tenant": "acme" });
    let first = served.client.post_with("/api/threads", &agent, &tenanted, &[("idempotency-key", "key-3")]).await;
    assert_eq!(first.status, 202, "{}", first.json);
    let again = served.client.post_with("/api/threads", &agent, &tenanted, &[("idempotency-key", "key-3")]).await;
    assert_eq!((again.status, &again.json), (202, &first.json));
    assert_eq!(served.audit("named-2", "run.submitted").len(), 1);
    served.gate.add_permits(4);
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_runs_no_worker_answers_and_streams_the_runs_another_worker_runs() {
    let served = serve_with(&people(), |server, store| {
        server.app(profile::graph().app().store(std::sync::Arc::clone(store)), ()).concurrency(0)
    })
    .await;
    let agent = Who::Token("agent-token");
    let start = json!({ "graph": "profile", "input": { "email": "b@example.com" }, "thread": "p-3" });
    let queued = served.client.post("/api/threads", &agent, Some(start)).await;
    assert_eq!((queued.status, queued.json["status"].as_str()), (202, Some("queued")), "{}", queued.json);
    // No worker of the server takes it: the thread is not even created.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(served.client.get("/api/threads/p-3", &agent).await.status, 404);
    assert_eq!(served.store.list_runs().unwrap().len(), 1);

    // Another worker on the store (one that logs, as a server's does) runs it; the stream follows.
    let worker_app = profile::graph().app().store(std::sync::Arc::clone(&served.store)).event_log(true);
    let stop = agentflow::CancellationToken::new();
    let worker = tokio::spawn(agentflow::Worker::new(worker_app, std::sync::Arc::new(())).run(stop.clone()));
    served.until_status(&agent, "p-3", "completed").await;
    let read = events(&served.client.get("/api/threads/p-3/stream?follow=false", &agent).await.text);
    assert_eq!(read.first().map(|(_, e)| e["type"].as_str()), Some(Some("RUN_STARTED")));
    assert_eq!(read.last().unwrap().1["result"]["status"], "completed");
    stop.cancel();
    worker.await.expect("the worker task").expect("the worker stopped");
    served.stop().await;
}

/// The test policy, except that `bob` may no longer read threads once `revoked` is set.
struct Revocable {
    roles: RoleAccess,
    revoked: Arc<AtomicBool>,
}

impl AccessPolicy for Revocable {
    fn permits(&self, actor: &Actor, operation: Operation, thread: Option<&str>) -> Result<(), String> {
        if actor.id == "bob" && operation == Operation::ReadState && self.revoked.load(Ordering::SeqCst) {
            return Err("bob's access to threads was revoked".to_string());
        }
        self.roles.permits(actor, operation, thread)
    }
}

/// Waits (at most 10 s) until the server ends `stream`.
async fn ends(stream: &mut reqwest::Response) {
    let ended = async {
        // Keep-alive comments and events may come before the end.
        while let Ok(Some(_)) = stream.chunk().await {}
    };
    tokio::time::timeout(Duration::from_secs(10), ended).await.expect("the stream ended");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_open_stream_ends_once_its_caller_may_no_longer_read_the_thread() {
    let revoked = Arc::new(AtomicBool::new(false));
    let switch = Arc::clone(&revoked);
    let served = serve_with(&people(), move |server, store| {
        server
            .access(Revocable { roles: policy(), revoked: switch })
            .app(profile::graph().app().store(Arc::clone(store)), ())
    })
    .await;
    let (agent, bob) = (Who::Token("agent-token"), Who::Token("bob-token"));
    let start = json!({ "graph": "profile", "input": { "email": "c@example.com" }, "thread": "p-4", "wait": true });
    assert_eq!(served.client.post("/api/threads", &agent, Some(start)).await.json["status"], "completed");

    // Bob follows the thread; the policy stops letting him read it: his stream ends, and a new
    // one is refused.
    let mut followed = served.client.open("/api/threads/p-4/stream", &bob, &[]).await;
    assert_eq!(followed.status(), 200);
    read_until(&mut followed, |e| e["type"] == "RUN_FINISHED").await;
    revoked.store(true, Ordering::SeqCst);
    ends(&mut followed).await;
    assert_eq!(served.client.get("/api/threads/p-4/stream?follow=false", &bob).await.status, 403);

    // Alice follows it through her inbox session; she logs out: her stream ends.
    let (cookie, csrf) = served.client.login("alice-token").await;
    let session = Who::Session { cookie: &cookie, csrf: None };
    let mut followed = served.client.open("/api/threads/p-4/stream", &session, &[]).await;
    assert_eq!(followed.status(), 200);
    read_until(&mut followed, |e| e["type"] == "RUN_FINISHED").await;
    let logout = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .post(format!("{}/logout", served.client.base()))
        .header("cookie", &cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("csrf={csrf}"))
        .send()
        .await
        .unwrap();
    assert_eq!(logout.status(), 303, "logged out");
    ends(&mut followed).await;
    served.stop().await;
}
