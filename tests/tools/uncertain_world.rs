//! The outside world of the uncertain-outcome tests: a ledger the tools append to, the tools
//! and graphs that call them, a refund cut off mid-call, and the parent graphs whose child
//! calls them.

use crate::support::stores::open_redb;
use agentflow::approval::{ApprovalDesk, ApprovalStatus, Approver, RoleAuthorizer};
use agentflow::prelude::*;
use agentflow::tool::Risk;
use agentflow::{PendingKind, Run};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

// ---------------------------------------------------------------- the outside world

/// Every call that reached a tool or effect body: (order, idempotency key).
pub static LEDGER: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

pub fn calls(order: &str) -> Vec<String> {
    LEDGER.lock().unwrap().iter().filter(|(o, _)| o == order).map(|(_, k)| k.clone()).collect()
}

/// One notifier per order: the body says "I acted" before it blocks.
pub fn acted(order: &str) -> Arc<Notify> {
    static MAP: Mutex<Option<HashMap<String, Arc<Notify>>>> = Mutex::new(None);
    MAP.lock().unwrap().get_or_insert_with(HashMap::new).entry(order.to_string()).or_default().clone()
}

/// Acts (records the call), then holds the call for `hold_ms`; with
/// `hold_ms` 0 the first call for an order never answers (the run is dropped
/// while it waits) and later ones answer at once.
pub async fn act(order: &str, key: &str, hold_ms: u64) {
    let first = {
        let mut ledger = LEDGER.lock().unwrap();
        let first = !ledger.iter().any(|(o, _)| o == order);
        ledger.push((order.to_string(), key.to_string()));
        first
    };
    acted(order).notify_one();
    if hold_ms == 0 && first {
        std::future::pending::<()>().await;
    }
    tokio::time::sleep(Duration::from_millis(hold_ms)).await;
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct Refund {
    pub order_id: String,
    /// How long the provider takes to answer; 0: never.
    pub hold_ms: u64,
}

/// Refunds an order. Irreversible, and the provider does not deduplicate.
#[tool(risk = irreversible)]
pub async fn refund(args: Refund, cx: &ToolCx) -> Result<Value, ToolError> {
    act(&args.order_id, cx.idempotency_key(), args.hold_ms).await;
    Ok(json!({ "refunded": args.order_id }))
}

/// Opens a ticket; the tracker drops a second request with the same key.
#[tool(risk = external, idempotent)]
pub async fn open_ticket(args: Refund, cx: &ToolCx) -> Result<Value, ToolError> {
    act(&args.order_id, cx.idempotency_key(), args.hold_ms).await;
    Ok(json!({ "ticket": args.order_id }))
}

/// Posts a note to the customer; a second request posts a second note.
#[tool(risk = external)]
pub async fn post_note(args: Refund, cx: &ToolCx) -> Result<Value, ToolError> {
    act(&args.order_id, cx.idempotency_key(), args.hold_ms).await;
    Ok(json!({ "posted": args.order_id }))
}

// ---------------------------------------------------------------- graphs

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Job {
    pub order: String,
    pub hold_ms: u64,
    pub receipt: Option<Value>,
}

pub fn job(order: &str, hold_ms: u64) -> Job {
    Job { order: order.into(), hold_ms, receipt: None }
}

pub fn args(s: &Job) -> Value {
    json!({ "order_id": s.order, "hold_ms": s.hold_ms })
}

#[graph(state = Job, deps = (), start = pay)]
pub mod refund_flow {
    use super::*;

    #[node(goto = [END], tools = [refund])]
    async fn pay(s: &Job, cx: &Ctx<()>) -> Result<Step<Job>, NodeError> {
        let obs = cx.run_tool(refund, args(s)).await?;
        Ok(goto!(END, Job::update().receipt(Some(obs.body))))
    }
}

#[graph(state = Job, deps = (), start = pay)]
pub mod timed_refund_flow {
    use super::*;

    /// A timeout a stall does not reach before the call starts, well short of the call's hold.
    #[node(goto = [END], tools = [refund], timeout = 1s, retry(attempts = 3, base = 1ms, jitter = false))]
    async fn pay(s: &Job, cx: &Ctx<()>) -> Result<Step<Job>, NodeError> {
        let obs = cx.run_tool(refund, args(s)).await?;
        Ok(goto!(END, Job::update().receipt(Some(obs.body))))
    }
}

#[graph(state = Job, deps = (), start = act)]
pub mod external_flow {
    use super::*;

    /// Both tools run without an approval (the policy lets external calls run).
    #[node(goto = [END], tools = [open_ticket, post_note])]
    async fn act(s: &Job, cx: &Ctx<()>) -> Result<Step<Job>, NodeError> {
        let ticket = cx.run_tool(open_ticket, args(s)).await?;
        let note =
            cx.run_tool(post_note, json!({ "order_id": format!("{}-note", s.order), "hold_ms": s.hold_ms })).await?;
        Ok(goto!(END, Job::update().receipt(Some(json!([ticket.body, note.body])))))
    }
}

#[graph(state = Job, deps = (), start = charge)]
pub mod effect_flow {
    use super::*;

    #[node(goto = [END])]
    async fn charge(s: &Job, cx: &Ctx<()>) -> Result<Step<Job>, NodeError> {
        let receipt: Value = cx
            .effect("charge", |key| async move {
                act(&s.order, &key, s.hold_ms).await;
                Ok::<_, NodeError>(json!({ "charged": s.order }))
            })
            .await?;
        Ok(goto!(END, Job::update().receipt(Some(receipt))))
    }
}

#[graph(state = Job, deps = (), start = charge)]
pub mod idempotent_effect_flow {
    use super::*;

    #[node(goto = [END])]
    async fn charge(s: &Job, cx: &Ctx<()>) -> Result<Step<Job>, NodeError> {
        let receipt: Value = cx
            .idempotent_effect("charge", |key| async move {
                act(&s.order, &key, s.hold_ms).await;
                Ok::<_, NodeError>(json!({ "charged": s.order }))
            })
            .await?;
        Ok(goto!(END, Job::update().receipt(Some(receipt))))
    }
}

// ---------------------------------------------------------------- helpers

pub const ROLE: &str = "ops";
pub const OWNER: &str = "agent:billing";

pub fn authorizer() -> RoleAuthorizer {
    RoleAuthorizer::new().role_for(Risk::Irreversible, ROLE).role_for(Risk::External, ROLE)
}

pub fn alice() -> Approver {
    Approver::new("alice", [ROLE])
}

/// A store file of its own; opening it again stands in for a new process.
pub fn db(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("agentflow-uncertain-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("store.redb")
}

pub fn open<S: State, D>(graph: CompiledGraph<S, D>, path: &PathBuf) -> App<S, D> {
    graph.app().store(Arc::new(open_redb(path).expect("open store")))
}

pub fn pending_of<S>(run: &Run<S>) -> (PendingKind, String) {
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("not paused: {:?}", run.outcome) };
    assert_eq!(pending.len(), 1, "{pending:?}");
    (pending[0].kind, pending[0].payload["approval"].as_str().expect("a record id").to_string())
}

/// Runs `start` until the body acted, then drops the run mid-call: what a
/// crash right after the provider answered, before the journal heard, leaves.
pub async fn cut_off<F: std::future::Future>(order: &str, start: F) {
    let notify = acted(order);
    tokio::select! {
        _ = start => panic!("the run ended before its call acted"),
        () = notify.notified() => {}
    }
}

/// Starts the refund, approves it, and returns the desk.
pub async fn approved_refund<D: Sync>(graph: &App<Job, D>, deps: &D, thread: &str, hold_ms: u64) -> ApprovalDesk {
    let desk = graph.approvals(authorizer()).unwrap();
    let run = graph.runner(deps).thread(thread).owner(OWNER).run(job(thread, hold_ms)).await.unwrap();
    let (kind, id) = pending_of(&run);
    assert_eq!(kind, PendingKind::Approval);
    desk.approve(&id, &alice()).unwrap();
    desk
}
// ---------------------------------------------------------------- cut off mid-call

/// Approves a refund that never answers, drops the run once the provider
/// acted, and reopens the store ("the next process"): the resume pauses as
/// an unknown outcome instead of refunding again.
pub async fn cut_off_refund(thread: &str) -> (PathBuf, String) {
    let path = db(thread);
    {
        let graph = open(refund_flow::graph(), &path);
        approved_refund(&graph, &(), thread, 0).await;
        cut_off(thread, graph.runner(&()).thread(thread).resume()).await;
    }
    let graph = open(refund_flow::graph(), &path);
    let run = graph.runner(&()).thread(thread).resume().await.unwrap();
    let (kind, id) = pending_of(&run);
    assert_eq!(kind, PendingKind::OutcomeUnknown);
    assert_eq!(calls(thread).len(), 1, "not refunded again");
    let desk = graph.approvals(authorizer()).unwrap();
    let record = desk.get(&id).unwrap().unwrap();
    assert_eq!((record.status, record.tool.as_str()), (ApprovalStatus::OutcomeUnknown, "refund"));
    assert!(desk.pending().unwrap().iter().any(|r| r.id == id), "listed for a human");
    assert_eq!(graph.pending(thread).unwrap()[0].kind, PendingKind::OutcomeUnknown);
    // Resuming again before anyone decided pauses again; still one refund.
    let again = graph.runner(&()).thread(thread).resume().await.unwrap();
    assert_eq!(pending_of(&again), (PendingKind::OutcomeUnknown, id.clone()));
    assert_eq!(calls(thread).len(), 1);
    (path, id)
}

/// The thread's audit entries that report an unknown outcome of a call the
/// re-run step did not make again.
pub fn unknown_entries(log: &[agentflow::persist::AuditEntry]) -> Vec<&agentflow::persist::AuditEntry> {
    log.iter().filter(|e| e.kind == "effect.outcome_unknown").collect()
}
// ---------------------------------------------------------------- cut off in a subgraph child the parent no longer calls

/// Orders whose parent node is told to decide otherwise on its next run.
pub static DECLINED: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// The parent's "model": it calls its child the first time; when the node runs again after
/// the child's provider saw a call, or once told to, it answers another way.
pub fn calls_the_child(s: &Job) -> bool {
    calls(&s.order).is_empty() && !DECLINED.lock().unwrap().contains(&s.order)
}

#[graph(state = Job, deps = (), start = settle)]
pub mod parent_of_effect_flow {
    use super::*;

    #[node(goto = [END], subgraphs = [effect_flow])]
    async fn settle(s: &Job, cx: &Ctx<()>) -> Result<Step<Job>, NodeError> {
        if !calls_the_child(s) {
            return Ok(goto!(END, Job::update().receipt(Some(json!("settled without the child")))));
        }
        let done = cx.subgraph(effect_flow::graph(), s.clone()).await?;
        Ok(goto!(END, Job::update().receipt(done.receipt)))
    }
}

#[graph(state = Job, deps = (), start = settle)]
pub mod parent_of_refund_flow {
    use super::*;

    #[node(goto = [END], subgraphs = [refund_flow])]
    async fn settle(s: &Job, cx: &Ctx<()>) -> Result<Step<Job>, NodeError> {
        if !calls_the_child(s) {
            return Ok(goto!(END, Job::update().receipt(Some(json!("settled without the child")))));
        }
        let done = cx.subgraph(refund_flow::graph(), s.clone()).await?;
        Ok(goto!(END, Job::update().receipt(done.receipt)))
    }
}

/// Stores whose thread (of the same name as its order) another executor takes over while the
/// parent node runs again: the stalled run, seen from the other side.
pub static STOLEN: Mutex<Vec<(String, Arc<dyn agentflow::Store>)>> = Mutex::new(Vec::new());

#[graph(state = Job, deps = (), start = settle)]
pub mod stolen_parent_of_effect_flow {
    use super::*;

    #[node(goto = [END], subgraphs = [effect_flow])]
    async fn settle(s: &Job, cx: &Ctx<()>) -> Result<Step<Job>, NodeError> {
        if !calls_the_child(s) {
            let stolen = STOLEN.lock().unwrap().iter().find(|(t, _)| *t == s.order).map(|(_, st)| Arc::clone(st));
            if let Some(store) = stolen {
                let later = agentflow::timer::now_ms() + 3_600_000;
                store
                    .acquire_lease(&s.order, "thief", 3_600_000, later)
                    .map_err(|e| NodeError::fatal(e.to_string()))?;
            }
            return Ok(goto!(END, Job::update().receipt(Some(json!("settled without the child")))));
        }
        let done = cx.subgraph(effect_flow::graph(), s.clone()).await?;
        Ok(goto!(END, Job::update().receipt(done.receipt)))
    }
}

/// The records waiting for a human in the subgraph children of `thread` (ids under `thread/`).
pub fn children_pending(desk: &ApprovalDesk, thread: &str) -> Vec<agentflow::approval::ApprovalRecord> {
    desk.pending().unwrap().into_iter().filter(|r| r.thread.starts_with(&format!("{thread}/"))).collect()
}
