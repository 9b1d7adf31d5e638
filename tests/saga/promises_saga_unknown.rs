//! Promise (README, saga paragraph; `agentflow::saga` docs): "Calls whose
//! outcome is unknown are not compensated; `Compensated { unknown }` lists
//! them."
//!
//! The workflow: `create` makes a compensable call that completes
//! (`create_order`, undone by `cancel_order`), then `charge` makes a
//! compensable call (`charge_payment`, undone by `refund_payment`, not
//! idempotent) that acts and never answers: the run is dropped there, standing
//! in for a crash (the `cut_off` pattern of tests/uncertain_outcome.rs), and
//! the store file is reopened as a new process would. Then the run fails for
//! good (`cx.compensate`) and the thread compensates.
//!
//! If the promise were false: `unknown` would be empty although the charge may
//! have happened (the operator would read "everything undone"), or the charge
//! would be "undone" by a refund of a payment nobody knows was made (the
//! `refund_payment` body would run, `undone` would list `charge_payment`).

use crate::support::hooked_store;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::support::stores::open_redb;
use agentflow::approval::{ApprovalStatus, RoleAuthorizer};
use agentflow::persist::ThreadStatus;
use agentflow::prelude::*;
use agentflow::saga::Compensates;
use agentflow::tool::{Risk, RiskPolicy};
use agentflow::{PendingKind, Store};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::sync::Notify;

/// The outside world: every call that reached a tool body, in order.
pub struct Shop {
    calls: Mutex<Vec<String>>,
    /// Said by `charge_payment` once it acted.
    acted: Notify,
    /// The first `charge_payment` acts and never answers.
    hang_charge: AtomicBool,
    /// `charge` gives up (fails for good) instead of charging.
    give_up: AtomicBool,
}

impl Shop {
    fn new() -> Self {
        Shop {
            calls: Mutex::new(Vec::new()),
            acted: Notify::new(),
            hang_charge: AtomicBool::new(true),
            give_up: AtomicBool::new(false),
        }
    }

    fn called(&self, tool: &str) {
        self.calls.lock().unwrap().push(tool.to_string());
    }

    fn count(&self, tool: &str) -> usize {
        self.calls.lock().unwrap().iter().filter(|c| *c == tool).count()
    }
}

#[derive(Deserialize, Serialize, schemars::JsonSchema)]
pub struct NewOrder {
    item: String,
}

#[derive(Deserialize, Serialize)]
pub struct Order {
    order_id: String,
}

#[derive(Deserialize, Serialize, schemars::JsonSchema)]
pub struct OrderRef {
    order_id: String,
}

#[derive(Deserialize, Serialize, schemars::JsonSchema)]
pub struct Charge {
    cents: u64,
}

#[derive(Deserialize, Serialize)]
pub struct Payment {
    payment_id: String,
}

#[derive(Deserialize, Serialize, schemars::JsonSchema)]
pub struct Refund {
    payment_id: String,
}

/// Creates an order.
#[tool(risk = reversible, compensate = cancel_order)]
async fn create_order(_args: NewOrder, cx: &ToolCx<Shop>) -> Result<Order, ToolError> {
    cx.deps().called("create_order");
    Ok(Order { order_id: "ord-1".into() })
}

/// Cancels an order.
#[tool(risk = reversible)]
async fn cancel_order(_args: OrderRef, cx: &ToolCx<Shop>) -> Result<(), ToolError> {
    cx.deps().called("cancel_order");
    Ok(())
}

impl Compensates<create_order> for OrderRef {
    fn from_call(_args: NewOrder, order: Order) -> Self {
        OrderRef { order_id: order.order_id }
    }
}

/// Charges the customer; the provider does not deduplicate.
#[tool(risk = reversible, compensate = refund_payment)]
async fn charge_payment(_args: Charge, cx: &ToolCx<Shop>) -> Result<Payment, ToolError> {
    let shop = cx.deps();
    shop.called("charge_payment");
    if shop.hang_charge.swap(false, Ordering::SeqCst) {
        shop.acted.notify_one();
        std::future::pending::<()>().await;
    }
    Ok(Payment { payment_id: "pay-1".into() })
}

/// Refunds a payment.
#[tool(risk = reversible)]
async fn refund_payment(_args: Refund, cx: &ToolCx<Shop>) -> Result<(), ToolError> {
    cx.deps().called("refund_payment");
    Ok(())
}

impl Compensates<charge_payment> for Refund {
    fn from_call(_args: Charge, p: Payment) -> Self {
        Refund { payment_id: p.payment_id }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Checkout {
    order_id: Option<String>,
    paid: bool,
}

#[graph(state = Checkout, deps = Shop, start = create)]
pub mod checkout {
    use super::*;

    #[node(goto = [charge], tools = [create_order])]
    async fn create(_s: &Checkout, cx: &Ctx<Shop>) -> Result<Step<Checkout>, NodeError> {
        let obs = cx.run_tool(create_order, json!({ "item": "lamp" })).await?;
        let id = obs.body["result"]["order_id"].as_str().map(str::to_string);
        Ok(goto!(charge, Checkout::update().order_id(id)))
    }

    #[node(goto = [END], tools = [charge_payment])]
    async fn charge(_s: &Checkout, cx: &Ctx<Shop>) -> Result<Step<Checkout>, NodeError> {
        if cx.deps().give_up.load(Ordering::SeqCst) {
            return Err(cx.compensate("the customer cancelled"));
        }
        let obs = cx.run_tool(charge_payment, json!({ "cents": 4200 })).await?;
        Ok(goto!(END, Checkout::update().paid(obs.is_ok())))
    }
}

const OWNER: &str = "agent:shop";

fn db(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("agentflow-promises-saga-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("store.redb")
}

fn open(path: &PathBuf) -> (Arc<dyn Store>, App<Checkout, Shop>) {
    let store: Arc<dyn Store> = Arc::new(open_redb(path).expect("open store"));
    let app = checkout::graph().app().store(Arc::clone(&store)).policy(RiskPolicy::allow_all());
    (store, app)
}

/// Runs the workflow on a new store file until `charge_payment` acted, then
/// drops the run there; returns the file, closed.
async fn charge_cut_off(name: &str, shop: &Shop) -> PathBuf {
    let path = db(name);
    let (_store, app) = open(&path);
    tokio::select! {
        run = app.runner(shop).thread("order").owner(OWNER).run(Checkout::default()) => {
            panic!("the run should hang in charge_payment: {:?}", run.map(|r| r.outcome))
        }
        () = shop.acted.notified() => {}
    }
    assert_eq!((shop.count("create_order"), shop.count("charge_payment")), (1, 1));
    path
}

fn check_compensated(run: &agentflow::Run<Checkout>, shop: &Shop, store: &Arc<dyn Store>) -> Vec<String> {
    let Outcome::Compensated { reason, undone, unknown } = &run.outcome else {
        panic!("expected Compensated, got {}", run.outcome)
    };
    assert!(reason.contains("the customer cancelled"), "{reason}");
    let undone: Vec<(&str, &str)> = undone.iter().map(|u| (u.tool.as_str(), u.compensation.as_str())).collect();
    assert_eq!(undone, [("create_order", "cancel_order")], "only the completed call is undone");
    assert_eq!(shop.count("cancel_order"), 1);
    assert_eq!(shop.count("refund_payment"), 0, "a call of unknown outcome was compensated");
    assert_eq!(shop.count("charge_payment"), 1, "the charge ran again");
    assert_eq!(store.thread("order").unwrap().unwrap().status, ThreadStatus::Compensated);
    unknown.clone()
}

/// The resume first pauses on the cut-off charge (`OUTCOME_UNKNOWN`); nobody
/// settles it, and the next run fails for good and compensates.
#[tokio::test]
async fn compensated_lists_a_cut_off_call_left_unknown_and_does_not_undo_it() {
    let shop = Shop::new();
    let path = charge_cut_off("paused-first", &shop).await;
    let (store, app) = open(&path);
    let run = app.runner(&shop).thread("order").resume().await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("not paused: {}", run.outcome) };
    assert_eq!(pending[0].kind, PendingKind::OutcomeUnknown, "{pending:?}");
    let id = pending[0].payload["approval"].as_str().unwrap().to_string();
    assert_eq!(shop.count("charge_payment"), 1);

    shop.give_up.store(true, Ordering::SeqCst);
    let run = app.runner(&shop).thread("order").resume().await.unwrap();
    let unknown = check_compensated(&run, &shop, &store);
    assert_eq!(unknown, [format!("charge_payment ({id})")]);
    let desk = app.approvals(RoleAuthorizer::new().role_for(Risk::Reversible, "ops")).unwrap();
    assert_eq!(desk.get(&id).unwrap().unwrap().status, ApprovalStatus::OutcomeUnknown, "still for a human");
}

/// The run fails for good in the very step that re-runs the node whose call
/// was cut off (the node no longer makes the call). The charge's outcome is
/// just as unknown, so `unknown` must list it and a human must be asked.
#[tokio::test]
async fn compensated_lists_a_cut_off_call_when_the_failing_step_no_longer_makes_it() {
    let shop = Shop::new();
    let path = charge_cut_off("fails-at-once", &shop).await;
    let (store, app) = open(&path);
    shop.give_up.store(true, Ordering::SeqCst);
    let run = app.runner(&shop).thread("order").resume().await.unwrap();
    // Without the sweep when the compensation starts, `unknown` would be empty and no
    // OUTCOME_UNKNOWN record would exist: a step's sweep runs when it commits, and this one fails.
    let unknown = check_compensated(&run, &shop, &store);
    let records = store.list_approvals("order").unwrap();
    let recorded = records.iter().any(|r| r.status == ApprovalStatus::OutcomeUnknown && r.tool == "charge_payment");
    assert!(
        unknown.len() == 1 && unknown[0].starts_with("charge_payment (") && recorded,
        "the cut-off charge is not listed: unknown {unknown:?}; OUTCOME_UNKNOWN record for a human: {recorded}"
    );
}

/// The policy that asks a human before `charge_payment`, and who may decide it.
fn policy() -> RiskPolicy {
    RiskPolicy::allow_all().tool("charge_payment", agentflow::tool::Decision::NeedsApproval)
}

fn authorizer() -> RoleAuthorizer {
    RoleAuthorizer::new().role_for(Risk::Reversible, "ops")
}

/// Runs the workflow under [`policy`] on a new store file: the charge waits for an approval,
/// `alice` approves it, and the resumed run is dropped once `charge_payment` acted. Returns
/// the file, closed.
async fn approved_charge_cut_off(name: &str, shop: &Shop) -> PathBuf {
    use agentflow::approval::Approver;

    let path = db(name);
    let (_store, app) = open(&path);
    let app = app.policy(policy());
    let run = app.runner(shop).thread("order").owner(OWNER).run(Checkout::default()).await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("not paused: {}", run.outcome) };
    let id = pending[0].payload["approval"].as_str().unwrap().to_string();
    app.approvals(authorizer()).unwrap().approve(&id, &Approver::new("alice", ["ops"])).unwrap();
    tokio::select! {
        run = app.runner(shop).thread("order").resume() => {
            panic!("the run should hang in charge_payment: {:?}", run.map(|r| r.outcome))
        }
        () = shop.acted.notified() => {}
    }
    path
}

/// The same, with the charge run under an approval: the approved charge is cut off mid-way,
/// and the resumed step fails for good without making it again. Its approval must not stay
/// `EXECUTING` for good (no step of a compensated thread runs again, so no later step would
/// look at it): it becomes `OUTCOME_UNKNOWN`, for a human, and `unknown` lists it.
#[tokio::test]
async fn compensated_lists_an_approved_call_cut_off_when_the_failing_step_no_longer_makes_it() {
    let shop = Shop::new();
    let path = approved_charge_cut_off("approved-fails-at-once", &shop).await;
    let (store, app) = open(&path);
    let app = app.policy(policy());
    shop.give_up.store(true, Ordering::SeqCst);
    let run = app.runner(&shop).thread("order").resume().await.unwrap();
    let unknown = check_compensated(&run, &shop, &store);
    let desk = app.approvals(authorizer()).unwrap();
    let charge = desk.for_thread("order").unwrap().into_iter().find(|r| r.tool == "charge_payment").unwrap();
    assert_eq!(charge.status, ApprovalStatus::OutcomeUnknown, "{charge:?}");
    assert_eq!(unknown, [format!("charge_payment ({})", charge.id)]);
    assert!(desk.pending().unwrap().iter().any(|r| r.id == charge.id), "listed for a human");
}

/// A cut-off approved charge that a human settles as done is journaled with its saga entry in
/// one write, like a result the call returned: here the process would die at a write of the
/// entry on its own (the store panics there), and none happens; the run completes and the
/// charge is in the saga log, so a later compensation would refund it.
#[tokio::test]
async fn a_call_settled_as_done_is_in_the_saga_log_with_its_result() {
    use agentflow::approval::Settlement;

    let shop = Shop::new();
    let path = approved_charge_cut_off("settled-done", &shop).await;
    let inner: Arc<dyn Store> = Arc::new(open_redb(&path).expect("open store"));
    let mut hooked = hooked_store::Hooked::new(Arc::clone(&inner));
    hooked.before_audit = Some(Box::new(|_, entry| {
        assert_ne!(entry.kind, "saga.step", "the process dies here: the saga entry is written on its own");
    }));
    let app = checkout::graph().app().store(Arc::new(hooked)).policy(policy());
    let run = app.runner(&shop).thread("order").resume().await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("not paused: {}", run.outcome) };
    assert_eq!(pending[0].kind, PendingKind::OutcomeUnknown);
    let id = pending[0].payload["approval"].as_str().unwrap().to_string();
    let settled = Settlement::Succeeded(json!({ "payment_id": "pay-7" }));
    app.approvals(authorizer())
        .unwrap()
        .settle(&id, &agentflow::approval::Approver::new("alice", ["ops"]), settled)
        .unwrap();
    let done = app.runner(&shop).thread("order").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed, "{}", done.outcome);
    assert_eq!(shop.count("charge_payment"), 1);
    let logged: Vec<String> = inner
        .list_audit("order")
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == "saga.step")
        .map(|e| e.detail["tool"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(logged, ["create_order", "charge_payment"]);
}
