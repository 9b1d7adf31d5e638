//! `Idempotency-Key` on `POST /api/threads`, over HTTP to a server hosting `examples/server.rs`'s
//! `digest` graph on a redb file: twenty clients send one start with one key at once (a client
//! retrying through a flaky network, a queue redelivering). Exactly one thread and one run are
//! made, and every client gets the same answer, byte for byte. The same key with another request
//! is refused and starts nothing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentflow::access::RoleAccess;
use agentflow::server::Server;
use agentflow::{CancellationToken, Store};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::server::server_example::{POLICY, digest};
use crate::support::temp::temp_dir;

/// The users file: one caller who may start runs.
const USERS: &str = r#"{ "users": [ { "name": "agent", "token": "agent-token", "roles": ["agent"] } ] }"#;

/// A start with key `key` and body `body`: its status and body's bytes.
async fn start(base: &str, key: &str, body: &str) -> (StatusCode, Vec<u8>) {
    let response = reqwest::Client::new()
        .post(format!("{base}/api/threads"))
        .header("authorization", "Bearer agent-token")
        .header("content-type", "application/json")
        .header("idempotency-key", key)
        .body(body.to_string())
        .send()
        .await
        .expect("the start request");
    let status = response.status();
    (status, response.bytes().await.expect("the answer's body").to_vec())
}

#[tokio::test(flavor = "multi_thread")]
async fn twenty_starts_at_once_with_one_idempotency_key_make_one_run_and_get_one_answer() {
    let dir = temp_dir("idempotent-start");
    let users = dir.join("users.json");
    std::fs::write(&users, USERS).unwrap();
    let store: Arc<dyn Store> = Arc::new(crate::support::stores::open_redb(dir.join("server.redb")).unwrap());
    let running = Server::new()
        .users_file(&users)
        .unwrap()
        .access(RoleAccess::from_json(POLICY).unwrap())
        .app(digest::graph().app().store(Arc::clone(&store)), ())
        .listen("127.0.0.1:0".parse().unwrap())
        .await
        .expect("the server starts");
    let base = format!("http://{}", running.local_addr().unwrap());
    let stop = CancellationToken::new();
    let stopped = stop.clone();
    let serving = tokio::spawn(running.serve(async move { stopped.cancelled().await }));

    // No thread named: the server names the thread, and every answer names the same one.
    let body = json!({ "graph": "digest", "input": { "topic": "tides", "sections": 2, "pause_ms": 0 } }).to_string();
    let starts = (0..20).map(|_| {
        let (base, body) = (base.clone(), body.clone());
        tokio::spawn(async move { start(&base, "start-7f3a9c", &body).await })
    });
    let answers: Vec<(StatusCode, Vec<u8>)> =
        futures_util::future::join_all(starts).await.into_iter().map(Result::unwrap).collect();
    let (status, first) = answers[0].clone();
    assert_eq!(status, StatusCode::ACCEPTED, "{}", String::from_utf8_lossy(&first));
    for (n, (status, answer)) in answers.iter().enumerate() {
        assert_eq!(*status, StatusCode::ACCEPTED, "answer {n}");
        assert_eq!(answer, &first, "answer {n} differs from the first:\n{}", String::from_utf8_lossy(answer));
    }
    let view: Value = serde_json::from_slice(&first).unwrap();
    let thread = view["thread"].as_str().unwrap_or_else(|| panic!("the answer names no thread: {view}")).to_string();

    // The one run goes to its end.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let record = store.thread(&thread).unwrap();
        if record.as_ref().is_some_and(|r| r.status.as_str() == "completed") {
            break;
        }
        assert!(Instant::now() < deadline, "{thread} did not complete: {record:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let threads = store.list_threads().unwrap();
    assert_eq!(threads.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(), [thread.as_str()], "one thread");
    let submitted = store.list_audit(&thread).unwrap().into_iter().filter(|e| e.kind == "run.submitted").count();
    assert_eq!(submitted, 1, "one run was queued");
    let log = store.read_events(&thread, None, 1_000).unwrap();
    let runs = log.events.iter().filter(|e| e.kind == "run.started").count();
    assert_eq!(runs, 1, "one run ran: {:?}", log.events);

    // The same key with another request: refused, and nothing started.
    let other = json!({ "graph": "digest", "input": { "topic": "tides", "sections": 3, "pause_ms": 0 } }).to_string();
    let (status, refused) = start(&base, "start-7f3a9c", &other).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{}", String::from_utf8_lossy(&refused));
    let refused: Value = serde_json::from_slice(&refused).unwrap();
    assert_eq!(refused["error"]["code"], "idempotency_key_reused", "{refused}");
    assert_eq!(store.list_threads().unwrap().len(), 1, "the refused start made no thread");

    stop.cancel();
    serving.await.unwrap().expect("the server stops");
}
