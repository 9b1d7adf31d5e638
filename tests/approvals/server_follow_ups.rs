//! Follow-up runs and completion webhooks through the server's API: `POST /api/threads` naming a
//! thread that waits for a person refused (409) with `reject` and queued behind its run with the
//! default `enqueue` (with `wait`, answered at once as behind a waiting run), run once the person
//! decided; with `wait`, a follow-up answered once its own run ended, not the next one's; a
//! start's webhook delivered by the server's
//! dispatcher, signed with the operator's secret, and a URL outside the allowed prefixes refused.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentflow::access::Operation;
use agentflow::server::verify_webhook;
use agentflow::webhook::WebhookConfig;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use serde_json::{Value, json};

use crate::server_client::{Served, Who, all_roles, policy, serve_with, user};

const SECRET: &[u8] = b"the operator's webhook secret";

/// `agent` starts, follows up and reads; `alice` decides refunds.
fn people() -> Vec<Value> {
    let mut agent = all_roles();
    agent.extend(["update_state".to_string(), "fork".to_string()]);
    vec![user("agent", &agent, None), user("alice", &all_roles(), None)]
}

/// The approval thread `thread` waits for, once it waits for one.
async fn waiting_approval(served: &Served, thread: &str) -> Value {
    let alice = Who::Token("alice-token");
    served.until_status(&alice, thread, "interrupted").await;
    let pending = served.client.get(&format!("/api/threads/{thread}/pending"), &alice).await.json;
    pending["approvals"][0].clone()
}

async fn approve(served: &Served, thread: &str, id: &str) {
    let path = format!("/api/threads/{thread}/approvals/{id}/approve");
    let reply = served.client.post(&path, &Who::Token("alice-token"), Some(json!({}))).await;
    assert_eq!(reply.status, 200, "{}", reply.json);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_follow_up_is_refused_with_reject_and_queued_behind_the_waiting_run_by_default() {
    let served = serve_with(&people(), |server, _| {
        server.access(policy().allow(Operation::UpdateState, "update_state").allow(Operation::Fork, "fork"))
    })
    .await;
    let agent = Who::Token("agent-token");
    let start = json!({ "graph": "refunds", "input": { "amount": 40 }, "thread": "chat-1" });
    let reply = served.client.post("/api/threads", &agent, Some(start)).await;
    assert_eq!(reply.status, 202, "{}", reply.json);
    let first = waiting_approval(&served, "chat-1").await;

    let next =
        json!({ "graph": "refunds", "thread": "chat-1", "input": { "amount": 5 }, "multitask_strategy": "reject" });
    let reply = served.client.post("/api/threads", &agent, Some(next)).await;
    assert_eq!(
        (reply.status, reply.json["error"]["code"].as_str()),
        (409, Some("follow_up_refused")),
        "{}",
        reply.json
    );
    assert!(reply.json["error"]["message"].as_str().unwrap().contains("interrupted"), "{}", reply.json);

    let next = json!({ "graph": "refunds", "thread": "chat-1", "input": { "amount": 5 } });
    let reply = served.client.post("/api/threads", &agent, Some(next)).await;
    assert_eq!(reply.status, 202, "{}", reply.json);
    assert_eq!((reply.json["status"].as_str(), reply.json["ahead"].as_u64()), (Some("behind"), Some(0)));
    assert_eq!(reply.json["thread"], "chat-1");
    // Waited for behind a run that waits for a person: answered at once, saying so.
    let waited = json!({ "graph": "refunds", "thread": "chat-1", "input": { "amount": 5 }, "wait": true });
    let reply = served.client.post("/api/threads", &agent, Some(waited)).await;
    assert_eq!(reply.status, 202, "{}", reply.json);
    assert_eq!(
        (reply.json["status"].as_str(), reply.json["ahead"].as_u64(), reply.json["stopped"].as_bool()),
        (Some("behind_waiting"), Some(1), Some(false)),
        "{}",
        reply.json
    );
    // An update that is not one of the graph's is refused, nothing queued.
    let wrong = json!({ "graph": "refunds", "thread": "chat-1", "input": { "amount": "five" } });
    let reply = served.client.post("/api/threads", &agent, Some(wrong)).await;
    assert_eq!(reply.status, 422, "{}", reply.json);

    // Decided, the first run ends; the follow-up runs on its thread and asks for its own refund.
    approve(&served, "chat-1", first["id"].as_str().unwrap()).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let second = loop {
        let approval = waiting_approval(&served, "chat-1").await;
        if approval["id"] != first["id"] && !approval.is_null() {
            break approval;
        }
        assert!(tokio::time::Instant::now() < deadline, "the follow-up never asked: {approval}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(second["arguments"]["amount"], 5, "{second}");
    // The one sent with `wait` waits behind it; none failed.
    let view = served.client.get("/api/threads/chat-1", &agent).await.json;
    assert_eq!((view["follow_ups"]["waiting"].as_u64(), &view["follow_ups"]["last_failed"]), (Some(1), &Value::Null));
    let state = served.client.get("/api/threads/chat-1/state", &agent).await.json;
    assert_eq!(state["state"]["amount"], 5, "{state}");
    assert_eq!(state["state"]["outcome"]["result"]["refunded"], 40, "the first run's refund is kept: {state}");
    let submitted = served.audit("chat-1", "run.submitted");
    assert_eq!(submitted.len(), 3);
    assert_eq!((submitted[1].actor.as_str(), &submitted[1].detail["follow_up"]), ("agent", &json!(true)));
    assert_eq!(served.audit("chat-1", "run.follow_up").len(), 1);
    served.stop().await;
}

/// The thread's run in the queue: a follow-up (`true`) or its first run, once one is there.
fn queued_follow_up(served: &Served, thread: &str) -> Option<bool> {
    served.store.scan_runs().unwrap().items.into_iter().find(|r| r.thread == thread).map(|r| r.follow_up)
}

/// Polls `done` until it holds (30 s at most).
async fn until(what: &str, done: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_follow_up_sent_with_wait_is_answered_when_its_own_run_ends_not_the_next_one() {
    let served = serve_with(&people(), |server, _| {
        server.access(policy().allow(Operation::UpdateState, "update_state").allow(Operation::Fork, "fork"))
    })
    .await;
    let agent = Who::Token("agent-token");
    // Each run of `gated` holds until the test adds a permit.
    let start = json!({ "graph": "gated", "input": {}, "thread": "g-1" });
    assert_eq!(served.client.post("/api/threads", &agent, Some(start)).await.status, 202);
    served.until_status(&agent, "g-1", "running").await;

    let mine =
        json!({ "graph": "gated", "thread": "g-1", "input": { "passed": false }, "wait": true, "wait_ms": 20_000 });
    let waited = served.client.post("/api/threads", &agent, Some(mine));
    let drive = async {
        until("the follow-up is queued", || served.store.list_follow_ups("g-1").unwrap().len() == 1).await;
        // The next follow-up, queued behind the one waited for.
        let next = json!({ "graph": "gated", "thread": "g-1", "input": { "passed": false } });
        let reply = served.client.post("/api/threads", &agent, Some(next)).await;
        assert_eq!((reply.status, reply.json["ahead"].as_u64()), (202, Some(1)), "{}", reply.json);
        // The first run ends; the follow-up waited for runs, then ends too; the next one holds.
        served.gate.add_permits(1);
        until("the follow-up runs", || {
            queued_follow_up(&served, "g-1") == Some(true) && served.store.list_follow_ups("g-1").unwrap().len() == 1
        })
        .await;
        served.gate.add_permits(1);
    };
    let (reply, ()) = tokio::join!(waited, drive);
    assert_eq!(reply.status, 200, "answered when its own run ended: {}", reply.json);
    assert_eq!((reply.json["stopped"].as_bool(), reply.json["thread"].as_str()), (Some(true), Some("g-1")));
    // The run waited for was its own: the next one still holds, queued.
    assert_eq!(queued_follow_up(&served, "g-1"), Some(true));
    assert!(served.store.list_follow_ups("g-1").unwrap().is_empty());
    served.gate.add_permits(1);
    until("the next follow-up ends", || queued_follow_up(&served, "g-1").is_none()).await;
    served.stop().await;
}

/// What a receiver saw: each request's headers and body.
type Seen = Arc<Mutex<Vec<(HeaderMap, Bytes)>>>;

/// A receiver on 127.0.0.1 answering 204; its base URL and what it saw.
async fn receiver() -> (String, Seen) {
    let seen: Seen = Arc::default();
    async fn hook(State(seen): State<Seen>, headers: HeaderMap, body: Bytes) -> StatusCode {
        seen.lock().unwrap().push((headers, body));
        StatusCode::NO_CONTENT
    }
    let app = Router::new().route("/agentflow/done", post(hook)).with_state(Arc::clone(&seen));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (base, seen)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_start_tells_its_allowed_webhook_signed_and_a_url_outside_the_prefixes_is_refused() {
    let (base, seen) = receiver().await;
    let allowed = format!("{base}/agentflow/");
    let config = WebhookConfig::new(SECRET).allow(allowed.clone());
    let served = serve_with(&people(), move |server, _| server.webhooks(config)).await;
    let agent = Who::Token("agent-token");

    let elsewhere = json!({ "graph": "refunds", "input": { "amount": 1 }, "webhook": "http://127.0.0.1:9/steal" });
    let reply = served.client.post("/api/threads", &agent, Some(elsewhere)).await;
    assert_eq!(
        (reply.status, reply.json["error"]["code"].as_str()),
        (422, Some("webhook_not_allowed")),
        "{}",
        reply.json
    );
    assert!(reply.json["error"]["message"].as_str().unwrap().contains(&allowed), "{}", reply.json);

    let url = format!("{base}/agentflow/done");
    let start = json!({ "graph": "refunds", "input": { "amount": 40 }, "thread": "hooked", "webhook": url });
    let reply = served.client.post("/api/threads", &agent, Some(start)).await;
    assert_eq!(reply.status, 202, "{}", reply.json);
    // The run parks for its approval: the settle that parks it writes the delivery.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while seen.lock().unwrap().is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "the webhook never came");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (headers, body) = seen.lock().unwrap()[0].clone();
    let header = |name: &str| headers.get(name).unwrap().to_str().unwrap().to_string();
    let (timestamp, signature) = (header("x-agentflow-timestamp"), header("x-agentflow-signature"));
    assert!(verify_webhook(SECRET, &timestamp, &body, &signature));
    let sent: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!((sent["thread_id"].as_str(), sent["status"].as_str()), (Some("hooked"), Some("interrupted")), "{sent}");
    assert_eq!(sent["values"]["amount"], 40);
    served.stop().await;
}
