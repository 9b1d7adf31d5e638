//! Compaction keeps the effect journal of a thread that can still resume.
//!
//! `update_state` appends a checkpoint whose step is journaled under the seq
//! of the checkpoint it was made on. A `failed` (or `cancelled`, or
//! `budget_exhausted`) thread can be resumed, and its next run looks up the
//! journal under that older seq: compacting the thread down to its last
//! checkpoint must not drop the journal, or an approved irreversible call (or
//! a `cx.effect`) runs a second time. On redb, and on PostgreSQL when
//! `AGENTFLOW_PG_URL` is set.

use crate::support::pg;

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use agentflow::approval::{ApprovalStatus, Approver, RoleAuthorizer};
use agentflow::persist::ThreadStatus;
use agentflow::prelude::*;
use agentflow::tool::Risk;
use agentflow::{PendingKind, RedbStore, Run, Store};
use agentflow_store::PostgresStore;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

// ---------------------------------------------------------------- an approved irreversible call

/// Every refund that ran: (order, amount).
static LEDGER: Mutex<Vec<(String, u32)>> = Mutex::new(Vec::new());

fn refunds_for(order: &str) -> Vec<u32> {
    LEDGER.lock().unwrap().iter().filter(|(o, _)| o == order).map(|(_, a)| *a).collect()
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct Refund {
    order_id: String,
    /// Whole currency units.
    amount: u32,
}

/// Refunds `amount` on an order. Irreversible.
#[tool(risk = irreversible)]
async fn process_refund(args: Refund) -> Result<Value, ToolError> {
    LEDGER.lock().unwrap().push((args.order_id.clone(), args.amount));
    Ok(json!({ "refunded": args.amount, "order_id": args.order_id }))
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Pay {
    order: String,
    amount: u32,
    note: Option<String>,
    receipt: Option<Value>,
}

#[derive(Default)]
pub struct PayDeps {
    /// Fail this many times after the refund returned (a crash after the effect).
    fail_after: AtomicU32,
}

#[graph(state = Pay, deps = PayDeps, start = pay)]
mod pay_flow {
    use super::*;

    #[node(goto = [END], tools = [process_refund])]
    async fn pay(s: &Pay, cx: &Ctx<PayDeps>) -> Result<Step<Pay>, NodeError> {
        let obs = cx.run_tool(process_refund, json!({ "order_id": s.order, "amount": s.amount })).await?;
        let deps = cx.deps();
        if deps.fail_after.load(Ordering::SeqCst) > 0 {
            deps.fail_after.fetch_sub(1, Ordering::SeqCst);
            return Err(NodeError::fatal("crashed after the refund"));
        }
        Ok(goto!(END, Pay::update().receipt(Some(obs.body))))
    }
}

const ROLE: &str = "refund-approver";

fn authorizer() -> RoleAuthorizer {
    RoleAuthorizer::new().role_for(Risk::Irreversible, ROLE)
}

fn alice() -> Approver {
    Approver::new("alice", [ROLE])
}

fn waiting_for<S>(run: &Run<S>) -> String {
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("not paused: {:?}", run.outcome) };
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(pending[0].kind, PendingKind::Approval);
    pending[0].payload["approval"].as_str().expect("an approval id").to_string()
}

/// Pause for the approval, `update_state`, approve, resume (the refund runs,
/// then the node fails), compact down to one checkpoint, resume again.
async fn approved_call_after_compaction(store: Arc<dyn Store>, order: &str) {
    let graph = pay_flow::graph().app().store(Arc::clone(&store));
    let desk = graph.approvals(authorizer()).unwrap();
    let deps = PayDeps { fail_after: AtomicU32::new(1) };
    let input = Pay { order: order.into(), amount: 40, ..Pay::default() };
    let run = graph.runner(&deps).thread(order).owner("agent:bot").run(input).await.unwrap();
    let id = waiting_for(&run);
    // An operator's edit while the call waits: a new head checkpoint, whose
    // step keeps the journal of the checkpoint it was made on.
    graph.update_state(order, Pay::update().note(Some("customer called".into())), "operator").unwrap();
    desk.approve(&id, &alice()).unwrap();

    let failed = graph.runner(&deps).thread(order).resume().await.unwrap();
    assert!(matches!(&failed.outcome, Outcome::Failed { node, .. } if node == "pay"), "{:?}", failed.outcome);
    assert_eq!(refunds_for(order), vec![40]);
    assert_eq!(desk.get(&id).unwrap().unwrap().status, ApprovalStatus::Succeeded);
    assert_eq!(store.thread(order).unwrap().unwrap().status, ThreadStatus::Failed);

    let before = graph.history(order).unwrap();
    let report = graph.compact(order, 1).unwrap();
    assert_eq!(report.dropped, before.len() - 1, "{before:?}");

    // The node runs again from its start: the journal answers the call.
    let done = graph.runner(&deps).thread(order).resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(refunds_for(order), vec![40], "the approved refund ran exactly once");
    assert_eq!(done.state.receipt.unwrap()["result"]["refunded"], 40);
    assert_eq!(done.state.note.as_deref(), Some("customer called"));
}

#[tokio::test]
async fn an_approved_call_of_a_failed_thread_runs_once_after_compaction() {
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    approved_call_after_compaction(store, "C-1").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_call_of_a_failed_thread_runs_once_after_compaction_on_postgres() {
    let Some(store) = postgres("call") else { return };
    approved_call_after_compaction(store, "C-1-pg").await;
}

// ---------------------------------------------------------------- a plain `cx.effect`

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Job {
    note: Option<String>,
    receipt: Option<String>,
}

#[derive(Default)]
pub struct ChargeDeps {
    charges: AtomicU32,
    /// Fail this many times after the charge returned.
    fail_after: AtomicU32,
}

#[graph(state = Job, deps = ChargeDeps, start = charge)]
mod charge_flow {
    use super::*;

    /// Asks for a go-ahead, then charges the card.
    #[node(goto = [END], interrupt)]
    async fn charge(_s: &Job, cx: &Ctx<ChargeDeps>) -> Result<Step<Job>, NodeError> {
        let go: bool = cx.interrupt(json!({ "charge": "card" }))?;
        if !go {
            return Ok(goto!(END, Job::update()));
        }
        let receipt = cx
            .effect("charge-card", |key| async move {
                let n = cx.deps().charges.fetch_add(1, Ordering::SeqCst) + 1;
                Ok::<_, NodeError>(format!("charge #{n} ({key})"))
            })
            .await?;
        let deps = cx.deps();
        if deps.fail_after.load(Ordering::SeqCst) > 0 {
            deps.fail_after.fetch_sub(1, Ordering::SeqCst);
            return Err(NodeError::fatal("crashed after charging"));
        }
        Ok(goto!(END, Job::update().receipt(Some(receipt))))
    }
}

/// Pause for the go-ahead, `update_state`, resume with it (the effect runs,
/// then the node fails), compact down to one checkpoint, resume again.
async fn effect_after_compaction(store: Arc<dyn Store>) {
    let graph = charge_flow::graph().app().store(Arc::clone(&store));
    let deps = ChargeDeps { fail_after: AtomicU32::new(1), ..ChargeDeps::default() };
    let run = graph.runner(&deps).thread("fx").run(Job::default()).await.unwrap();
    assert!(matches!(&run.outcome, Outcome::Interrupted { .. }), "{:?}", run.outcome);
    graph.update_state("fx", Job::update().note(Some("charge the new card".into())), "operator").unwrap();
    let failed = graph.runner(&deps).thread("fx").resume_with(true).await.unwrap();
    assert!(matches!(&failed.outcome, Outcome::Failed { node, .. } if node == "charge"), "{:?}", failed.outcome);
    assert_eq!(deps.charges.load(Ordering::SeqCst), 1);
    assert_eq!(store.thread("fx").unwrap().unwrap().status, ThreadStatus::Failed);

    let before = graph.history("fx").unwrap();
    let report = graph.compact("fx", 1).unwrap();
    assert_eq!(report.dropped, before.len() - 1, "{before:?}");

    // The failed step's answer was spent: the node asks again, and runs from
    // its start; the journal answers the effect.
    let done = graph.runner(&deps).thread("fx").resume_with(true).await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(deps.charges.load(Ordering::SeqCst), 1, "the effect ran exactly once");
    assert!(done.state.receipt.as_deref().is_some_and(|r| r.starts_with("charge #1 ")), "{:?}", done.state);
    assert_eq!(done.state.note.as_deref(), Some("charge the new card"));
}

#[tokio::test]
async fn an_effect_of_a_failed_thread_runs_once_after_compaction() {
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    effect_after_compaction(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_effect_of_a_failed_thread_runs_once_after_compaction_on_postgres() {
    let Some(store) = postgres("effect") else { return };
    effect_after_compaction(store).await;
}

// ---------------------------------------------------------------- PostgreSQL

/// A store on a fresh schema of the server at `AGENTFLOW_PG_URL`, or `None`
/// (the test is skipped) when it is unset.
fn postgres(tag: &str) -> Option<Arc<dyn Store>> {
    static N: AtomicU64 = AtomicU64::new(0);
    let url = pg::pg_url()?;
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let schema = format!("journal_{tag}_{}_{}_{nanos}", std::process::id(), N.fetch_add(1, Ordering::Relaxed));
    let store = PostgresStore::builder().schema(schema).open(&url).expect("open the PostgreSQL store");
    Some(Arc::new(store))
}
