//! The server's JSON API over HTTP: a run started over HTTP reaches an approval, is approved over
//! HTTP and completes on the server's worker; runs in the background and waited for; questions
//! answered by resuming with a value; rejections and edits; cancel and pause; each action in the
//! thread's audit log in the caller's name; tokens for programs, the inbox's session cookie with
//! its CSRF token for the page; the OpenAPI document valid; one store per server.

use std::sync::Arc;

use agentflow::server::{RunningServer, Server, ServerError};
use agentflow::{RedbStore, Store};
use serde_json::{Value, json};

use crate::server_client::{Who, all_roles, refunds, serve, user};
use crate::support::openapi;
use crate::support::questions::{DELETE, REFUND, Ran, two_questions};
use crate::support::temp::temp_dir;

fn roles(names: &[&str]) -> Vec<String> {
    names.iter().map(|r| r.to_string()).collect()
}

/// `agent` starts and resumes runs; `alice` decides refunds and answers; `bob` only reads.
fn people() -> Vec<Value> {
    vec![
        user("agent", &roles(&["start", "resume", "read_state", "list", "cancel", "pause"]), None),
        user("alice", &roles(&["decide", "refunds", "answer", "resume", "read_state", "read_history", "list"]), None),
        user("bob", &roles(&["read_state", "list"]), None),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_started_over_http_waits_for_an_approval_and_completes_once_approved_over_http() {
    let served = serve(&people()).await;
    let (agent, alice) = (Who::Token("agent-token"), Who::Token("alice-token"));
    let start = json!({ "graph": "refunds", "input": { "amount": 40 }, "thread": "refund-1", "wait": true });
    let reply = served.client.post("/api/threads", &agent, Some(start)).await;
    assert_eq!(reply.status, 200, "{}", reply.json);
    let run = &reply.json;
    assert_eq!(run["status"], "interrupted", "{run}");
    assert_eq!(run["stopped"], true);
    assert_eq!(run["state"]["amount"], 40);
    assert_eq!(run["pending"][0]["kind"], "approval");
    let approval = run["approvals"][0]["id"].as_str().expect("the approval waits").to_string();
    assert_eq!(run["approvals"][0]["requester"], "agent", "the thread is the caller's");

    // Everything waiting for a person lists it; the thread's own list too.
    let waiting = served.client.get("/api/approvals", &alice).await.json;
    assert_eq!(waiting["approvals"][0]["id"], approval.as_str());
    let pending = served.client.get("/api/threads/refund-1/pending", &alice).await.json;
    assert_eq!(pending["approvals"][0]["id"], approval.as_str());

    // The requester may not approve its own call; alice may, and the worker goes on by itself.
    let path = format!("/api/threads/refund-1/approvals/{approval}/approve");
    let reply = served.client.post(&path, &Who::Token("bob-token"), None).await;
    assert_eq!(reply.status, 403, "{}", reply.json);
    let reply = served.client.post(&path, &alice, Some(json!({}))).await;
    assert_eq!(reply.status, 200, "{}", reply.json);
    assert_eq!(reply.json["status"], "APPROVED");
    assert_eq!(reply.json["decided_by"], "alice");
    let thread = served.until_status(&alice, "refund-1", "completed").await;
    assert_eq!(thread["owner"], "agent");
    assert_eq!(thread["graph"], "refunds");
    let state = served.client.get("/api/threads/refund-1/state", &alice).await.json;
    assert_eq!(state["state"]["outcome"]["result"]["refunded"], 40, "{state}");
    let history = served.client.get("/api/threads/refund-1/history", &alice).await;
    assert!(history.json.as_array().is_some_and(|h| h.len() >= 2), "{}", history.json);
    // Deciding again is a conflict, as is resuming a completed thread.
    let again = served.client.post(&path, &alice, None).await;
    assert_eq!(again.status, 409, "{}", again.json);
    let again = served.client.post("/api/threads/refund-1/resume", &agent, None).await;
    assert_eq!((again.status, again.json["error"]["code"].as_str()), (409, Some("conflict")), "{}", again.json);

    // Each action is in the thread's audit log in the caller's name.
    let submitted = served.audit("refund-1", "run.submitted");
    assert_eq!(submitted.len(), 1);
    assert_eq!(submitted[0].actor, "agent");
    let approved = served.audit("refund-1", "approval.approved");
    assert_eq!(approved.len(), 1);
    assert_eq!(approved[0].actor, "alice");
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_rejected_or_edited_over_http_is_decided_in_the_callers_name() {
    let served = serve(&people()).await;
    let (agent, alice) = (Who::Token("agent-token"), Who::Token("alice-token"));
    let mut approvals = Vec::new();
    for thread in ["to-reject", "to-edit"] {
        let start = json!({ "graph": "refunds", "input": { "amount": 90 }, "thread": thread, "wait": true });
        let run = served.client.post("/api/threads", &agent, Some(start)).await.json;
        approvals.push(run["approvals"][0]["id"].as_str().expect("an approval").to_string());
    }
    let reject = format!("/api/threads/to-reject/approvals/{}/reject", approvals[0]);
    let reply = served.client.post(&reject, &alice, Some(json!({ "reason": " " }))).await;
    assert_eq!(reply.status, 422, "a rejection needs a reason: {}", reply.json);
    let reply = served.client.post(&reject, &alice, Some(json!({ "reason": "not eligible" }))).await;
    assert_eq!(reply.json["status"], "REJECTED", "{}", reply.json);
    // An edit is checked by the tool's own schema; one that fits runs with the new arguments.
    let edit = format!("/api/threads/to-edit/approvals/{}/edit", approvals[1]);
    let reply = served.client.post(&edit, &alice, Some(json!({ "args": { "amount": "a lot" } }))).await;
    assert_eq!(reply.status, 422, "{}", reply.json);
    // The approval belongs to its thread: another thread's path does not reach it.
    let elsewhere = format!("/api/threads/to-reject/approvals/{}/edit", approvals[1]);
    assert_eq!(served.client.post(&elsewhere, &alice, Some(json!({ "args": { "amount": 7 } }))).await.status, 404);
    let reply = served.client.post(&edit, &alice, Some(json!({ "args": { "amount": 7 } }))).await;
    assert_eq!(reply.json["status"], "APPROVED", "{}", reply.json);
    served.until_status(&alice, "to-reject", "completed").await;
    served.until_status(&alice, "to-edit", "completed").await;
    let edited = served.client.get("/api/threads/to-edit/state", &alice).await.json;
    assert_eq!(edited["state"]["outcome"]["result"]["refunded"], 7, "{edited}");
    let rejected = served.audit("to-reject", "approval.rejected");
    assert_eq!((rejected.len(), rejected[0].actor.as_str()), (1, "alice"));
    let approved = served.audit("to-edit", "approval.approved");
    assert_eq!((approved.len(), approved[0].actor.as_str()), (1, "alice"));
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_background_run_answers_at_once_and_a_wait_ends_when_wait_ms_passes() {
    let served = serve(&people()).await;
    let agent = Who::Token("agent-token");
    // In the background: 202 at once, queued; the thread shows up held at the gate.
    let reply = served.client.post("/api/threads", &agent, Some(json!({ "graph": "gated", "input": {} }))).await;
    assert_eq!(reply.status, 202, "{}", reply.json);
    assert_eq!(reply.json["status"], "queued");
    assert_eq!(reply.json["stopped"], false);
    let first = reply.json["thread"].as_str().expect("a new thread id").to_string();
    assert!(first.starts_with("gated-"), "{first}");
    served.until_status(&agent, &first, "running").await;

    // Waited for, a run that cannot stop answers 202 once `wait_ms` passed, with where it is.
    let start = json!({ "graph": "gated", "input": {}, "thread": "held", "wait": true, "wait_ms": 300 });
    let reply = served.client.post("/api/threads", &agent, Some(start)).await;
    assert_eq!(reply.status, 202, "{}", reply.json);
    assert_eq!(reply.json["stopped"], false);
    assert!(["queued", "running"].contains(&reply.json["status"].as_str().unwrap()), "{}", reply.json);

    // Let both through: they complete on the worker.
    served.gate.add_permits(2);
    served.until_status(&agent, &first, "completed").await;
    served.until_status(&agent, "held", "completed").await;
    let state = served.client.get("/api/threads/held/state", &agent).await.json;
    assert_eq!(state["state"]["passed"], true);

    // A thread id taken names a follow-up run of that thread, which needs `update_state` too;
    // an input that is not the state is refused.
    let again = json!({ "graph": "gated", "input": {}, "thread": "held" });
    assert_eq!(served.client.post("/api/threads", &agent, Some(again)).await.status, 403);
    let wrong = json!({ "graph": "gated", "input": { "passed": "yes" } });
    let reply = served.client.post("/api/threads", &agent, Some(wrong)).await;
    assert_eq!(reply.status, 422, "{}", reply.json);
    assert_eq!(reply.json["error"]["code"], "unprocessable");
    let nowhere = json!({ "graph": "nowhere", "input": {} });
    assert_eq!(served.client.post("/api/threads", &agent, Some(nowhere)).await.status, 404);
    let reply = served.client.post("/api/threads", &agent, Some(json!({ "graph": 1 }))).await;
    assert_eq!(reply.status, 422, "{}", reply.json);
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_question_is_answered_by_resuming_with_a_value_in_the_callers_name() {
    let served = serve(&people()).await;
    let (agent, alice) = (Who::Token("agent-token"), Who::Token("alice-token"));
    let start = json!({ "graph": "two_questions", "input": {}, "thread": "ask-1", "wait": true });
    let reply = served.client.post("/api/threads", &agent, Some(start)).await;
    assert_eq!(reply.json["status"], "interrupted", "{}", reply.json);
    let pending = served.client.get("/api/threads/ask-1/pending", &alice).await.json;
    let question = |asks: &str| -> String {
        let found = pending["pending"].as_array().unwrap().iter().find(|p| p["payload"]["question"] == asks);
        found.and_then(|p| p["question"].as_str()).expect("the question and its id").to_string()
    };
    let (refund, delete) = (question(REFUND), question(DELETE));
    // A value without the id of the question it answers is refused: a person answers the
    // question they saw, and the list of them names its id.
    let reply = served.client.post("/api/threads/ask-1/resume", &alice, Some(json!({ "value": true }))).await;
    assert_eq!(reply.status, 422, "{}", reply.json);
    assert_eq!(reply.json["error"]["code"], "question_required");
    assert!(reply.json["error"]["message"].as_str().unwrap().contains("GET /api/threads/ask-1/pending"));
    // An id the thread does not ask is refused too, recording nothing.
    let body = json!({ "value": true, "question": "no-such-question" });
    let reply = served.client.post("/api/threads/ask-1/resume", &alice, Some(body)).await;
    assert_eq!(reply.status, 409, "{}", reply.json);
    assert!(served.audit("ask-1", agentflow::approval::ANSWER_KIND).is_empty());
    // `agent` may resume but not answer.
    let body = json!({ "value": true, "question": refund });
    let reply = served.client.post("/api/threads/ask-1/resume", &agent, Some(body.clone())).await;
    assert_eq!(reply.status, 403, "{}", reply.json);

    let reply = served.client.post("/api/threads/ask-1/resume", &alice, Some(body)).await;
    assert_eq!(reply.status, 202, "{}", reply.json);
    assert_eq!(reply.json["stopped"], true, "the other question still waits: {}", reply.json);
    let waiting = served.client.get("/api/approvals", &alice).await.json;
    let open: Vec<&Value> =
        waiting["interrupts"].as_array().unwrap().iter().filter(|i| i["thread"] == "ask-1").collect();
    assert_eq!(open.len(), 1, "{waiting}");
    assert_eq!(open[0]["question"], delete.as_str());

    let body = json!({ "value": false, "question": delete, "wait": true });
    let reply = served.client.post("/api/threads/ask-1/resume", &alice, Some(body)).await;
    assert_eq!(reply.status, 200, "{}", reply.json);
    assert_eq!(reply.json["status"], "completed", "{}", reply.json);
    assert_eq!(reply.json["state"]["refunded"], true);
    assert_eq!(reply.json["state"]["deleted"], false);
    let answers = served.audit("ask-1", agentflow::approval::ANSWER_KIND);
    assert_eq!(answers.len(), 2, "{answers:?}");
    assert!(answers.iter().all(|e| e.actor == "alice"), "{answers:?}");
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn cancel_and_pause_are_asked_in_the_callers_name() {
    let served = serve(&people()).await;
    let agent = Who::Token("agent-token");
    for thread in ["to-pause", "to-cancel"] {
        let start = json!({ "graph": "gated", "input": {}, "thread": thread });
        assert_eq!(served.client.post("/api/threads", &agent, Some(start)).await.status, 202);
        served.until_status(&agent, thread, "running").await;
    }
    let reply = served.client.post("/api/threads/to-pause/pause", &agent, None).await;
    assert_eq!(reply.json, json!({ "paused": true }));
    let reply = served.client.post("/api/threads/to-cancel/cancel", &agent, None).await;
    assert_eq!(reply.json, json!({ "cancelled": true }));
    // The held steps are stopped inside, where they wait.
    served.until_settled(&agent, "to-pause", "paused").await;
    served.until_settled(&agent, "to-cancel", "cancelled").await;
    assert_eq!(served.audit("to-pause", "run.pause_requested")[0].actor, "agent");
    assert_eq!(served.audit("to-cancel", "run.cancel_requested")[0].actor, "agent");
    // Nothing left to stop: `false`; resumed, the paused one is the caller's to continue.
    let reply = served.client.post("/api/threads/to-cancel/cancel", &agent, None).await;
    assert_eq!(reply.json, json!({ "cancelled": false }));
    served.gate.add_permits(1);
    let reply = served.client.post("/api/threads/to-pause/resume", &agent, Some(json!({ "wait": true }))).await;
    assert_eq!(reply.status, 200, "{}", reply.json);
    assert_eq!(reply.json["status"], "completed");
    assert_eq!(served.audit("to-pause", "run.resume_requested")[0].actor, "agent");
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_inbox_session_acts_with_its_csrf_token_and_tokens_need_none() {
    let served = serve(&[user("olga", &all_roles(), None)]).await;
    let olga = Who::Token("olga-token");
    let start = json!({ "graph": "gated", "input": {}, "thread": "g-1" });
    assert_eq!(served.client.post("/api/threads", &olga, Some(start)).await.status, 202);
    served.until_status(&olga, "g-1", "running").await;
    let (cookie, csrf) = served.client.login("olga-token").await;

    // Reads with the cookie alone.
    let session = Who::Session { cookie: &cookie, csrf: None };
    assert_eq!(served.client.get("/api/threads/g-1", &session).await.status, 200);
    // An action with the cookie and no CSRF token, or a wrong one, or from another site: 403.
    for who in [session, Who::Session { cookie: &cookie, csrf: Some("0000") }] {
        let reply = served.client.post("/api/threads/g-1/cancel", &who, None).await;
        assert_eq!(reply.status, 403, "{}", reply.json);
        assert_eq!(reply.json["error"]["code"], "csrf");
    }
    let with_csrf = Who::Session { cookie: &cookie, csrf: Some(&csrf) };
    let reply = served
        .client
        .send(reqwest::Method::POST, "/api/threads/g-1/cancel", &with_csrf, None, Some("https://evil.example"))
        .await;
    assert_eq!(reply.status, 403, "{}", reply.json);
    assert!(served.audit("g-1", "run.cancel_requested").is_empty(), "nothing was asked");
    // With the token: asked, in the session's user's name.
    let reply = served.client.post("/api/threads/g-1/cancel", &with_csrf, None).await;
    assert_eq!(reply.json, json!({ "cancelled": true }), "{}", reply.text);
    assert_eq!(served.audit("g-1", "run.cancel_requested")[0].actor, "olga");
    // No credentials, or a token of no one: 401.
    assert_eq!(served.client.get("/api/threads", &Who::Nobody).await.status, 401);
    assert_eq!(served.client.get("/api/threads", &Who::Token("nobody-token")).await.status, 401);
    // The inbox's pages answer next to the API; an unknown API address is the API's 404.
    assert_eq!(served.client.get("/login", &Who::Nobody).await.status, 200);
    let reply = served.client.get("/api/nothing", &olga).await;
    assert_eq!((reply.status, reply.json["error"]["code"].as_str()), (404, Some("not_found")));
    served.gate.add_permits(1);
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_openapi_document_needs_no_login_and_is_valid() {
    let served = serve(&[user("olga", &all_roles(), None)]).await;
    let reply = served.client.get("/openapi.json", &Who::Nobody).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.json, agentflow::server::api::spec());
    let graphs = served.client.get("/api/graphs", &Who::Token("olga-token")).await.json;
    let names: Vec<&str> = graphs.as_array().unwrap().iter().filter_map(|g| g["name"].as_str()).collect();
    assert_eq!(names, ["gated", "refunds", "two_questions"]);
    let described = served.client.get("/api/graphs/refunds", &Who::Token("olga-token")).await.json;
    assert_eq!(described["tools"][0]["name"], "refund");
    let file = served.dir.join("openapi.json");
    std::fs::write(&file, reply.text).unwrap();
    if let Some(validated) = openapi::validate(&file) {
        let said = validated.unwrap_or_else(|errors| panic!("the OpenAPI document is not valid: {errors}"));
        assert!(said.contains("OpenAPI 3.1.0"), "{said}");
    }
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_holds_one_store_and_says_what_to_do_otherwise() {
    let dir = temp_dir("server-config");
    let users = dir.join("users.json");
    std::fs::write(&users, json!({ "users": [user("olga", &all_roles(), None)] }).to_string()).unwrap();
    let store = || -> Arc<dyn Store> { Arc::new(RedbStore::in_memory().unwrap()) };
    let refused = |result: Result<RunningServer, ServerError>| match result {
        Err(ServerError::Config(message)) => message,
        Err(other) => panic!("another error: {other}"),
        Ok(_) => panic!("the server started"),
    };
    // Two apps, each with a store of its own: the second is refused, naming the fix.
    let (one, two) = (store(), store());
    let server = Server::new()
        .users_file(&users)
        .unwrap()
        .app(refunds::graph().app().store(one), ())
        .app(two_questions::graph().app().store(two), Ran::default());
    let message = refused(server.start().await);
    assert!(message.contains("two_questions") && message.contains("Arc::clone(&store)"), "{message}");
    // A graph hosted twice; an app without a store; no users; no store at all.
    let shared = store();
    let twice = Server::new()
        .users_file(&users)
        .unwrap()
        .app(refunds::graph().app().store(Arc::clone(&shared)), ())
        .app(refunds::graph().app().store(Arc::clone(&shared)), ());
    assert!(refused(twice.start().await).contains("hosted twice"));
    let storeless = Server::new().users_file(&users).unwrap().app(refunds::graph().app(), ());
    assert!(refused(storeless.start().await).contains("has no store"));
    let nobody = Server::new().store(store());
    assert!(refused(nobody.start().await).contains("users file"));
    let nothing = Server::new().users_file(&users).unwrap();
    assert!(refused(nothing.start().await).contains("no store"));
    // One store, given to the server and to the app: it starts, and stops.
    let running = Server::new()
        .users_file(&users)
        .unwrap()
        .store(Arc::clone(&shared))
        .app(refunds::graph().app().store(Arc::clone(&shared)), ())
        .start()
        .await
        .expect("one store");
    assert!(running.local_addr().is_none() && running.socket().is_none(), "not bound, not a file");
    running.shutdown().await;
    std::fs::remove_dir_all(&dir).ok();
}
