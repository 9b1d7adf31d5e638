//! Every route of the server's API is checked for the caller: driven from the OpenAPI document
//! (each operation names the access operation it needs, `x-agentflow-operation`), a user holding
//! every role but that one is refused with 403 and nothing is done; a user of another tenant
//! finds none of a tenant's threads (404, as a missing one) and lists none of them.

use serde_json::{Value, json};

use crate::server_client::{OPERATIONS, Served, Who, all_roles, serve, user};

/// Every role but `operation`'s.
fn all_but(operation: &str) -> Vec<String> {
    all_roles().into_iter().filter(|r| r != operation).collect()
}

/// `path` with its parameters filled in.
fn concrete(path: &str, thread: &str, approval: &str) -> String {
    path.replace("{thread}", thread)
        .replace("{approval}", approval)
        .replace("{graph}", "refunds")
        .replace("{id}", "s-1")
}

/// A body the route takes, for a request that would do something if it were let through.
fn body_for(id: &str) -> Option<Value> {
    match id {
        "startThread" => {
            Some(json!({ "graph": "refunds", "input": { "amount": 5 }, "thread": "new-1", "tenant": "acme" }))
        }
        "rejectCall" => Some(json!({ "reason": "no" })),
        "createSchedule" => Some(
            json!({ "id": "s-1", "graph": "refunds", "cron": "* * * * *", "input": { "amount": 5 }, "tenant": "acme" }),
        ),
        "editCall" => Some(json!({ "args": { "amount": 1 } })),
        "resumeThread" | "approveCall" => Some(json!({})),
        _ => None,
    }
}

/// Each operation of the document: its method, path, operationId and access operation.
fn operations() -> Vec<(reqwest::Method, String, String, Option<String>)> {
    let spec = agentflow::server::api::spec();
    let mut out = Vec::new();
    for (path, ops) in spec["paths"].as_object().unwrap() {
        for (method, op) in ops.as_object().unwrap() {
            let method = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let operation = op.get("x-agentflow-operation").and_then(Value::as_str).map(str::to_string);
            out.push((method, path.clone(), op["operationId"].as_str().unwrap().to_string(), operation));
        }
    }
    out
}

/// A server whose thread `acme-1` of tenant `acme` waits for an approval; its id.
async fn waiting_refund(users: &[Value]) -> (Served, String) {
    let served = serve(users).await;
    let start =
        json!({ "graph": "refunds", "input": { "amount": 40 }, "thread": "acme-1", "tenant": "acme", "wait": true });
    let reply = served.client.post("/api/threads", &Who::Token("root-token"), Some(start)).await;
    assert_eq!(reply.json["status"], "interrupted", "{}", reply.json);
    let approval = reply.json["approvals"][0]["id"].as_str().unwrap().to_string();
    (served, approval)
}

#[tokio::test(flavor = "multi_thread")]
async fn every_route_refuses_a_caller_without_its_operation() {
    let mut users = vec![user("root", &all_roles(), None)];
    for op in OPERATIONS {
        users.push(user(&format!("no-{}", op.as_str().replace('_', "-")), &all_but(op.as_str()), Some(&["acme"])));
    }
    let (served, approval) = waiting_refund(&users).await;
    let audit_before = served.store.list_audit("acme-1").unwrap().len();
    let mut checked = 0;
    for (method, path, id, operation) in operations() {
        let Some(operation) = operation else { continue };
        let token = format!("no-{}-token", operation.replace('_', "-"));
        let who = Who::Token(&token);
        let address = concrete(&path, "acme-1", &approval);
        let reply = served.client.send(method.clone(), &address, &who, body_for(&id).as_ref(), None).await;
        assert_eq!(reply.status, 403, "{method} {path} ({id}) without `{operation}`: {}", reply.json);
        assert_eq!(reply.json["error"]["code"], "forbidden", "{id}");
        let message = reply.json["error"]["message"].as_str().unwrap();
        assert!(message.contains(&format!("only the `{operation}` role may")), "{id}: {message}");
        checked += 1;
    }
    assert!(checked >= 15, "every route but the document was tried: {checked}");
    // Nothing was done: no new thread, the approval still waits, no new audit entry.
    assert!(served.store.thread("new-1").unwrap().is_none());
    assert!(served.store.scan_schedules().unwrap().items.is_empty(), "no schedule was made");
    let pending = served.client.get("/api/threads/acme-1/pending", &Who::Token("root-token")).await;
    assert_eq!(pending.json["approvals"][0]["status"], "PENDING", "{}", pending.json);
    assert_eq!(served.store.list_audit("acme-1").unwrap().len(), audit_before);
    // Answering needs `answer` besides `resume`.
    let answer = json!({ "value": true });
    let reply = served.client.post("/api/threads/acme-1/resume", &Who::Token("no-answer-token"), Some(answer)).await;
    assert_eq!(reply.status, 403, "{}", reply.json);
    // Waiting for a run's result reads its state: `read_state` besides `start`.
    let start = json!({ "graph": "refunds", "input": {}, "thread": "new-2", "tenant": "acme", "wait": true });
    let reply = served.client.post("/api/threads", &Who::Token("no-read-state-token"), Some(start)).await;
    assert_eq!(reply.status, 403, "{}", reply.json);
    assert!(served.store.thread("new-2").unwrap().is_none());
    // So does a webhook, which posts the run's end state.
    let start = json!({ "graph": "refunds", "input": {}, "thread": "new-3", "tenant": "acme",
                        "webhook": "http://127.0.0.1:9/hook" });
    let reply = served.client.post("/api/threads", &Who::Token("no-read-state-token"), Some(start)).await;
    assert_eq!(reply.status, 403, "{}", reply.json);
    assert!(served.store.thread("new-3").unwrap().is_none());
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_thread_of_another_tenant_is_not_found_on_any_route_and_not_listed() {
    let users = [user("root", &all_roles(), None), user("gus", &all_roles(), Some(&["globex"]))];
    let (served, approval) = waiting_refund(&users).await;
    let gus = Who::Token("gus-token");
    let mut checked = 0;
    for (method, path, id, operation) in operations() {
        if operation.is_none() || !path.contains("{thread}") {
            continue;
        }
        let address = concrete(&path, "acme-1", &approval);
        let reply = served.client.send(method.clone(), &address, &gus, body_for(&id).as_ref(), None).await;
        assert_eq!(reply.status, 404, "{method} {path} ({id}) of another tenant: {}", reply.json);
        // Said exactly as a thread that does not exist.
        let missing = served
            .client
            .send(method, &concrete(&path, "no-such", &approval), &gus, body_for(&id).as_ref(), None)
            .await;
        assert_eq!(missing.status, 404, "{id}");
        assert_eq!(
            reply.json["error"]["message"].as_str().map(|m| m.replace("acme-1", "no-such")),
            missing.json["error"]["message"].as_str().map(str::to_string),
            "{id}"
        );
        checked += 1;
    }
    assert!(checked >= 10, "{checked}");
    // Listings show none of acme's threads or approvals to gus; root sees them.
    let threads = served.client.get("/api/threads", &gus).await.json;
    assert_eq!(threads, json!([]));
    let waiting = served.client.get("/api/approvals", &gus).await.json;
    assert_eq!(waiting, json!({ "approvals": [], "interrupts": [] }));
    let threads = served.client.get("/api/threads", &Who::Token("root-token")).await.json;
    assert_eq!(threads[0]["id"], "acme-1");
    assert_eq!(threads[0]["tenant"], "acme");
    // gus may not name a new thread: thread ids are shared by all tenants, and a refusal could
    // tell that acme has one. The answer is the same whether or not another tenant's thread has
    // the id, and says the server names it.
    let threads_before = served.store.scan_threads().unwrap().items.len();
    let named = |thread: &str| json!({ "graph": "refunds", "input": { "amount": 3 }, "thread": thread });
    let taken = served.client.post("/api/threads", &gus, Some(named("acme-1"))).await;
    let free = served.client.post("/api/threads", &gus, Some(named("never-used"))).await;
    assert_eq!(taken.status, 422, "{}", taken.json);
    assert_eq!(taken.json["error"]["code"], "thread_id_not_allowed");
    assert_eq!(taken.json, free.json, "the answer does not depend on another tenant's threads");
    let message = taken.json["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("the server names your new thread") && message.contains("shared by all tenants"),
        "{message}"
    );
    assert_eq!(served.store.scan_threads().unwrap().items.len(), threads_before, "nothing was started");
    assert!(served.store.thread("never-used").unwrap().is_none());
    // gus starts threads of his tenant only (his one tenant by default), never acme's.
    let start = json!({ "graph": "refunds", "input": {}, "tenant": "acme" });
    let reply = served.client.post("/api/threads", &gus, Some(start)).await;
    assert_eq!(reply.status, 403, "{}", reply.json);
    let start = json!({ "graph": "refunds", "input": { "amount": 3 }, "wait": true });
    let reply = served.client.post("/api/threads", &gus, Some(start)).await;
    assert_eq!(reply.status, 200, "{}", reply.json);
    let named = reply.json["thread"].as_str().expect("the answer gives the thread's id");
    assert!(named.starts_with("refunds-"), "{named}");
    assert_eq!(served.store.thread(named).unwrap().unwrap().tenant.as_deref(), Some("globex"));
    // A caller acting for every tenant names threads as before.
    let start = json!({ "graph": "refunds", "input": { "amount": 3 }, "thread": "root-named", "tenant": "globex" });
    let reply = served.client.post("/api/threads", &Who::Token("root-token"), Some(start)).await;
    assert_eq!(reply.status, 202, "{}", reply.json);
    assert_eq!(reply.json["thread"], "root-named");
    served.stop().await;
}
