//! `update_state` on a thread paused mid-step keeps the step (its finished
//! writes, what it waits for, its effect journal and approvals); `fork`
//! cancels the approvals it leaves behind; the graph fingerprint covers the
//! tool sets and their risk classes.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use agentflow::approval::{ApprovalStatus, Approver, RoleAuthorizer};
use agentflow::persist::ResumeError;
use agentflow::prelude::*;
use agentflow::tool::Risk;
use agentflow::{PendingKind, Run, RunError};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::support::stores::store;

// ------------------------------------------------ a step paused in `interrupt`

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Order {
    #[reduce(append)]
    log: Vec<String>,
    note: Option<String>,
}

#[derive(Default)]
pub struct Deps {
    charges: AtomicU32,
    packs: AtomicU32,
}

#[graph(state = Order, deps = Deps, start = split, max_steps = 10)]
mod checkout {
    use super::*;

    #[node(goto = [pack, confirm])]
    async fn split(_s: &Order) -> Step<Order> {
        goto!([pack, confirm], Order::update().log(vec!["split".into()]))
    }

    /// Finishes in the step in which `confirm` pauses.
    #[node(goto = [END])]
    async fn pack(_s: &Order, deps: &Deps) -> Step<Order> {
        deps.packs.fetch_add(1, Ordering::SeqCst);
        goto!(END, Order::update().log(vec!["packed".into()]))
    }

    /// Charges the card (journaled), then asks a human to confirm.
    #[node(goto = [END], interrupt)]
    async fn confirm(s: &Order, cx: &Ctx<Deps>) -> Result<Step<Order>, NodeError> {
        let receipt = cx
            .effect("charge-card", |_| async move {
                cx.deps().charges.fetch_add(1, Ordering::SeqCst);
                Ok::<_, NodeError>("receipt-1".to_string())
            })
            .await?;
        let answer: String = cx.interrupt(json!({ "receipt": receipt }))?;
        let note = s.note.clone().unwrap_or_default();
        Ok(goto!(END, Order::update().log(vec![format!("{answer} ({note})")])))
    }
}

#[tokio::test]
async fn update_state_on_a_thread_paused_in_interrupt_keeps_the_step() {
    let graph = checkout::graph().app().store(store());
    let deps = Deps::default();
    let paused = graph.runner(&deps).thread("o-1").run(Order::default()).await.unwrap();
    assert!(matches!(paused.outcome, Outcome::Interrupted { .. }), "{:?}", paused.outcome);
    assert_eq!((deps.charges.load(Ordering::SeqCst), deps.packs.load(Ordering::SeqCst)), (1, 1));

    graph.update_state("o-1", Order::update().note(Some("gift wrap".into())), "operator").unwrap();
    // Still waiting for the human: the interrupt came along.
    let pending = graph.pending("o-1").unwrap();
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!((pending[0].node.as_str(), pending[0].kind), ("confirm", PendingKind::Interrupt));
    let err = graph.runner(&deps).thread("o-1").resume().await.unwrap_err();
    assert!(matches!(err, RunError::ValueRequired { ref node, .. } if node == "confirm"), "{err}");

    let done = graph.runner(&deps).thread("o-1").resume_with("yes").await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    // The card was charged once, `pack` ran once, and `confirm` saw the update.
    assert_eq!(deps.charges.load(Ordering::SeqCst), 1, "charged twice");
    assert_eq!(deps.packs.load(Ordering::SeqCst), 1);
    assert_eq!(done.state.log, vec!["split", "packed", "yes (gift wrap)"]);
}

#[tokio::test]
async fn two_updates_in_a_row_still_keep_the_paused_step() {
    let graph = checkout::graph().app().store(store());
    let deps = Deps::default();
    graph.runner(&deps).thread("o-2").run(Order::default()).await.unwrap();
    graph.update_state("o-2", Order::update().note(Some("a".into())), "operator").unwrap();
    graph.update_state("o-2", Order::update().note(Some("b".into())), "operator").unwrap();
    let done = graph.runner(&deps).thread("o-2").resume_with("ok").await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(deps.charges.load(Ordering::SeqCst), 1);
    assert_eq!(done.state.log, vec!["split", "packed", "ok (b)"]);
}

// ------------------------------------------------ a step paused for approval

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

/// The refund tool, irreversible.
mod v1 {
    use super::*;

    /// Refunds an order.
    #[tool(risk = irreversible)]
    pub async fn refund(args: Refund) -> Result<Value, ToolError> {
        LEDGER.lock().unwrap().push((args.order_id.clone(), args.amount));
        Ok(json!({ "refunded": args.amount }))
    }
}

/// The same tool under the same name, declared as merely reversible.
mod v2 {
    use super::*;

    /// Refunds an order.
    #[tool(risk = reversible)]
    pub async fn refund(args: Refund) -> Result<Value, ToolError> {
        LEDGER.lock().unwrap().push((args.order_id.clone(), args.amount));
        Ok(json!({ "refunded": args.amount }))
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Pay {
    order: String,
    amount: u32,
    note: Option<String>,
    receipt: Option<Value>,
}

#[graph(state = Pay, deps = (), start = pay)]
mod pay_flow {
    use super::v1::refund;
    use super::*;

    #[node(goto = [END], tools = [refund])]
    async fn pay(s: &Pay, cx: &Ctx<()>) -> Result<Step<Pay>, NodeError> {
        let obs = cx.run_tool(refund, json!({ "order_id": s.order, "amount": s.amount })).await?;
        Ok(goto!(END, Pay::update().receipt(Some(obs.body))))
    }
}

/// The same graph, but its tool now has a lower risk class.
#[graph(state = Pay, deps = (), start = pay)]
mod soft_pay_flow {
    use super::v2::refund;
    use super::*;

    #[node(goto = [END], tools = [refund])]
    async fn pay(s: &Pay, cx: &Ctx<()>) -> Result<Step<Pay>, NodeError> {
        let obs = cx.run_tool(refund, json!({ "order_id": s.order, "amount": s.amount })).await?;
        Ok(goto!(END, Pay::update().receipt(Some(obs.body))))
    }
}

const OWNER: &str = "agent:refund-bot";

fn approver() -> Approver {
    Approver::new("alice", ["payments"])
}

fn authorizer() -> RoleAuthorizer {
    RoleAuthorizer::new().role_for(Risk::Irreversible, "payments")
}

fn waiting_for<S>(run: &Run<S>) -> String {
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("not paused: {:?}", run.outcome) };
    assert_eq!(pending[0].kind, PendingKind::Approval, "{pending:?}");
    pending[0].payload["approval"].as_str().expect("an approval id").to_string()
}

fn pay(order: &str, amount: u32) -> Pay {
    Pay { order: order.into(), amount, ..Pay::default() }
}

#[tokio::test]
async fn update_state_on_a_thread_paused_for_approval_keeps_the_approval_usable() {
    let graph = pay_flow::graph().app().store(store());
    let desk = graph.approvals(authorizer()).unwrap();
    let paused = graph.runner(&()).thread("P-1").owner(OWNER).run(pay("P-1", 40)).await.unwrap();
    let id = waiting_for(&paused);

    graph.update_state("P-1", Pay::update().note(Some("customer called".into())), "operator").unwrap();
    assert_eq!(graph.pending("P-1").unwrap().len(), 1, "still waiting for the approval");
    assert_eq!(desk.get(&id).unwrap().unwrap().status, ApprovalStatus::Pending);
    desk.approve(&id, &approver()).unwrap();

    let done = graph.runner(&()).thread("P-1").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(refunds_for("P-1"), vec![40]);
    assert_eq!(desk.get(&id).unwrap().unwrap().status, ApprovalStatus::Succeeded);
    assert_eq!(done.state.note.as_deref(), Some("customer called"));
}

/// An edit of the state cannot stand in for a decision: `update_state` writes a checkpoint and an
/// audit entry, and leaves the thread's approval records and its effect journal as they were, so
/// a state that claims the call was approved (or already ran) neither runs the tool nor settles
/// the approval.
#[tokio::test]
async fn update_state_touches_neither_the_approvals_nor_the_effect_journal() {
    let store = store();
    let graph = pay_flow::graph().app().store(store.clone());
    let desk = graph.approvals(authorizer()).unwrap();
    let paused = graph.runner(&()).thread("P-5").owner(OWNER).run(pay("P-5", 70)).await.unwrap();
    let id = waiting_for(&paused);
    let approvals = store.list_approvals("P-5").unwrap();
    let journal = store.thread_effects("P-5").unwrap();
    assert_eq!(approvals.len(), 1);

    let forged = json!({ "approved": true, "approval": id, "refunded": 70 });
    graph.update_state("P-5", Pay::update().note(Some("approved".into())).receipt(Some(forged)), "mallory").unwrap();
    assert_eq!(store.list_approvals("P-5").unwrap(), approvals, "the approval records are untouched");
    assert_eq!(store.thread_effects("P-5").unwrap(), journal, "the effect journal is untouched");
    assert_eq!(desk.get(&id).unwrap().unwrap().status, ApprovalStatus::Pending);

    // Resumed without a decision, the step still waits for the same approval; nothing ran.
    let again = graph.runner(&()).thread("P-5").resume().await.unwrap();
    assert_eq!(waiting_for(&again), id);
    assert!(refunds_for("P-5").is_empty());

    desk.approve(&id, &approver()).unwrap();
    let done = graph.runner(&()).thread("P-5").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(refunds_for("P-5"), vec![70], "the refund ran once, after the real decision");
}

#[tokio::test]
async fn fork_cancels_the_approvals_it_leaves_behind_with_an_audit_entry() {
    let graph = pay_flow::graph().app().store(store());
    let desk = graph.approvals(authorizer()).unwrap();
    let paused = graph.runner(&()).thread("P-2").owner(OWNER).run(pay("P-2", 70)).await.unwrap();
    let open = waiting_for(&paused);

    graph.fork("P-2", 0, "operator").unwrap();
    let record = desk.get(&open).unwrap().unwrap();
    assert_eq!(record.status, ApprovalStatus::Cancelled);
    assert!(record.decision_note.as_deref().unwrap_or_default().contains("forked"), "{record:?}");
    let cancelled: Vec<_> =
        graph.audit_log("P-2").unwrap().into_iter().filter(|e| e.kind == "approval.cancelled").collect();
    assert_eq!(cancelled.len(), 1);
    assert_eq!(cancelled[0].actor, "operator");
    assert_eq!(cancelled[0].detail["approval"], open.as_str());
    // The cancelled request can no longer be approved; the branch asks anew.
    assert!(desk.approve(&open, &approver()).is_err());
    let again = graph.runner(&()).thread("P-2").resume().await.unwrap();
    let fresh = waiting_for(&again);
    assert_ne!(fresh, open);
    assert!(refunds_for("P-2").is_empty());
}

#[tokio::test]
async fn a_changed_risk_class_changes_the_fingerprint_and_is_refused_on_resume() {
    let strict = pay_flow::graph();
    let soft = soft_pay_flow::graph();
    assert_ne!(strict.fingerprint(), soft.fingerprint());
    assert_eq!(strict.fingerprint(), pay_flow::graph().fingerprint());

    let store = store();
    let strict = strict.app().store(Arc::clone(&store));
    let paused = strict.runner(&()).thread("P-3").owner(OWNER).run(pay("P-3", 10)).await.unwrap();
    waiting_for(&paused);
    // Resuming under a graph whose node now calls a lower-risk refund would
    // let the call through without the approval it was stopped for.
    let err = soft.app().store(store).runner(&()).thread("P-3").resume().await.unwrap_err();
    let RunError::Resume(ResumeError::GraphChanged { changes, .. }) = &err else { panic!("{err}") };
    assert!(changes.contains("tools of `pay`"), "{changes}");
    assert!(refunds_for("P-3").is_empty());
}

#[tokio::test]
async fn an_approval_the_step_no_longer_asks_for_is_cancelled_when_the_step_moves_on() {
    let graph = pay_flow::graph().app().store(store());
    let desk = graph.approvals(authorizer()).unwrap();
    let paused = graph.runner(&()).thread("P-4").owner(OWNER).run(pay("P-4", 40)).await.unwrap();
    let stale = waiting_for(&paused);
    // The operator corrects the amount: the call the step makes now differs.
    graph.update_state("P-4", Pay::update().amount(45), "operator").unwrap();
    let again = graph.runner(&()).thread("P-4").resume().await.unwrap();
    let fresh = waiting_for(&again);
    assert_ne!(fresh, stale);
    desk.approve(&fresh, &approver()).unwrap();
    let done = graph.runner(&()).thread("P-4").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(refunds_for("P-4"), vec![45]);

    let record = desk.get(&stale).unwrap().unwrap();
    assert_eq!(record.status, ApprovalStatus::Cancelled, "the abandoned request stays open");
    assert!(desk.approve(&stale, &approver()).is_err());
    let audit = graph.audit_log("P-4").unwrap();
    let entry = audit.iter().find(|e| e.kind == "approval.cancelled").expect("an audit entry");
    assert_eq!(entry.detail["approval"], stale.as_str());
    assert!(entry.detail["note"].as_str().unwrap_or_default().contains("finished without this call"), "{entry:?}");
    assert_eq!(desk.get(&fresh).unwrap().unwrap().status, ApprovalStatus::Succeeded);
}

// ------------------------------------------------ a map step paused half-way

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Crates {
    items: Vec<String>,
    #[reduce(append)]
    checked: Vec<String>,
    note: String,
}

#[graph(state = Crates, deps = Deps, start = spread)]
mod inspect_crates {
    use super::*;

    #[node(goto = [inspect])]
    async fn spread(s: &Crates) -> Step<Crates> {
        goto!(each(inspect, s.items.clone()))
    }

    /// One instance per crate; the fragile one asks a person first.
    #[node(goto = [END], interrupt)]
    async fn inspect(_s: &Crates, #[payload] item: &String, cx: &Ctx<Deps>) -> Result<Step<Crates>, NodeError> {
        let verdict =
            if item.starts_with("fragile") { cx.interrupt::<_, String>(json!({ "open": item }))? } else { "ok".into() };
        Ok(goto!(END, Crates::update().checked(vec![format!("{item}: {verdict}")])))
    }
}

/// Before, the update dropped the step's map payloads with the old checkpoint: the resumed
/// step ran the worker without them and kept one finished instance's write for all of it.
#[tokio::test]
async fn update_state_on_a_map_step_paused_half_way_keeps_its_payloads() {
    let app = inspect_crates::graph().app().store(store());
    let deps = Deps::default();
    let items = ["a", "fragile-b", "c"].map(String::from).to_vec();
    let run = app.runner(&deps).thread("m").run(Crates { items, ..Crates::default() }).await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{}", run.outcome) };
    assert_eq!(pending[0].payload, json!({ "open": "fragile-b" }));

    app.update_state("m", Crates::update().note("handle with care".into()), "ops").unwrap();
    let done = app.runner(&deps).thread("m").resume_with("intact").await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(done.state.checked, ["a: ok", "fragile-b: intact", "c: ok"]);
    assert_eq!(done.state.note, "handle with care");
}

/// A fork at the checkpoint whose next step is the map step runs that step again, each
/// instance with its payload (before, the fork's head had none and every instance failed).
#[tokio::test]
async fn a_fork_before_a_map_step_runs_it_again_with_its_payloads() {
    let app = inspect_crates::graph().app().store(store());
    let deps = Deps::default();
    let items = ["a", "c"].map(String::from).to_vec();
    let done = app.runner(&deps).thread("f").run(Crates { items, ..Crates::default() }).await.unwrap();
    assert_eq!(done.state.checked, ["a: ok", "c: ok"]);
    let before_map = app.history("f").unwrap().into_iter().find(|c| c.cursor == ["inspect"]).unwrap().seq;
    app.fork("f", before_map, "ops").unwrap();
    let again = app.runner(&deps).thread("f").resume().await.unwrap();
    assert_eq!(again.outcome, Outcome::Completed);
    assert_eq!(again.state.checked, ["a: ok", "c: ok"], "the branch starts from before the map step");
}
