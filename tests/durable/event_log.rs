//! A thread's event log as a run writes it (`App::event_log`): a tool call held for approval, a
//! question asked of a person, and the three runs it takes to finish, read back from a sealed
//! redb store with `read_events`, kind by kind, in commit order. A credential field is never
//! logged. With the log off, nothing is.

use crate::support::stores::open_redb;
use crate::support::temp::temp_dir;

use std::sync::Arc;

use agentflow::approval::{Approver, RoleAuthorizer};
use agentflow::prelude::*;
use agentflow::sealed::{Kek, RedbKeyStore, SealedStore, StaticKeyProvider};
use agentflow::tool::Risk;
use agentflow::{PendingKind, Run, Store};
use agentflow_store::{EventId, StoredEvent};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Shaped like an OpenAI key; made up.
const API_KEY: &str = "sk-proj-Lw2Vn9Rb5Yc3Hd6Jf0Gs1Ae7KQ7vN1cB8zR5kW3yH6jD0sA2eG9u";
const OWNER: &str = "agent:shop";
const ROLE: &str = "refunds";

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
pub struct Order {
    order: String,
    #[state(credential)]
    api_key: String,
    receipt: Option<Value>,
    verdict: Option<String>,
    #[reduce(append)]
    trail: Vec<String>,
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct Refund {
    order_id: String,
    amount: u32,
}

/// Refunds `amount` on an order. Irreversible.
#[tool(risk = irreversible)]
async fn refund(args: Refund) -> Result<Value, ToolError> {
    Ok(json!({ "refunded": args.amount, "order_id": args.order_id }))
}

#[graph(state = Order, start = prepare)]
mod refund_desk {
    use super::*;

    #[node(goto = [pay])]
    async fn prepare(_s: &Order) -> Step<Order> {
        goto!(pay, Order::update().api_key(API_KEY.to_string()).trail(vec!["prepare".into()]))
    }

    #[node(goto = [review], tools = [refund])]
    async fn pay(s: &Order, cx: &Ctx<()>) -> Result<Step<Order>, NodeError> {
        let obs = cx.run_tool(refund, json!({ "order_id": s.order, "amount": 40 })).await?;
        Ok(goto!(review, Order::update().receipt(Some(obs.body)).trail(vec!["pay".into()])))
    }

    #[node(goto = [END], interrupt)]
    async fn review(s: &Order, cx: &Ctx<()>) -> Result<Step<Order>, NodeError> {
        let verdict: String = cx.interrupt(json!({ "question": format!("ship order {}?", s.order) }))?;
        Ok(goto!(END, Order::update().verdict(Some(verdict)).trail(vec!["review".into()])))
    }
}

/// A redb file sealed with a fixed key: a credential field may be stored (sealed).
fn sealed_store(name: &str) -> Arc<dyn Store> {
    let dir = temp_dir(name);
    let keys = Arc::new(RedbKeyStore::open(dir.join("keys.redb")).unwrap());
    let provider = StaticKeyProvider::new(Kek::new([0x5a; 32]), vec![]);
    Arc::new(SealedStore::new(open_redb(dir.join("store.redb")).unwrap(), keys, provider))
}

fn input() -> Order {
    Order { order: "A-7".into(), ..Order::default() }
}

fn waits(run: &Run<Order>) -> Vec<agentflow::Pending> {
    match &run.outcome {
        Outcome::Interrupted { pending, .. } => pending.clone(),
        other => panic!("not waiting: {other:?}"),
    }
}

/// Every event of the thread's log, read a few at a time (a reader's pages).
fn read_all(store: &dyn Store, thread: &str) -> Vec<StoredEvent> {
    let mut events: Vec<StoredEvent> = Vec::new();
    loop {
        let page = store.read_events(thread, events.last().map(|e| e.id), 3).unwrap();
        if page.events.is_empty() {
            return events;
        }
        assert!(page.events.len() <= 3);
        events.extend(page.events);
    }
}

fn data(event: &StoredEvent) -> Value {
    serde_json::from_slice(&event.data).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_runs_through_an_approval_and_a_question_log_what_each_commit_did() {
    let store = sealed_store("event-log");
    let app = refund_desk::graph().app().store(Arc::clone(&store)).event_log(true);
    let desk = app.approvals(RoleAuthorizer::new().role_for(Risk::Irreversible, ROLE)).unwrap();

    // Run 1: `prepare`, then `pay` waits for the refund's approval.
    let first = app.runner(&()).thread("t").owner(OWNER).run(input()).await.unwrap();
    let asked = waits(&first);
    assert_eq!(asked[0].kind, PendingKind::Approval);
    let approval = asked[0].payload["approval"].as_str().unwrap().to_string();
    desk.approve(&approval, &Approver::new("alice", [ROLE])).unwrap();

    // Run 2: the approved refund runs, then `review` asks its question.
    let second = app.runner(&()).thread("t").resume().await.unwrap();
    let question = waits(&second);
    assert_eq!(question[0].kind, PendingKind::Interrupt);

    // Run 3: answered, the run completes.
    let third = app.runner(&()).thread("t").resume_with("ship it").await.unwrap();
    assert_eq!(third.outcome, Outcome::Completed);
    assert_eq!(third.state.verdict.as_deref(), Some("ship it"));

    let events = read_all(store.as_ref(), "t");
    let listed: Vec<(u64, u32, &str)> = events.iter().map(|e| (e.id.seq, e.id.idx, e.kind.as_str())).collect();
    assert_eq!(
        listed,
        [
            (1, 0, "run.started"),
            (2, 0, "step"),
            (3, 0, "interrupt"),
            (3, 1, "run.finished"),
            (4, 0, "run.started"),
            (4, 1, "step"),
            (5, 0, "interrupt"),
            (5, 1, "run.finished"),
            (6, 0, "run.started"),
            (6, 1, "step"),
            (6, 2, "run.finished"),
        ]
    );
    let d: Vec<Value> = events.iter().map(data).collect();
    // Each run has its own id, on each of its events.
    let runs: Vec<&str> = [0, 4, 8].iter().map(|&i| d[i]["run"].as_str().unwrap()).collect();
    assert!(runs[0] != runs[1] && runs[1] != runs[2] && runs[0] != runs[2], "{runs:?}");
    for (i, event) in d.iter().enumerate() {
        let run = match i {
            0..=3 => runs[0],
            4..=7 => runs[1],
            _ => runs[2],
        };
        assert_eq!(event["run"], run, "event {i}: {event}");
    }
    let graph = app.graph().name();
    // Each run names the checkpoint it starts from: the input, then where the run before parked.
    assert_eq!(d[0], json!({ "run": runs[0], "graph": graph, "resumed": false, "checkpoint": 0 }));
    assert_eq!(d[4], json!({ "run": runs[1], "graph": graph, "resumed": true, "checkpoint": 1 }));
    assert_eq!(d[8], json!({ "run": runs[2], "graph": graph, "resumed": true, "checkpoint": 2 }));

    // The steps: the checkpoints they committed, and each node's update (the key left out).
    let checkpoints: Vec<u64> = store.list_checkpoints("t").unwrap().iter().map(|c| c.seq).collect();
    assert_eq!(checkpoints, [0, 1, 2, 3]);
    assert_eq!(
        d[1],
        json!({
            "run": runs[0], "step": 1, "checkpoint": 1, "nodes": ["prepare"],
            "updates": [{ "node": "prepare", "instance": null, "update": { "trail": ["prepare"] } }],
        })
    );
    assert_eq!(
        d[5],
        json!({
            "run": runs[1], "step": 2, "checkpoint": 2, "nodes": ["pay"],
            "updates": [{ "node": "pay", "instance": null, "update": {
                "receipt": { "ok": true, "result": { "refunded": 40, "order_id": "A-7" } },
                "trail": ["pay"],
            }}],
        })
    );
    assert_eq!(
        d[9],
        json!({
            "run": runs[2], "step": 3, "checkpoint": 3, "nodes": ["review"],
            "updates": [{ "node": "review", "instance": null, "update": {
                "verdict": "ship it", "trail": ["review"],
            }}],
        })
    );

    // What each of the first two runs waits for, then how it ended.
    assert_eq!(
        d[2],
        json!({
            "run": runs[0], "questions": [],
            "approvals": [{ "id": approval, "tool": "refund", "node": "pay", "instance": null, "kind": "approval" }],
        })
    );
    assert_eq!(
        d[6],
        json!({
            "run": runs[1], "approvals": [],
            "questions": [{
                "id": question[0].question_id(), "node": "review", "instance": null, "kind": "interrupt",
                "question": { "question": "ship order A-7?" },
            }],
        })
    );
    let record = store.thread("t").unwrap().unwrap();
    for (i, status) in [(3, "interrupted"), (7, "interrupted"), (10, "completed")] {
        assert_eq!(d[i]["status"], status, "{}", d[i]);
        assert!(!d[i]["detail"].as_str().unwrap().is_empty(), "{}", d[i]);
    }
    assert_eq!(d[10]["detail"], record.detail);

    // The credential field reached no event, under no name.
    for event in &events {
        let text = String::from_utf8_lossy(&event.data);
        assert!(!text.contains("sk-proj-") && !text.contains("api_key"), "{}: {text}", event.id);
    }
    // Reading after an id gives what follows it; the page says which events the log keeps.
    let page = store.read_events("t", Some(EventId::new(5, 1)), 100).unwrap();
    let after: Vec<EventId> = page.events.iter().map(|e| e.id).collect();
    assert_eq!(after, [EventId::new(6, 0), EventId::new(6, 1), EventId::new(6, 2)]);
    assert_eq!((page.oldest, page.newest), (Some(EventId::new(1, 0)), Some(EventId::new(6, 2))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_without_the_event_log_writes_none() {
    let store = sealed_store("event-log-off");
    let app = refund_desk::graph().app().store(Arc::clone(&store));
    let desk = app.approvals(RoleAuthorizer::new().role_for(Risk::Irreversible, ROLE)).unwrap();
    let first = app.runner(&()).thread("quiet").owner(OWNER).run(input()).await.unwrap();
    let approval = waits(&first)[0].payload["approval"].as_str().unwrap().to_string();
    desk.approve(&approval, &Approver::new("alice", [ROLE])).unwrap();
    app.runner(&()).thread("quiet").resume().await.unwrap();
    let done = app.runner(&()).thread("quiet").resume_with("ship it").await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    let page = store.read_events("quiet", None, 100).unwrap();
    assert!(page.events.is_empty() && page.oldest.is_none() && page.newest.is_none(), "{page:?}");
}
