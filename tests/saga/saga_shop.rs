//! The order workflow of the saga tests: create order -> reserve inventory ->
//! charge payment -> ship, each step with the tool that undoes it, over an outside world that
//! is a directory: every call that reaches a tool body appends a line to `calls.log`, and every
//! change a tool makes appends one to `effects.log` (an idempotent tool makes its change once
//! per key), so the tests count what ran and what acted, across processes.

use agentflow::prelude::*;
use agentflow::saga::{Compensates, Undone};
use agentflow::tool::RiskPolicy;
use agentflow::{CancellationToken, Store};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

// ---------------------------------------------------------------- the outside world

pub struct Shop {
    pub dir: PathBuf,
    /// The payment provider refuses refunds while set.
    pub refunds_down: AtomicBool,
    /// The first call of `release_inventory` in this process hangs before it acts.
    pub hang_in_release: bool,
    /// `ship` succeeds (a carrier serves the address) while set.
    pub ships: bool,
    /// Cancels the run's token from within the node named, which then goes on as usual.
    pub cancel: Option<(CancellationToken, &'static str)>,
    /// The first call of `cancel_order` acts, notifies this, and never answers.
    pub hang_in_cancel: Option<Arc<tokio::sync::Notify>>,
}

impl Shop {
    pub fn new(dir: &Path) -> Self {
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
    pub fn cancel_from(&self, node: &str) {
        if let Some((token, from)) = &self.cancel
            && *from == node
        {
            token.cancel();
        }
    }

    pub fn append(&self, file: &str, line: &str) {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(self.dir.join(file)).unwrap();
        // One write call, so a SIGKILL cannot leave half a line (writeln! may make two).
        f.write_all(format!("{line}\n").as_bytes()).unwrap();
        f.sync_all().unwrap();
    }

    /// Records a call reaching `tool`'s body.
    pub fn called(&self, tool: &str) {
        self.append("calls.log", tool);
    }

    /// Makes `change`; with a key, only the first request with that key acts.
    pub fn act(&self, change: &str, key: Option<&str>) {
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

pub fn lines(dir: &Path, file: &str) -> Vec<String> {
    std::fs::read_to_string(dir.join(file)).unwrap_or_default().lines().map(str::to_string).collect()
}

// ---------------------------------------------------------------- tools

#[derive(Deserialize, Serialize, schemars::JsonSchema)]
pub struct NewOrder {
    pub item: String,
    pub qty: u32,
}

#[derive(Deserialize, Serialize)]
pub struct Order {
    pub order_id: String,
}

#[derive(Deserialize, Serialize, schemars::JsonSchema)]
pub struct OrderRef {
    pub order_id: String,
}

#[derive(Deserialize, Serialize, schemars::JsonSchema)]
pub struct Reserve {
    pub item: String,
    pub qty: u32,
}

#[derive(Deserialize, Serialize)]
pub struct Reservation {
    pub reservation: String,
}

#[derive(Deserialize, Serialize, schemars::JsonSchema)]
pub struct Release {
    pub reservation: String,
    pub qty: u32,
}

#[derive(Deserialize, Serialize, schemars::JsonSchema)]
pub struct Charge {
    pub order_id: String,
    pub cents: u64,
}

#[derive(Deserialize, Serialize)]
pub struct Payment {
    pub payment_id: String,
    pub cents: u64,
}

#[derive(Deserialize, Serialize, schemars::JsonSchema)]
pub struct Refund {
    pub payment_id: String,
    pub cents: u64,
}

/// Creates an order.
#[tool(risk = reversible, compensate = cancel_order)]
pub async fn create_order(args: NewOrder, cx: &ToolCx<Shop>) -> Result<Order, ToolError> {
    cx.deps().called("create_order");
    cx.deps().act(&format!("create ord-1 {}x{}", args.qty, args.item), None);
    Ok(Order { order_id: "ord-1".into() })
}

/// Cancels an order.
#[tool(risk = reversible)]
pub async fn cancel_order(args: OrderRef, cx: &ToolCx<Shop>) -> Result<(), ToolError> {
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
pub async fn reserve_inventory(args: Reserve, cx: &ToolCx<Shop>) -> Result<Reservation, ToolError> {
    cx.deps().called("reserve_inventory");
    cx.deps().act(&format!("reserve {}x{}", args.qty, args.item), None);
    Ok(Reservation { reservation: "res-9".into() })
}

/// Releases reserved stock; the warehouse deduplicates by idempotency key.
#[tool(risk = reversible, idempotent)]
pub async fn release_inventory(args: Release, cx: &ToolCx<Shop>) -> Result<(), ToolError> {
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
pub async fn charge_payment(args: Charge, cx: &ToolCx<Shop>) -> Result<Payment, ToolError> {
    cx.deps().called("charge_payment");
    cx.deps().act(&format!("charge {} {}", args.order_id, args.cents), None);
    Ok(Payment { payment_id: "pay-3".into(), cents: args.cents })
}

/// Refunds a payment; the provider deduplicates by idempotency key.
#[tool(risk = external, idempotent)]
pub async fn refund_payment(args: Refund, cx: &ToolCx<Shop>) -> Result<(), ToolError> {
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
    pub order_id: String,
}

/// Ships an order: the carrier refuses it.
#[tool(risk = external)]
pub async fn ship(_args: Parcel, cx: &ToolCx<Shop>) -> Result<(), ToolError> {
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
    pub order_id: Option<String>,
    pub shipped: bool,
}

#[graph(state = Checkout, deps = Shop, start = create)]
pub mod checkout {
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
pub mod confirmed {
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
pub mod go_ahead {
    use super::*;

    #[node(goto = [END], interrupt)]
    async fn ask(s: &Checkout, cx: &Ctx<Shop>) -> Result<Step<Checkout>, NodeError> {
        let go: bool = cx.interrupt(serde_json::json!({ "ship": s.order_id }))?;
        Ok(goto!(END, Checkout::update().shipped(go)))
    }
}

#[graph(state = Checkout, deps = Shop, start = create)]
pub mod confirmed_by_child {
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

pub fn confirmed_app(store: Arc<dyn Store>) -> App<Checkout, Shop> {
    confirmed::graph().app().store(store).policy(RiskPolicy::allow_all())
}

pub fn app(store: Arc<dyn Store>) -> App<Checkout, Shop> {
    checkout::graph().app().store(store).policy(RiskPolicy::allow_all())
}

pub fn undone(pairs: &[(&str, &str, &str)]) -> Vec<(String, String, String)> {
    pairs.iter().map(|(n, t, c)| (n.to_string(), t.to_string(), c.to_string())).collect()
}

pub fn triples(u: &[Undone]) -> Vec<(String, String, String)> {
    u.iter().map(|u| (u.node.clone(), u.tool.clone(), u.compensation.clone())).collect()
}

pub const REVERSED: [(&str, &str, &str); 3] = [
    ("charge", "charge_payment", "refund_payment"),
    ("reserve", "reserve_inventory", "release_inventory"),
    ("create", "create_order", "cancel_order"),
];

pub fn count(v: &[String], what: &str) -> usize {
    v.iter().filter(|l| *l == what).count()
}
