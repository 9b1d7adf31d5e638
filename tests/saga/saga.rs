//! Saga compensation, on seed 004's order workflow: create order -> reserve
//! inventory -> charge payment -> ship fails -> refund -> release -> cancel.
//!
//! The "outside world" is a directory: every call that reaches a tool body
//! appends a line to `calls.log`, and every change a tool makes appends one
//! to `effects.log` (an idempotent tool makes its change once per key), so
//! the tests count what ran and what acted, across processes.

use crate::support::pg;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::support::process::own_test;
use agentflow::persist::{HistoryError, ResumeError, ThreadStatus};
use agentflow::prelude::*;
use agentflow::saga::{Compensates, Undone};
use agentflow::tool::RiskPolicy;
use agentflow::{Activity, CancellationToken, Event, RedbStore, RunError, Store};
use serde::{Deserialize, Serialize};

// ---------------------------------------------------------------- the outside world

pub struct Shop {
    dir: PathBuf,
    /// The payment provider refuses refunds while set.
    refunds_down: AtomicBool,
    /// The first call of `release_inventory` in this process hangs before it acts.
    hang_in_release: bool,
    /// `ship` succeeds (a carrier serves the address) while set.
    ships: bool,
    /// Cancels the run's token from within the node named, which then goes on as usual.
    cancel: Option<(CancellationToken, &'static str)>,
    /// The first call of `cancel_order` acts, notifies this, and never answers.
    hang_in_cancel: Option<Arc<tokio::sync::Notify>>,
}

impl Shop {
    fn new(dir: &Path) -> Self {
        Shop {
            dir: dir.to_path_buf(),
            refunds_down: AtomicBool::new(false),
            hang_in_release: false,
            ships: false,
            cancel: None,
            hang_in_cancel: None,
        }
    }

    /// Cancels the run's token if `node` is the one named to.
    fn cancel_from(&self, node: &str) {
        if let Some((token, from)) = &self.cancel
            && *from == node
        {
            token.cancel();
        }
    }

    fn append(&self, file: &str, line: &str) {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(self.dir.join(file)).unwrap();
        // One write call, so a SIGKILL cannot leave half a line (writeln! may make two).
        f.write_all(format!("{line}\n").as_bytes()).unwrap();
        f.sync_all().unwrap();
    }

    /// Records a call reaching `tool`'s body.
    fn called(&self, tool: &str) {
        self.append("calls.log", tool);
    }

    /// Makes `change`; with a key, only the first request with that key acts.
    fn act(&self, change: &str, key: Option<&str>) {
        if let Some(key) = key {
            let slug: String = key.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
            let seen = self.dir.join(format!("key-{slug}"));
            if std::fs::OpenOptions::new().write(true).create_new(true).open(seen).is_err() {
                return;
            }
        }
        self.append("effects.log", change);
    }
}

fn lines(dir: &Path, file: &str) -> Vec<String> {
    std::fs::read_to_string(dir.join(file)).unwrap_or_default().lines().map(str::to_string).collect()
}

// ---------------------------------------------------------------- tools

#[derive(Deserialize, Serialize, schemars::JsonSchema)]
pub struct NewOrder {
    item: String,
    qty: u32,
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
pub struct Reserve {
    item: String,
    qty: u32,
}

#[derive(Deserialize, Serialize)]
pub struct Reservation {
    reservation: String,
}

#[derive(Deserialize, Serialize, schemars::JsonSchema)]
pub struct Release {
    reservation: String,
    qty: u32,
}

#[derive(Deserialize, Serialize, schemars::JsonSchema)]
pub struct Charge {
    order_id: String,
    cents: u64,
}

#[derive(Deserialize, Serialize)]
pub struct Payment {
    payment_id: String,
    cents: u64,
}

#[derive(Deserialize, Serialize, schemars::JsonSchema)]
pub struct Refund {
    payment_id: String,
    cents: u64,
}

/// Creates an order.
#[tool(risk = reversible, compensate = cancel_order)]
async fn create_order(args: NewOrder, cx: &ToolCx<Shop>) -> Result<Order, ToolError> {
    cx.deps().called("create_order");
    cx.deps().act(&format!("create ord-1 {}x{}", args.qty, args.item), None);
    Ok(Order { order_id: "ord-1".into() })
}

/// Cancels an order.
#[tool(risk = reversible)]
async fn cancel_order(args: OrderRef, cx: &ToolCx<Shop>) -> Result<(), ToolError> {
    let shop = cx.deps();
    shop.called("cancel_order");
    shop.act(&format!("cancel {}", args.order_id), None);
    if let Some(acted) = &shop.hang_in_cancel
        && count(&lines(&shop.dir, "calls.log"), "cancel_order") == 1
    {
        acted.notify_one();
        std::future::pending::<()>().await;
    }
    Ok(())
}

impl Compensates<create_order> for OrderRef {
    fn from_call(_args: NewOrder, order: Order) -> Self {
        OrderRef { order_id: order.order_id }
    }
}

/// Reserves stock.
#[tool(risk = reversible, compensate = release_inventory)]
async fn reserve_inventory(args: Reserve, cx: &ToolCx<Shop>) -> Result<Reservation, ToolError> {
    cx.deps().called("reserve_inventory");
    cx.deps().act(&format!("reserve {}x{}", args.qty, args.item), None);
    Ok(Reservation { reservation: "res-9".into() })
}

/// Releases reserved stock; the warehouse deduplicates by idempotency key.
#[tool(risk = reversible, idempotent)]
async fn release_inventory(args: Release, cx: &ToolCx<Shop>) -> Result<(), ToolError> {
    let shop = cx.deps();
    shop.called("release_inventory");
    if shop.hang_in_release && lines(&shop.dir, "calls.log").iter().filter(|l| *l == "release_inventory").count() == 1 {
        std::fs::write(shop.dir.join("hanging"), b"").unwrap();
        std::future::pending::<()>().await;
    }
    shop.act(&format!("release {} ({})", args.reservation, args.qty), Some(cx.idempotency_key()));
    Ok(())
}

impl Compensates<reserve_inventory> for Release {
    fn from_call(args: Reserve, r: Reservation) -> Self {
        Release { reservation: r.reservation, qty: args.qty }
    }
}

/// Charges the customer.
#[tool(risk = external, compensate = refund_payment)]
async fn charge_payment(args: Charge, cx: &ToolCx<Shop>) -> Result<Payment, ToolError> {
    cx.deps().called("charge_payment");
    cx.deps().act(&format!("charge {} {}", args.order_id, args.cents), None);
    Ok(Payment { payment_id: "pay-3".into(), cents: args.cents })
}

/// Refunds a payment; the provider deduplicates by idempotency key.
#[tool(risk = external, idempotent)]
async fn refund_payment(args: Refund, cx: &ToolCx<Shop>) -> Result<(), ToolError> {
    let shop = cx.deps();
    shop.called("refund_payment");
    if shop.refunds_down.load(Ordering::SeqCst) {
        return Err(ToolError::Fatal("the payment provider is down".into()));
    }
    shop.act(&format!("refund {} {}", args.payment_id, args.cents), Some(cx.idempotency_key()));
    Ok(())
}

impl Compensates<charge_payment> for Refund {
    fn from_call(_args: Charge, p: Payment) -> Self {
        Refund { payment_id: p.payment_id, cents: p.cents }
    }
}

#[derive(Deserialize, Serialize, schemars::JsonSchema)]
pub struct Parcel {
    order_id: String,
}

/// Ships an order: the carrier refuses it.
#[tool(risk = external)]
async fn ship(_args: Parcel, cx: &ToolCx<Shop>) -> Result<(), ToolError> {
    cx.deps().called("ship");
    if cx.deps().ships {
        cx.deps().act("ship ord-1", None);
        return Ok(());
    }
    Err(ToolError::Correctable("no carrier serves this address".into()))
}

// ---------------------------------------------------------------- the workflow

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Checkout {
    order_id: Option<String>,
    shipped: bool,
}

#[graph(state = Checkout, deps = Shop, start = create)]
mod checkout {
    use super::*;

    #[node(goto = [reserve], tools = [create_order])]
    async fn create(_s: &Checkout, cx: &Ctx<Shop>) -> Result<Step<Checkout>, NodeError> {
        let obs = cx.run_tool(create_order, serde_json::json!({ "item": "lamp", "qty": 2 })).await?;
        let id = obs.body["result"]["order_id"].as_str().map(str::to_string);
        Ok(goto!(reserve, Checkout::update().order_id(id)))
    }

    #[node(goto = [charge], tools = [reserve_inventory])]
    async fn reserve(_s: &Checkout, cx: &Ctx<Shop>) -> Result<Step<Checkout>, NodeError> {
        cx.run_tool(reserve_inventory, serde_json::json!({ "item": "lamp", "qty": 2 })).await?;
        Ok(goto!(charge))
    }

    #[node(goto = [deliver], tools = [charge_payment])]
    async fn charge(s: &Checkout, cx: &Ctx<Shop>) -> Result<Step<Checkout>, NodeError> {
        let obs = cx.run_tool(charge_payment, serde_json::json!({ "order_id": s.order_id, "cents": 4200 })).await?;
        if !obs.is_ok() {
            return Err(NodeError::fatal(format!("the charge was refused: {}", obs.body)));
        }
        cx.deps().cancel_from("charge");
        Ok(goto!(deliver))
    }

    #[node(goto = [END], tools = [ship])]
    async fn deliver(s: &Checkout, cx: &Ctx<Shop>) -> Result<Step<Checkout>, NodeError> {
        let obs = cx.run_tool(ship, serde_json::json!({ "order_id": s.order_id })).await?;
        if !obs.is_ok() {
            return Err(cx.compensate(format!("shipping failed: {}", obs.body)));
        }
        cx.deps().cancel_from("deliver");
        Ok(goto!(END, Checkout::update().shipped(true)))
    }
}

/// The order workflow with a person's go-ahead before shipping.
#[graph(state = Checkout, deps = Shop, start = create)]
mod confirmed {
    use super::*;

    #[node(goto = [charge], tools = [create_order])]
    async fn create(_s: &Checkout, cx: &Ctx<Shop>) -> Result<Step<Checkout>, NodeError> {
        let obs = cx.run_tool(create_order, serde_json::json!({ "item": "lamp", "qty": 2 })).await?;
        let id = obs.body["result"]["order_id"].as_str().map(str::to_string);
        Ok(goto!(charge, Checkout::update().order_id(id)))
    }

    #[node(goto = [confirm], tools = [charge_payment])]
    async fn charge(s: &Checkout, cx: &Ctx<Shop>) -> Result<Step<Checkout>, NodeError> {
        cx.run_tool(charge_payment, serde_json::json!({ "order_id": s.order_id, "cents": 4200 })).await?;
        Ok(goto!(confirm))
    }

    #[node(goto = [END], tools = [ship], interrupt)]
    async fn confirm(s: &Checkout, cx: &Ctx<Shop>) -> Result<Step<Checkout>, NodeError> {
        let go: bool = cx.interrupt(serde_json::json!({ "ship": s.order_id }))?;
        if !go {
            return Err(cx.compensate("the customer called it off"));
        }
        let obs = cx.run_tool(ship, serde_json::json!({ "order_id": s.order_id })).await?;
        if !obs.is_ok() {
            return Err(cx.compensate(format!("shipping failed: {}", obs.body)));
        }
        Ok(goto!(END, Checkout::update().shipped(true)))
    }
}

/// The go-ahead asked by a subgraph: its question is answered through the parent.
#[graph(state = Checkout, deps = Shop, start = ask)]
mod go_ahead {
    use super::*;

    #[node(goto = [END], interrupt)]
    async fn ask(s: &Checkout, cx: &Ctx<Shop>) -> Result<Step<Checkout>, NodeError> {
        let go: bool = cx.interrupt(serde_json::json!({ "ship": s.order_id }))?;
        Ok(goto!(END, Checkout::update().shipped(go)))
    }
}

#[graph(state = Checkout, deps = Shop, start = create)]
mod confirmed_by_child {
    use super::*;

    #[node(goto = [confirm], tools = [create_order])]
    async fn create(_s: &Checkout, cx: &Ctx<Shop>) -> Result<Step<Checkout>, NodeError> {
        let obs = cx.run_tool(create_order, serde_json::json!({ "item": "lamp", "qty": 2 })).await?;
        let id = obs.body["result"]["order_id"].as_str().map(str::to_string);
        Ok(goto!(confirm, Checkout::update().order_id(id)))
    }

    #[node(goto = [END], subgraphs = [go_ahead])]
    async fn confirm(s: &Checkout, cx: &Ctx<Shop>) -> Result<Step<Checkout>, NodeError> {
        let answered = cx.subgraph(go_ahead::graph(), s.clone()).await?;
        if !answered.shipped {
            return Err(cx.compensate("the customer called it off"));
        }
        Ok(goto!(END, Checkout::update().shipped(true)))
    }
}

fn confirmed_app(store: Arc<dyn Store>) -> App<Checkout, Shop> {
    confirmed::graph().app().store(store).policy(RiskPolicy::allow_all())
}

fn app(store: Arc<dyn Store>) -> App<Checkout, Shop> {
    checkout::graph().app().store(store).policy(RiskPolicy::allow_all())
}

fn undone(pairs: &[(&str, &str, &str)]) -> Vec<(String, String, String)> {
    pairs.iter().map(|(n, t, c)| (n.to_string(), t.to_string(), c.to_string())).collect()
}

fn triples(u: &[Undone]) -> Vec<(String, String, String)> {
    u.iter().map(|u| (u.node.clone(), u.tool.clone(), u.compensation.clone())).collect()
}

const REVERSED: [(&str, &str, &str); 3] = [
    ("charge", "charge_payment", "refund_payment"),
    ("reserve", "reserve_inventory", "release_inventory"),
    ("create", "create_order", "cancel_order"),
];

fn count(v: &[String], what: &str) -> usize {
    v.iter().filter(|l| *l == what).count()
}

use crate::support::temp::temp_dir as tempdir;

// ---------------------------------------------------------------- tests

#[tokio::test]
async fn a_failed_order_is_undone_newest_first_each_compensation_once() {
    let dir = tempdir("order");
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let shop = Shop::new(&dir);
    let app = app(Arc::clone(&store));
    let mut compensations = Vec::new();
    let run = app
        .runner(&shop)
        .thread("order-1")
        .owner("agent:shop")
        .on_event(|e| {
            if let Event::Activity(Activity::Compensation { compensation, result, .. }) = e {
                compensations.push(format!("{compensation} {result}"));
            }
        })
        .run(Checkout::default())
        .await
        .unwrap();

    let Outcome::Compensated { reason, undone: done, unknown } = &run.outcome else {
        panic!("expected Compensated, got {:?}", run.outcome)
    };
    assert!(reason.contains("shipping failed"), "{reason}");
    assert_eq!(triples(done), undone(&REVERSED));
    assert!(unknown.is_empty(), "{unknown:?}");
    assert_eq!(compensations, ["refund_payment ok", "release_inventory ok", "cancel_order ok"]);

    // What ran, and what changed, in order: each compensation once, newest first,
    // with the arguments built from the forward call's arguments and result.
    assert_eq!(
        lines(&dir, "calls.log"),
        [
            "create_order",
            "reserve_inventory",
            "charge_payment",
            "ship",
            "refund_payment",
            "release_inventory",
            "cancel_order"
        ]
    );
    assert_eq!(
        lines(&dir, "effects.log"),
        [
            "create ord-1 2xlamp",
            "reserve 2xlamp",
            "charge ord-1 4200",
            "refund pay-3 4200",
            "release res-9 (2)",
            "cancel ord-1"
        ]
    );

    // The thread is compensated, the audit log says what was undone, and a
    // resume has nothing left to do.
    assert_eq!(store.thread("order-1").unwrap().unwrap().status, ThreadStatus::Compensated);
    let audit = store.list_audit("order-1").unwrap();
    let kinds: Vec<(&str, &str)> = audit
        .iter()
        .filter(|e| e.kind.starts_with("saga."))
        .map(|e| (e.kind.as_str(), e.detail["compensation"].as_str().unwrap_or_default()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("saga.step", "cancel_order"),
            ("saga.step", "release_inventory"),
            ("saga.step", "refund_payment"),
            ("saga.compensating", ""),
            ("saga.compensated", "refund_payment"),
            ("saga.compensated", "release_inventory"),
            ("saga.compensated", "cancel_order"),
        ]
    );
    let again = app.runner(&shop).thread("order-1").resume().await;
    assert!(
        matches!(again, Err(RunError::Resume(ResumeError::Finished { ref status, .. })) if status == "compensated")
    );
    // Nor does an update bring it back to life: its step's journal says the calls ran, and
    // they were undone.
    let refused = app.update_state("order-1", Checkout::update().shipped(false), "ops").unwrap_err();
    assert!(matches!(refused, HistoryError::Undone { status: "compensated", .. }), "{refused}");
    assert_eq!(store.thread("order-1").unwrap().unwrap().status, ThreadStatus::Compensated);
    let again = app.runner(&shop).thread("order-1").resume().await;
    assert!(matches!(again, Err(RunError::Resume(ResumeError::Finished { .. }))), "{again:?}");
    assert_eq!(lines(&dir, "calls.log").len(), 7);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_failed_compensation_is_named_stops_the_rest_and_resume_retries_it() {
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    failed_compensation_then_resume(store, "refund-down").await;
}

/// The same on PostgreSQL (`AGENTFLOW_PG_URL`; skipped when unset): the
/// `compensating` status and the compensations' journal round-trip there too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_compensation_then_resume_on_postgres() {
    let Some(url) = pg::pg_url() else { return };
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let schema = format!("saga_{}_{nanos}", std::process::id());
    let store = agentflow_store::PostgresStore::builder().schema(schema).open(&url).expect("open the PostgreSQL store");
    failed_compensation_then_resume(Arc::new(store), "refund-down-pg").await;
}

async fn failed_compensation_then_resume(store: Arc<dyn Store>, name: &str) {
    let dir = tempdir(name);
    let shop = Shop::new(&dir);
    shop.refunds_down.store(true, Ordering::SeqCst);
    let app = app(Arc::clone(&store));
    let run = app.runner(&shop).thread("order-2").owner("agent:shop").run(Checkout::default()).await.unwrap();
    let Outcome::CompensationFailed { compensation, tool, error, approval, undone: done, .. } = &run.outcome else {
        panic!("expected CompensationFailed, got {:?}", run.outcome)
    };
    assert_eq!((compensation.as_str(), tool.as_str()), ("refund_payment", "charge_payment"));
    assert!(error.contains("the payment provider is down"), "{error}");
    assert_eq!(*approval, None);
    assert!(done.is_empty());
    // The later compensations did not run: the saga stops for a human.
    assert_eq!(count(&lines(&dir, "calls.log"), "release_inventory"), 0);
    assert_eq!(count(&lines(&dir, "calls.log"), "cancel_order"), 0);
    assert_eq!(store.thread("order-2").unwrap().unwrap().status, ThreadStatus::Compensating);
    let failed = store.list_audit("order-2").unwrap();
    let failed: Vec<_> = failed.iter().filter(|e| e.kind == "saga.compensation_failed").collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].detail["compensation"], "refund_payment");
    // An update would make the thread resumable as a graph again, past the compensation.
    let refused = app.update_state("order-2", Checkout::update().shipped(false), "ops").unwrap_err();
    assert!(matches!(refused, HistoryError::Undone { status: "compensating", .. }), "{refused}");
    assert_eq!(store.thread("order-2").unwrap().unwrap().status, ThreadStatus::Compensating);

    // The provider is back: a resume continues the compensation, not the graph.
    shop.refunds_down.store(false, Ordering::SeqCst);
    let mut nodes_run = Vec::new();
    let run = app
        .runner(&shop)
        .thread("order-2")
        .on_event(|e| {
            if let Event::NodeStarted { node, .. } = e {
                nodes_run.push(node);
            }
        })
        .resume()
        .await
        .unwrap();
    assert!(nodes_run.is_empty(), "a compensating thread resumes its compensation, not its graph: {nodes_run:?}");
    let Outcome::Compensated { reason, undone: done, .. } = &run.outcome else {
        panic!("expected Compensated, got {:?}", run.outcome)
    };
    assert!(reason.contains("shipping failed"), "the reason it started with: {reason}");
    assert_eq!(triples(done), undone(&REVERSED));
    let calls = lines(&dir, "calls.log");
    assert_eq!(count(&calls, "refund_payment"), 2, "{calls:?}");
    assert_eq!((count(&calls, "ship"), count(&calls, "create_order")), (1, 1), "{calls:?}");
    let effects = lines(&dir, "effects.log");
    assert_eq!(effects[3..], ["refund pay-3 4200", "release res-9 (2)", "cancel ord-1"]);
    assert_eq!(store.thread("order-2").unwrap().unwrap().status, ThreadStatus::Compensated);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_cancelled_run_is_compensated_too() {
    let dir = tempdir("cancel");
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let token = CancellationToken::new();
    // Cancelled while it charges: the run stops at the next step boundary, before `deliver`.
    let shop = Shop { cancel: Some((token.clone(), "charge")), ..Shop::new(&dir) };
    let app = app(Arc::clone(&store));
    let run = app.runner(&shop).thread("order-3").cancel_token(token).run(Checkout::default()).await.unwrap();
    let Outcome::Compensated { reason, undone: done, .. } = &run.outcome else {
        panic!("expected Compensated, got {:?}", run.outcome)
    };
    assert_eq!(reason, "Cancelled");
    assert_eq!(triples(done), undone(&REVERSED));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_cancel_that_comes_as_the_last_step_runs_leaves_the_order_completed() {
    // The cancel comes while `deliver` ships, the graph's last step: the step commits the thread
    // `completed`, and there is no step boundary left to stop at. The run used to end
    // `Cancelled` there, mark the completed thread cancelled and undo the shipped order.
    let dir = tempdir("cancel-last");
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let token = CancellationToken::new();
    let shop = Shop { ships: true, cancel: Some((token.clone(), "deliver")), ..Shop::new(&dir) };
    let app = app(Arc::clone(&store));
    let run = app.runner(&shop).thread("order-4").cancel_token(token.clone()).run(Checkout::default()).await.unwrap();
    assert!(token.is_cancelled());
    assert_eq!(run.outcome, Outcome::Completed);
    assert!(run.state.shipped);
    assert_eq!(store.thread("order-4").unwrap().unwrap().status, ThreadStatus::Completed);
    let calls = lines(&dir, "calls.log");
    assert_eq!(calls, ["create_order", "reserve_inventory", "charge_payment", "ship"], "nothing was undone");
    assert_eq!(lines(&dir, "effects.log").last().map(String::as_str), Some("ship ord-1"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_run_without_compensable_calls_keeps_its_outcome() {
    // The same failure before any call completed: nothing to undo, the run is `Failed`.
    #[graph(state = Checkout, deps = Shop, start = only)]
    mod early {
        use super::*;

        #[node(goto = [END])]
        async fn only(_s: &Checkout, cx: &Ctx<Shop>) -> Result<Step<Checkout>, NodeError> {
            Err(cx.compensate("nothing done yet"))
        }
    }
    let dir = tempdir("early");
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let shop = Shop::new(&dir);
    let run = early::graph().app().store(Arc::clone(&store)).runner(&shop).thread("t").run(Checkout::default()).await;
    let run = run.unwrap();
    assert!(matches!(run.outcome, Outcome::Failed { ref node, .. } if node == "only"), "{:?}", run.outcome);
    assert_eq!(store.thread("t").unwrap().unwrap().status, ThreadStatus::Failed);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_compensation_cut_off_mid_call_that_is_not_idempotent_waits_for_a_human() {
    use agentflow::approval::{ApprovalStatus, Approver, RoleAuthorizer, Settlement};
    let dir = tempdir("unknown");
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let acted = Arc::new(tokio::sync::Notify::new());
    let shop = Shop { hang_in_cancel: Some(Arc::clone(&acted)), ..Shop::new(&dir) };
    let app = app(Arc::clone(&store));
    // `cancel_order` acts and never answers; the run is dropped there (standing in for a crash).
    tokio::select! {
        run = app.runner(&shop).thread("order-4").owner("agent:shop").run(Checkout::default()) => {
            panic!("the run should hang in cancel_order: {:?}", run.map(|r| r.outcome))
        }
        () = acted.notified() => {}
    }
    assert_eq!(store.thread("order-4").unwrap().unwrap().status, ThreadStatus::Compensating);

    // Whether it acted is unknown and it is not idempotent: the resume does not run it again.
    let run = app.runner(&shop).thread("order-4").resume().await.unwrap();
    let Outcome::CompensationFailed { compensation, approval: Some(id), undone: done, .. } = &run.outcome else {
        panic!("expected CompensationFailed with a record, got {:?}", run.outcome)
    };
    assert_eq!(compensation, "cancel_order");
    assert_eq!(triples(done), undone(&REVERSED[..2]));
    let record = store.approval(id).unwrap().unwrap();
    assert_eq!((record.status, record.tool.as_str()), (ApprovalStatus::OutcomeUnknown, "cancel_order"));
    assert_eq!(count(&lines(&dir, "calls.log"), "cancel_order"), 1);

    // A human settles it as done: the resume records it and the saga completes, without running it again.
    let desk = app.approvals(RoleAuthorizer::new().role_for(Risk::Reversible, "ops")).unwrap();
    desk.settle(id, &Approver::new("alice", ["ops"]), Settlement::Succeeded(serde_json::json!({}))).unwrap();
    let run = app.runner(&shop).thread("order-4").resume().await.unwrap();
    let Outcome::Compensated { undone: done, .. } = &run.outcome else {
        panic!("expected Compensated, got {:?}", run.outcome)
    };
    assert_eq!(triples(done), undone(&REVERSED));
    assert_eq!(count(&lines(&dir, "calls.log"), "cancel_order"), 1);
    assert_eq!(count(&lines(&dir, "effects.log"), "cancel ord-1"), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

/// "Run again" written around the desk (a raw store transition with no decider) does not run a
/// compensation cut off mid-call again, as it runs no node's call again.
#[tokio::test]
async fn a_compensation_moved_to_run_again_without_a_decider_is_not_run_again() {
    use agentflow::approval::ApprovalStatus;
    let dir = tempdir("forged");
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let acted = Arc::new(tokio::sync::Notify::new());
    let shop = Shop { hang_in_cancel: Some(Arc::clone(&acted)), ..Shop::new(&dir) };
    let app = app(Arc::clone(&store));
    tokio::select! {
        run = app.runner(&shop).thread("order-6").owner("agent:shop").run(Checkout::default()) => {
            panic!("the run should hang in cancel_order: {:?}", run.map(|r| r.outcome))
        }
        () = acted.notified() => {}
    }
    let run = app.runner(&shop).thread("order-6").resume().await.unwrap();
    let Outcome::CompensationFailed { approval: Some(id), .. } = &run.outcome else {
        panic!("expected CompensationFailed with a record, got {:?}", run.outcome)
    };
    let patch = agentflow_store::ApprovalPatch::by("script", 1);
    store.transition_approval(id, ApprovalStatus::OutcomeUnknown, ApprovalStatus::Approved, patch).unwrap();
    let resumed = app.runner(&shop).thread("order-6").resume().await.unwrap();
    assert_eq!(count(&lines(&dir, "calls.log"), "cancel_order"), 1, "run again on a decision nobody made");
    // The saga ends naming the record (the compensations behind it were made before), not stuck
    // `compensating` on an error no desk decision could clear.
    let Outcome::CompensationFailed { compensation, approval: Some(named), error, .. } = &resumed.outcome else {
        panic!("expected CompensationFailed, got {:?}", resumed.outcome)
    };
    assert_eq!((compensation.as_str(), named), ("cancel_order", id));
    assert!(error.contains("no approver's decision"), "{error}");
    let _ = std::fs::remove_dir_all(&dir);
}

// ---------------------------------------------------------------- a crash during compensation

/// The child process body: runs (or resumes) the workflow on a redb file.
/// Not a test on its own: it only runs when the crash test starts this
/// binary with `AGENTFLOW_SAGA_CHILD` set.
#[tokio::test]
#[ignore = "child process of `sigkill_during_compensation_then_resume_in_a_new_process`"]
async fn saga_child() {
    let Ok(dir) = std::env::var("AGENTFLOW_SAGA_CHILD") else { return };
    let dir = PathBuf::from(dir);
    let resume = std::env::var("AGENTFLOW_SAGA_RESUME").is_ok();
    let store: Arc<dyn Store> = Arc::new(RedbStore::open(dir.join("store.redb")).unwrap());
    let shop = Shop { hang_in_release: !resume, ..Shop::new(&dir) };
    let app = app(store);
    let mut nodes_run = Vec::new();
    let runner = app.runner(&shop).thread("order-k").owner("agent:shop").on_event(|e| {
        if let Event::NodeStarted { node, .. } = e {
            nodes_run.push(node);
        }
    });
    let run = if resume { runner.resume().await } else { runner.run(Checkout::default()).await }.unwrap();
    std::fs::write(dir.join("outcome.json"), serde_json::to_vec(&run.outcome).unwrap()).unwrap();
    std::fs::write(dir.join("nodes_on_resume"), nodes_run.join(",")).unwrap();
}

fn child(dir: &Path, resume: bool) -> Command {
    let mut cmd = own_test(module_path!(), "saga_child");
    cmd.env("AGENTFLOW_SAGA_CHILD", dir).stdout(Stdio::null()).stderr(Stdio::piped());
    if resume {
        cmd.env("AGENTFLOW_SAGA_RESUME", "1");
    }
    cmd
}

#[tokio::test]
async fn sigkill_during_compensation_then_resume_in_a_new_process() {
    let dir = tempdir("sigkill");
    // The first process compensates until `release_inventory` is in flight, then is killed.
    let mut first = child(&dir, false).spawn().unwrap();
    let hanging = dir.join("hanging");
    let mut waited = Duration::ZERO;
    while !hanging.exists() {
        if let Some(status) = first.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(first.stderr.as_mut().unwrap(), &mut err).unwrap();
            panic!("the child ended before the compensation hung ({status}): {err}");
        }
        assert!(waited < Duration::from_secs(120), "the child never reached the compensation");
        std::thread::sleep(Duration::from_millis(20));
        waited += Duration::from_millis(20);
    }
    first.kill().unwrap(); // SIGKILL
    first.wait().unwrap();
    assert!(!dir.join("outcome.json").exists());
    {
        let store = RedbStore::open(dir.join("store.redb")).unwrap();
        assert_eq!(store.thread("order-k").unwrap().unwrap().status, ThreadStatus::Compensating);
    }

    // A new process resumes the thread: it continues compensating.
    let out = child(&dir, true).output().unwrap();
    assert!(out.status.success(), "resume failed: {}", String::from_utf8_lossy(&out.stderr));
    let outcome: Outcome = serde_json::from_slice(&std::fs::read(dir.join("outcome.json")).unwrap()).unwrap();
    let Outcome::Compensated { undone: done, .. } = &outcome else { panic!("expected Compensated, got {outcome:?}") };
    assert_eq!(triples(done), undone(&REVERSED));
    let nodes = std::fs::read_to_string(dir.join("nodes_on_resume")).unwrap();
    assert_eq!(nodes, "", "the resume continued the compensation and ran no node");

    // Every forward call and every compensation acted exactly once. The
    // refund finished before the kill and was not run again; the release
    // was cut off before it acted and ran again with the same key.
    let calls = lines(&dir, "calls.log");
    for (tool, n) in [
        ("create_order", 1),
        ("reserve_inventory", 1),
        ("charge_payment", 1),
        ("ship", 1),
        ("refund_payment", 1),
        ("release_inventory", 2),
        ("cancel_order", 1),
    ] {
        assert_eq!(count(&calls, tool), n, "{tool}: {calls:?}");
    }
    assert_eq!(
        lines(&dir, "effects.log"),
        [
            "create ord-1 2xlamp",
            "reserve 2xlamp",
            "charge ord-1 4200",
            "refund pay-3 4200",
            "release res-9 (2)",
            "cancel ord-1"
        ]
    );
    let store = RedbStore::open(dir.join("store.redb")).unwrap();
    assert_eq!(store.thread("order-k").unwrap().unwrap().status, ThreadStatus::Compensated);
    let audit = store.list_audit("order-k").unwrap();
    let compensated: Vec<&str> = audit
        .iter()
        .filter(|e| e.kind == "saga.compensated")
        .map(|e| e.detail["compensation"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(compensated, ["refund_payment", "release_inventory", "cancel_order"]);
    assert_eq!(audit.iter().filter(|e| e.kind == "effect.rerun").count(), 1);
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A go-ahead of the wrong shape fails the run, spends the answer and leaves the thread waiting
/// for a new one (as the README says): it undoes nothing. It used to count as a failure for good
/// and refund, release and cancel the order.
#[tokio::test]
async fn an_answer_of_the_wrong_shape_undoes_nothing_and_the_thread_waits_for_a_new_one() {
    let dir = tempdir("wrong-shape");
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = confirmed_app(Arc::clone(&store));
    let shop = Shop { ships: true, ..Shop::new(&dir) };
    let run = app.runner(&shop).thread("order-5").run(Checkout::default()).await.unwrap();
    assert!(matches!(run.outcome, Outcome::Interrupted { .. }), "{}", run.outcome);

    let run = app.runner(&shop).thread("order-5").resume_with("yes please").await.unwrap();
    let Outcome::Failed { node, error } = &run.outcome else { panic!("expected Failed, got {}", run.outcome) };
    assert_eq!(node, "confirm");
    assert!(error.to_string().contains("does not have the shape it expects"), "{error}");
    assert_eq!(store.thread("order-5").unwrap().unwrap().status, ThreadStatus::Failed);
    assert_eq!(lines(&dir, "calls.log"), ["create_order", "charge_payment"], "nothing was undone");

    // Answered again with the right shape, the order ships.
    let run = app.runner(&shop).thread("order-5").resume_with(true).await.unwrap();
    assert_eq!(run.outcome, Outcome::Completed);
    assert!(run.state.shipped);
    assert_eq!(lines(&dir, "calls.log"), ["create_order", "charge_payment", "ship"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A thread cancelled while it waits for a go-ahead is compensating; its refund fails, so it
/// stays `compensating`. A value given to it then is refused: the graph does not run again (it
/// used to ship the half-undone order and end `Completed`). `resume` finishes the compensation.
#[tokio::test]
async fn a_compensating_thread_refuses_a_value_and_its_graph_does_not_run_again() {
    let dir = tempdir("compensating-value");
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = confirmed_app(Arc::clone(&store));
    let shop = Shop { ships: true, ..Shop::new(&dir) };
    let run = app.runner(&shop).thread("order-6").run(Checkout::default()).await.unwrap();
    assert!(matches!(run.outcome, Outcome::Interrupted { .. }), "{}", run.outcome);

    shop.refunds_down.store(true, Ordering::SeqCst);
    let cancelled = CancellationToken::new();
    cancelled.cancel();
    let run = app.runner(&shop).thread("order-6").cancel_token(cancelled).resume().await.unwrap();
    assert!(matches!(run.outcome, Outcome::CompensationFailed { .. }), "{}", run.outcome);
    assert_eq!(store.thread("order-6").unwrap().unwrap().status, ThreadStatus::Compensating);

    let refused = app.runner(&shop).thread("order-6").resume_with(true).await;
    assert!(
        matches!(&refused, Err(RunError::NotWaiting { status, .. }) if status.contains("compensating")),
        "{:?}",
        refused.map(|r| r.outcome)
    );
    assert_eq!(count(&lines(&dir, "calls.log"), "ship"), 0, "the graph did not run again");
    assert_eq!(store.thread("order-6").unwrap().unwrap().status, ThreadStatus::Compensating);

    shop.refunds_down.store(false, Ordering::SeqCst);
    let run = app.runner(&shop).thread("order-6").resume().await.unwrap();
    let Outcome::Compensated { undone: done, .. } = &run.outcome else { panic!("{}", run.outcome) };
    assert_eq!(
        triples(done),
        undone(&[("charge", "charge_payment", "refund_payment"), ("create", "create_order", "cancel_order")])
    );
    assert_eq!(count(&lines(&dir, "calls.log"), "ship"), 0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The same through a subgraph: the parent's `resume_with` hands a go-ahead of the wrong shape
/// down to the child that asks. The child fails where it waits, and so does the parent's node:
/// nothing is undone (the parent's order used to be cancelled), and the right answer, given to
/// the parent again, reaches the child.
#[tokio::test]
async fn an_answer_of_the_wrong_shape_to_a_subgraphs_question_undoes_nothing_in_the_parent() {
    let dir = tempdir("wrong-shape-child");
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = confirmed_by_child::graph().app().store(Arc::clone(&store)).policy(RiskPolicy::allow_all());
    let shop = Shop::new(&dir);
    let run = app.runner(&shop).thread("order-7").run(Checkout::default()).await.unwrap();
    assert!(matches!(run.outcome, Outcome::Interrupted { .. }), "{}", run.outcome);

    let run = app.runner(&shop).thread("order-7").resume_with("yes please").await.unwrap();
    let Outcome::Failed { node, error } = &run.outcome else { panic!("expected Failed, got {}", run.outcome) };
    assert_eq!(node, "confirm");
    assert_eq!(error.class, agentflow::ErrorClass::NeedsInput, "{error}");
    assert_eq!(store.thread("order-7").unwrap().unwrap().status, ThreadStatus::Failed);
    assert_eq!(lines(&dir, "calls.log"), ["create_order"], "nothing was undone");

    let run = app.runner(&shop).thread("order-7").resume_with(true).await.unwrap();
    assert_eq!(run.outcome, Outcome::Completed);
    assert!(run.state.shipped);
    assert_eq!(lines(&dir, "calls.log"), ["create_order"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// One node of a step refuses an answer of the wrong shape while another fails for good: the
/// run fails for good (the refusal came first in declaration order, but only a person's new
/// answer would unblock it, and nothing will unblock the other) and the order is undone.
#[tokio::test]
async fn a_failure_for_good_beside_a_refused_answer_in_one_step_undoes_the_order() {
    #[graph(state = Checkout, deps = Shop, start = create)]
    mod both {
        use super::*;

        #[node(goto = [ask, refuse], tools = [create_order])]
        async fn create(_s: &Checkout, cx: &Ctx<Shop>) -> Result<Step<Checkout>, NodeError> {
            cx.run_tool(create_order, serde_json::json!({ "item": "lamp", "qty": 2 })).await?;
            Ok(goto!([ask, refuse], Checkout::update().order_id(Some("ord-1".to_string()))))
        }

        #[node(goto = [END], interrupt)]
        async fn ask(_s: &Checkout, cx: &Ctx<Shop>) -> Result<Step<Checkout>, NodeError> {
            let go: bool = cx.interrupt(serde_json::json!({ "ship": "ord-1" }))?;
            Ok(goto!(END, Checkout::update().shipped(go)))
        }

        /// Asks too (any value will do), then fails for good.
        #[node(goto = [END], interrupt)]
        async fn refuse(_s: &Checkout, cx: &Ctx<Shop>) -> Result<Step<Checkout>, NodeError> {
            let _seen: serde_json::Value = cx.interrupt(serde_json::json!({ "stock": "check" }))?;
            Err(cx.compensate("the warehouse burned down"))
        }
    }
    let dir = tempdir("both");
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = both::graph().app().store(Arc::clone(&store)).policy(RiskPolicy::allow_all());
    let run = app.runner(&Shop::new(&dir)).thread("order-8").run(Checkout::default()).await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{}", run.outcome) };
    let id = |node: &str| pending.iter().find(|p| p.node == node).unwrap().question_id();
    // Each gets an answer of the same shape: `ask` refuses its shape, `refuse` fails for good.
    let answer = |node: &str| {
        let id = id(node);
        let shop = Shop::new(&dir);
        let app = app.clone();
        async move { app.runner(&shop).thread("order-8").resume_answering(&id, "yes please").await.unwrap() }
    };
    let run = answer("ask").await;
    assert!(matches!(run.outcome, Outcome::Interrupted { .. }), "{}", run.outcome);
    let run = answer("refuse").await;
    let Outcome::Compensated { reason, undone: done, .. } = &run.outcome else { panic!("{}", run.outcome) };
    assert!(reason.contains("`refuse`") && reason.contains("burned down"), "{reason}");
    assert_eq!(triples(done), undone(&[("create", "create_order", "cancel_order")]));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Under a worker: a thread waiting for its go-ahead is cancelled from another process's point
/// of view (`cancel_run`); a worker claims the request, and the cancelled run undoes the order,
/// newest call first, each compensation once. The row leaves the queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_cancelling_a_waiting_order_undoes_it() {
    let dir = tempdir("worker-cancel");
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = confirmed_app(Arc::clone(&store));
    app.submit("order-9", &Checkout::default()).unwrap();
    let shop = Arc::new(Shop::new(&dir));
    let stop = CancellationToken::new();
    let worker = agentflow::Worker::new(app.clone(), Arc::clone(&shop)).poll_interval(Duration::from_millis(10));
    let handle = tokio::spawn(worker.run(stop.clone()));
    let began = std::time::Instant::now();
    while store.thread("order-9").unwrap().is_none_or(|t| t.status != ThreadStatus::Interrupted) {
        assert!(began.elapsed() < Duration::from_secs(30), "the run never waited for its go-ahead");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let asked = tokio::task::spawn_blocking({
        let app = app.clone();
        move || app.cancel_run("order-9")
    })
    .await
    .unwrap()
    .unwrap();
    assert!(asked);
    while !app.live_runs().unwrap().is_empty() {
        assert!(began.elapsed() < Duration::from_secs(30), "the cancelled run stayed queued");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop.cancel();
    let report = handle.await.unwrap().unwrap();
    assert_eq!(store.thread("order-9").unwrap().unwrap().status, ThreadStatus::Compensated);
    assert_eq!(
        lines(&dir, "calls.log"),
        ["create_order", "charge_payment", "refund_payment", "cancel_order"],
        "each compensation once, newest first; nothing shipped"
    );
    assert_eq!(report.controlled, 1, "{report:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A compensated order cannot be carried on (`update_state` refuses it), but it can be forked at
/// a checkpoint to run again, as the README says: the new branch runs its steps afresh, ships
/// this time, and completes; the old branch's calls and their compensations stay in the log.
#[tokio::test]
async fn a_compensated_order_forked_at_a_checkpoint_runs_again() {
    let dir = tempdir("fork-compensated");
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = app(Arc::clone(&store));
    let run = app.runner(&Shop::new(&dir)).thread("order-10").run(Checkout::default()).await.unwrap();
    assert!(matches!(run.outcome, Outcome::Compensated { .. }), "{}", run.outcome);
    assert_eq!(store.thread("order-10").unwrap().unwrap().status, ThreadStatus::Compensated);
    let before_deliver = app
        .history("order-10")
        .unwrap()
        .into_iter()
        .find(|c| c.cursor == ["deliver"])
        .expect("the checkpoint before `deliver`")
        .seq;
    app.fork("order-10", before_deliver, "ops").unwrap();
    let shop = Shop { ships: true, ..Shop::new(&dir) };
    let run = app.runner(&shop).thread("order-10").resume().await.unwrap();
    assert_eq!(run.outcome, Outcome::Completed);
    assert!(run.state.shipped);
    let calls = lines(&dir, "calls.log");
    assert_eq!(calls.last().map(String::as_str), Some("ship"));
    assert_eq!(count(&calls, "ship"), 2, "shipping failed once, then ran again on the new branch");
    assert_eq!(count(&calls, "create_order"), 1, "the steps before the fork point are not run again");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A node that fails with a needs-input error of its own (no question asked, no answer refused)
/// fails for good as far as the saga goes: the order is undone, as for any other failure. Only
/// an answer refused for its shape leaves the order waiting.
#[tokio::test]
async fn a_needs_input_failure_that_refused_no_answer_undoes_the_order() {
    #[graph(state = Checkout, deps = Shop, start = create)]
    mod stuck_order {
        use super::*;

        #[node(goto = [address], tools = [create_order])]
        async fn create(_s: &Checkout, cx: &Ctx<Shop>) -> Result<Step<Checkout>, NodeError> {
            cx.run_tool(create_order, serde_json::json!({ "item": "lamp", "qty": 2 })).await?;
            Ok(goto!(address))
        }

        #[node(goto = [END])]
        async fn address(_s: &Checkout) -> Result<Step<Checkout>, NodeError> {
            Err(NodeError::needs_input("no shipping address on file"))
        }
    }
    let dir = tempdir("needs-input");
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = stuck_order::graph().app().store(Arc::clone(&store)).policy(RiskPolicy::allow_all());
    let run = app.runner(&Shop::new(&dir)).thread("order-11").run(Checkout::default()).await.unwrap();
    let Outcome::Compensated { undone: done, .. } = &run.outcome else { panic!("{}", run.outcome) };
    assert_eq!(triples(done), undone(&[("create", "create_order", "cancel_order")]));
    let _ = std::fs::remove_dir_all(&dir);
}

#[graph(state = Checkout, deps = Shop, start = ask)]
mod go_then_stuck {
    use super::*;

    #[node(goto = [check], interrupt)]
    async fn ask(s: &Checkout, cx: &Ctx<Shop>) -> Result<Step<Checkout>, NodeError> {
        let go: bool = cx.interrupt(serde_json::json!({ "ship": s.order_id }))?;
        Ok(goto!(check, Checkout::update().shipped(go)))
    }

    #[node(goto = [END])]
    async fn check(_s: &Checkout) -> Result<Step<Checkout>, NodeError> {
        Err(NodeError::needs_input("no shipping address on file"))
    }
}

#[graph(state = Checkout, deps = Shop, start = create)]
mod stuck_parent {
    use super::*;

    #[node(goto = [confirm], tools = [create_order])]
    async fn create(_s: &Checkout, cx: &Ctx<Shop>) -> Result<Step<Checkout>, NodeError> {
        cx.run_tool(create_order, serde_json::json!({ "item": "lamp", "qty": 2 })).await?;
        Ok(goto!(confirm))
    }

    #[node(goto = [END], subgraphs = [go_then_stuck])]
    async fn confirm(s: &Checkout, cx: &Ctx<Shop>) -> Result<Step<Checkout>, NodeError> {
        cx.subgraph(go_then_stuck::graph(), s.clone()).await?;
        Ok(goto!(END))
    }
}

/// The child takes the go-ahead (it decodes), commits that step, and a later step of the child
/// fails with a needs-input error of its own: the child moved on, so the parent no longer waits
/// on the question it answered (nobody would read a second answer), and its failure undoes the
/// order as any other.
#[tokio::test]
async fn a_child_that_took_the_answer_and_failed_later_leaves_no_question_behind() {
    let dir = tempdir("child-moved-on");
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = stuck_parent::graph().app().store(Arc::clone(&store)).policy(RiskPolicy::allow_all());
    let shop = Shop::new(&dir);
    let run = app.runner(&shop).thread("order-12").run(Checkout::default()).await.unwrap();
    assert!(matches!(run.outcome, Outcome::Interrupted { .. }), "{}", run.outcome);
    let run = app.runner(&shop).thread("order-12").resume_with(true).await.unwrap();
    let Outcome::Compensated { undone: done, .. } = &run.outcome else { panic!("{}", run.outcome) };
    assert_eq!(triples(done), undone(&[("create", "create_order", "cancel_order")]));
    assert!(
        app.pending("order-12").unwrap().iter().all(|p| p.kind != agentflow::PendingKind::Interrupt),
        "no question left behind: {:?}",
        app.pending("order-12")
    );
    let _ = std::fs::remove_dir_all(&dir);
}
