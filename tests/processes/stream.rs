//! A thread's event stream served by one server while another runs the thread, on PostgreSQL:
//! `examples/server.rs` as two processes sharing a schema. Server A runs a `digest` of several
//! slow steps; server B (`--workers 0`: it answers and streams, runs nothing) streams it to a
//! client. The client leaves in the middle of a log entry's events, A is killed (SIGKILL) in the
//! middle of the run and started again, and the client comes back with `Last-Event-ID`. What it
//! got over both connections is the log the store committed: ids strictly increasing, the
//! events of every entry as one read of the whole stream gives them, no entry missing, the killed
//! run closed as abandoned before the run that goes on, which ends with `RUN_FINISHED`.

use std::time::{Duration, Instant};

use agentflow::Store;
use agentflow_store::{EventId, PostgresStore};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::server::{Served, api};
use crate::sse_reader::{SseEvent, SseReader};
use crate::support::pg::{pg_url, unique_schema};
use crate::support::temp::temp_dir;

/// How long the client waits for one event: A's run goes on only once its lease, left by the
/// killed process, expired (30 s) and the restarted A claimed it.
const EVENT_WAIT: Duration = Duration::from_secs(90);

/// Polls (at most 60 s) until thread `thread` exists: a queued run's thread is made by the
/// worker's first commit, and a stream of a thread not made yet is refused (404).
pub(crate) async fn wait_for_thread(base: &str, thread: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, view) = api(base, "bob-demo-token", "GET", &format!("/api/threads/{thread}"), None).await;
        if status == StatusCode::OK {
            return;
        }
        assert_eq!(status, StatusCode::NOT_FOUND, "{view}");
        assert!(Instant::now() < deadline, "thread {thread} was not made: {view}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn on_postgresql_a_client_of_one_server_follows_a_run_another_server_is_killed_in_without_a_gap() {
    let Some(url) = pg_url() else { return };
    let schema = unique_schema("stream", "kill");
    let dir = temp_dir("stream-pg");
    let users = dir.join("users.json");
    let args = ["--store", url.as_str(), "--schema", schema.as_str(), "--users", users.to_str().unwrap()];
    let a = Served::start(&args);
    let b = Served::start(&[&args[..], &["--workers", "0"]].concat());

    // Started through B, which runs nothing: A claims it from the shared queue.
    let sections = 12;
    let (status, queued) = api(
        &b.base,
        "agent-demo-token",
        "POST",
        "/api/threads",
        Some(json!({ "graph": "digest", "thread": "digest-pg", "input": { "topic": "tides", "sections": sections, "pause_ms": 250 } })),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{queued}");
    wait_for_thread(&b.base, "digest-pg").await;

    let stream = format!("{}/api/threads/digest-pg/stream", b.base);
    let mut reader = SseReader::open(&stream, "bob-demo-token", None).await;
    let mut got: Vec<SseEvent> = Vec::new();
    // Until the third section's step starts: the client leaves there, before the rest of that
    // entry's events (its message, its state delta, its end).
    let mut writes = 0;
    loop {
        let event = reader.next_within(EVENT_WAIT).await;
        let started_write = event.kind() == "STEP_STARTED" && event.json()["stepName"] == "write";
        got.push(event);
        if started_write {
            writes += 1;
            if writes == 3 {
                break;
            }
        }
    }
    drop(reader);
    let left_at = got.last().and_then(|e| e.id.clone()).expect("an id to come back from");
    // A dies in the middle of the run: the section it is writing is never committed.
    a.kill();
    let (status, view) = api(&b.base, "bob-demo-token", "GET", "/api/threads/digest-pg", None).await;
    assert_eq!(status, StatusCode::OK, "{view}");
    assert_ne!(view["status"], "completed", "A was killed before the run's end: {view}");
    let a = Served::start(&args);

    let mut reader = SseReader::open(&stream, "bob-demo-token", Some(&left_at)).await;
    let first_back = got.len();
    loop {
        let event = reader.next_within(EVENT_WAIT).await;
        let json = event.json();
        got.push(event);
        // The killed run is closed (`abandoned`) before the run that goes on: not the end.
        if json["type"] == "RUN_FINISHED" || (json["type"] == "RUN_ERROR" && json["code"] != "abandoned") {
            break;
        }
    }
    drop(reader);
    // Coming back within an entry, the client was brought in step first: the run, the state and
    // messages before that entry, and the entry's events it had got, all without ids.
    let again: Vec<String> = got[first_back..].iter().take_while(|e| e.id.is_none()).map(SseEvent::kind).collect();
    assert_eq!(again, ["RUN_STARTED", "STATE_SNAPSHOT", "MESSAGES_SNAPSHOT", "STEP_STARTED"]);
    let last = got.last().unwrap().json();
    assert_eq!(last["type"], "RUN_FINISHED", "{last}");
    assert_eq!(last["result"]["status"], "completed", "{last}");
    let resumed = got[first_back..].iter().filter(|e| e.kind() == "STEP_FINISHED").count();
    assert!(resumed >= 1, "the sections written after the restart came over the second connection");
    let abandoned: Vec<Value> =
        got[first_back..].iter().map(SseEvent::json).filter(|e| e["code"] == "abandoned").collect();
    assert_eq!(abandoned.len(), 1, "the killed run is closed once: {abandoned:?}");

    // Ids strictly increasing over both connections, and the events with ids exactly those one
    // read of the whole stream gives: none missing where the client left and came back.
    let with_ids: Vec<&SseEvent> = got.iter().filter(|e| e.id.is_some()).collect();
    let positions: Vec<(u64, u32, u32)> = with_ids.iter().map(|e| e.position()).collect();
    for pair in positions.windows(2) {
        assert!(pair[0] < pair[1], "ids not strictly increasing: {:?} then {:?}", pair[0], pair[1]);
    }
    let mut whole = SseReader::open(&format!("{stream}?follow=false"), "bob-demo-token", None).await;
    let mut read = Vec::new();
    loop {
        let event = whole.next_within(EVENT_WAIT).await;
        let done = event.kind() == "RUN_FINISHED";
        read.push((event.id.clone(), event.json()));
        if done {
            break;
        }
    }
    let got_events: Vec<(Option<String>, Value)> = with_ids.iter().map(|e| (e.id.clone(), e.json())).collect();
    assert_eq!(got_events, read, "the events over both connections are the stream's");
    let mut entries: Vec<EventId> = positions.iter().map(|&(seq, idx, _)| EventId::new(seq, idx)).collect();
    entries.dedup();

    // The entries the client got are the store's committed log, in order, from its first.
    let store = PostgresStore::builder().schema(schema.clone()).open(&url).expect("open the PostgreSQL store");
    let log = tokio::task::spawn_blocking(move || store.read_events("digest-pg", None, 10_000))
        .await
        .unwrap()
        .expect("read the thread's log");
    let committed: Vec<EventId> = log.events.iter().map(|e| e.id).collect();
    assert_eq!(entries, committed, "the stream's entries are the committed log");
    assert_eq!(committed.first(), Some(&EventId::new(1, 0)), "the log starts at its first commit");
    for pair in committed.windows(2) {
        let next_idx = pair[1].seq == pair[0].seq && pair[1].idx == pair[0].idx + 1;
        let next_seq = pair[1].seq == pair[0].seq + 1 && pair[1].idx == 0;
        assert!(next_idx || next_seq, "a gap in the committed log between {} and {}", pair[0], pair[1]);
    }
    // Every section was written once: the killed step again, the others not twice.
    let steps: Vec<u64> = log.events.iter().filter(|e| e.kind == "step").map(|e| e.id.seq).collect();
    assert_eq!(steps.len(), sections + 1, "the outline and one step per section: {:?}", log.events);
    drop(a);
}
