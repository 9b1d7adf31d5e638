//! The server's API against guessing and dead ends: wrong bearer tokens count per client address
//! together with the inbox's failed logins, and past the limit no token is checked (429 with
//! `Retry-After`); resuming a thread whose graph the server does not host, on the store file it
//! holds, is refused instead of queueing a run no process could run.

use std::sync::Arc;

use serde_json::json;

use crate::server_client::{Who, all_roles, serve, user};
use crate::support::questions::{Docs, Ran, map_questions};

#[tokio::test(flavor = "multi_thread")]
async fn wrong_tokens_at_the_api_and_the_login_count_together_and_past_the_limit_none_is_checked() {
    // The server's default limits: 10 failed attempts per client address.
    let served = serve(&[user("olga", &all_roles(), None)]).await;
    let olga = Who::Token("olga-token");
    // A wrong token at the inbox's login, then 8 at the API: 9 failed attempts.
    let login = served.client.try_login("guess-0").await;
    assert_eq!(login.status, 401, "{}", login.text);
    for n in 1..=8 {
        let reply = served.client.get("/api/threads", &Who::Token(&format!("guess-{n}"))).await;
        assert_eq!((reply.status, reply.json["error"]["code"].as_str()), (401, Some("unauthorized")), "{n}");
    }
    // A right token still passes (successes cost nothing), then the tenth wrong one is refused.
    assert_eq!(served.client.get("/api/threads", &olga).await.status, 200);
    assert_eq!(served.client.get("/api/threads", &Who::Token("guess-9")).await.status, 401);
    // From now on no token from this address is checked, not even a right one, at the API nor
    // at the login.
    for who in [Who::Token("guess-10"), Who::Token("olga-token")] {
        let reply = served.client.post("/api/threads/t-1/cancel", &who, None).await;
        assert_eq!(reply.status, 429, "{}", reply.json);
        assert_eq!(reply.json["error"]["code"], "too_many_attempts");
        assert!(reply.json["error"]["message"].as_str().unwrap().contains("the token was not checked"));
        let wait: u64 = reply.headers["retry-after"].to_str().unwrap().parse().unwrap();
        assert!((1..=6).contains(&wait), "one attempt comes back every 6 s: {wait}");
    }
    let login = served.client.try_login("olga-token").await;
    assert_eq!(login.status, 429, "{}", login.text);
    assert!(login.headers.contains_key("retry-after"));
    // The document says so on every route that wants a caller.
    let document = agentflow::server::api::spec();
    for (path, ops) in document["paths"].as_object().unwrap() {
        for (method, op) in ops.as_object().unwrap() {
            if op.get("x-agentflow-operation").is_some() {
                assert!(op["responses"].get("429").is_some(), "{method} {path} does not document 429");
            }
        }
    }
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn resuming_a_thread_of_a_graph_the_server_does_not_host_is_refused_and_nothing_is_queued() {
    let served = serve(&[user("olga", &all_roles(), None)]).await;
    let olga = Who::Token("olga-token");
    // A thread of `map_questions`, which this server does not host, waiting for an answer: run
    // in this process on the server's store, as a program holding the file would.
    let app = map_questions::graph().app().store(Arc::clone(&served.store));
    let ran = Ran::default();
    let input = Docs { names: vec!["a".into()], ..Docs::default() };
    app.runner(&ran).thread("elsewhere").run(input).await.unwrap();
    let pending = served.client.get("/api/threads/elsewhere/pending", &olga).await.json;
    let question = pending["pending"][0]["question"].as_str().expect("the question's id").to_string();

    let bodies = [json!({}), json!({ "value": "publish", "question": question })];
    for body in bodies {
        let reply = served.client.post("/api/threads/elsewhere/resume", &olga, Some(body.clone())).await;
        assert_eq!(reply.status, 409, "{body}: {}", reply.json);
        assert_eq!(reply.json["error"]["code"], "graph_not_hosted", "{body}");
        let message = reply.json["error"]["message"].as_str().unwrap();
        assert!(message.contains("graph `map_questions`") && message.contains("Server::app"), "{message}");
    }
    // Nothing was recorded or queued: the question still waits, no run is in the queue.
    assert!(served.audit("elsewhere", agentflow::approval::ANSWER_KIND).is_empty());
    assert!(served.store.list_runs().unwrap().iter().all(|r| r.thread != "elsewhere"));
    let still = served.client.get("/api/threads/elsewhere/pending", &olga).await.json;
    assert_eq!(still["pending"][0]["question"], question.as_str(), "{still}");
    served.stop().await;
}
