//! Promise (`App::fork` docs, agentflow/src/app/threads.rs): "every
//! approval of the thread still `PENDING` or `APPROVED` is cancelled in the
//! same commit, each with an `approval.cancelled` audit entry by `actor`
//! saying why; those of its subgraph children are cancelled just after, the
//! same way." (README: "`fork` runs the branch afresh and cancels the
//! thread's open approvals".)
//!
//! Existing tests fork over a `PENDING` approval of the thread itself, and
//! check only the status of a child's `APPROVED` one. Here the approval is
//! `APPROVED` (decided, not yet used) when the thread is forked.
//!
//! If the promise were false: the record would still read `APPROVED` after
//! the fork, no `approval.cancelled` entry would name it, and the branch's
//! resume could run the refund on the old decision (the ledger would hold it).

use std::sync::Arc;
use std::sync::Mutex;

use agentflow::approval::{ApprovalStatus, Approver, RoleAuthorizer};
use agentflow::prelude::*;
use agentflow::tool::Risk;
use agentflow::{PendingKind, RedbStore, Run, Store};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Every refund that ran: (order, amount).
static LEDGER: Mutex<Vec<(String, u32)>> = Mutex::new(Vec::new());

fn refunds_for(order: &str) -> Vec<u32> {
    LEDGER.lock().unwrap().iter().filter(|(o, _)| o == order).map(|(_, a)| *a).collect()
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct Refund {
    order_id: String,
    amount: u32,
}

/// Refunds an order. Irreversible: needs an approval.
#[tool(risk = irreversible)]
async fn refund(args: Refund) -> Result<Value, ToolError> {
    LEDGER.lock().unwrap().push((args.order_id.clone(), args.amount));
    Ok(json!({ "refunded": args.amount }))
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Pay {
    order: String,
    amount: u32,
    #[reduce(append)]
    trail: Vec<String>,
    receipt: Option<Value>,
}

#[graph(state = Pay, deps = (), start = check)]
pub mod pay_flow {
    use super::*;

    #[node(goto = [pay])]
    async fn check(_s: &Pay) -> Step<Pay> {
        goto!(pay, Pay::update().trail(vec!["checked".into()]))
    }

    #[node(goto = [END], tools = [refund])]
    async fn pay(s: &Pay, cx: &Ctx<()>) -> Result<Step<Pay>, NodeError> {
        let obs = cx.run_tool(refund, json!({ "order_id": s.order, "amount": s.amount })).await?;
        Ok(goto!(END, Pay::update().receipt(Some(obs.body)).trail(vec!["paid".into()])))
    }
}

const OWNER: &str = "agent:refunds";

fn alice() -> Approver {
    Approver::new("alice", ["payments"])
}

fn waiting_for<S>(run: &Run<S>) -> String {
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("not paused: {}", run.outcome) };
    assert_eq!(pending[0].kind, PendingKind::Approval, "{pending:?}");
    pending[0].payload["approval"].as_str().expect("an approval id").to_string()
}

#[tokio::test]
async fn fork_cancels_an_approved_but_unused_approval_with_an_audit_entry() {
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = pay_flow::graph().app().store(Arc::clone(&store));
    let desk = app.approvals(RoleAuthorizer::new().role_for(Risk::Irreversible, "payments")).unwrap();
    let pay = Pay { order: "F-1".into(), amount: 70, ..Pay::default() };
    let paused = app.runner(&()).thread("F-1").owner(OWNER).run(pay).await.unwrap();
    let old = waiting_for(&paused);
    assert_eq!(desk.approve(&old, &alice()).unwrap().status, ApprovalStatus::Approved);

    // Branch back to the checkpoint after `check` (the one the paused step started from),
    // before the approved call was used.
    let history = app.history("F-1").unwrap();
    let after_check = history.iter().find(|c| c.cursor == ["pay"]).expect("the checkpoint after `check`").seq;
    app.fork("F-1", after_check, "operator").unwrap();

    let record = desk.get(&old).unwrap().unwrap();
    assert_eq!(record.status, ApprovalStatus::Cancelled, "an APPROVED record survived the fork: {record:?}");
    let cancelled: Vec<_> = app
        .audit_log("F-1")
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == "approval.cancelled" && e.detail.get("approval") == Some(&json!(old)))
        .collect();
    assert_eq!(cancelled.len(), 1, "one approval.cancelled entry for the approved record");
    assert_eq!(cancelled[0].actor, "operator");

    // The new branch does not run the refund on the old decision: it asks anew.
    let again = app.runner(&()).thread("F-1").resume().await.unwrap();
    assert!(refunds_for("F-1").is_empty(), "the old branch's approval ran the refund: {}", again.outcome);
    let fresh = waiting_for(&again);
    assert_ne!(fresh, old);
    assert_eq!(desk.get(&old).unwrap().unwrap().status, ApprovalStatus::Cancelled);
    // And the cancelled one cannot be decided again.
    assert!(desk.approve(&old, &alice()).is_err());

    desk.approve(&fresh, &alice()).unwrap();
    let done = app.runner(&()).thread("F-1").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(refunds_for("F-1"), vec![70]);
}

// ------------------------------------------------ the same, one level down

use crate::support::refund_subgraph;
use refund_subgraph::{Case, Counts, support};

/// The child's APPROVED approval is cancelled too, with an audit entry in the child's log.
#[tokio::test]
async fn fork_cancels_a_childs_approved_approval_with_an_audit_entry_in_the_childs_log() {
    use std::sync::atomic::Ordering;
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = support::graph().app().store(Arc::clone(&store));
    let desk = app.approvals(RoleAuthorizer::new().role_for(Risk::Irreversible, "payments")).unwrap();
    let counts = Counts::default();
    let run = app.runner(&counts).thread("c").owner(OWNER).run(Case { amount: 40, outcome: None }).await.unwrap();
    let old = waiting_for(&run);
    desk.approve(&old, &alice()).unwrap();
    let child = store.approval(&old).unwrap().unwrap().thread;
    assert!(child.starts_with("c/"), "asked in the child's thread: {child}");

    let first = app.history("c").unwrap().iter().map(|c| c.seq).min().unwrap();
    app.fork("c", first, "operator").unwrap();
    assert_eq!(store.approval(&old).unwrap().unwrap().status, ApprovalStatus::Cancelled);
    let log = store.list_audit(&child).unwrap();
    let cancelled: Vec<_> = log
        .iter()
        .filter(|e| e.kind == "approval.cancelled" && e.detail.get("approval") == Some(&json!(old)))
        .collect();
    assert_eq!(cancelled.len(), 1, "{log:?}");
    assert_eq!(cancelled[0].actor, "operator");

    let again = app.runner(&counts).thread("c").resume().await.unwrap();
    assert_eq!(counts.refunds.load(Ordering::SeqCst), 0, "{}", again.outcome);
    assert_ne!(waiting_for(&again), old);
}
