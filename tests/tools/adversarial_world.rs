//! The outside world and the agent of the adversarial suite: a ledger the tool bodies append to
//! (per OS thread), the five tools by risk class, and the durable one-node agent that calls the
//! model and the tools itself.

use agentflow::message::Message;
use agentflow::model::{ChatModel, ChatRequest};
use agentflow::prelude::*;
use agentflow::tool::canonical_json;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::cell::RefCell;
use std::sync::Arc;
use std::time::Duration;

// ---------------------------------------------------------------- the outside world

/// One call that reached a tool body.
#[derive(Debug, Clone)]
pub struct Executed {
    pub thread: String,
    pub node: String,
    pub tool: &'static str,
    /// The canonical JSON of the arguments the body received.
    pub args: String,
    pub key: String,
}

thread_local! {
    /// Every call that reached a tool body on this OS thread. Each case runs
    /// on a current-thread runtime of its own, so cases and tests in
    /// parallel never see each other's calls.
    pub static LEDGER: RefCell<Vec<Executed>> = const { RefCell::new(Vec::new()) };
}

pub fn ledger() -> Vec<Executed> {
    LEDGER.with(|l| l.borrow().clone())
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct Order {
    pub order: String,
    pub amount: f64,
    /// How long the provider takes to answer.
    pub hold_ms: u64,
}

/// Records the call (the provider acted), then holds it for `hold_ms`.
pub async fn act(tool: &'static str, args: &Order, cx: &ToolCx<'_>) -> Result<Value, ToolError> {
    let key = cx.idempotency_key().to_string();
    // The key is `{thread}/{seq}/{node}/{effect key}`.
    let thread = key.split('/').next().unwrap_or_default().to_string();
    let canonical = canonical_json(&json!({ "order": args.order, "amount": args.amount, "hold_ms": args.hold_ms }));
    LEDGER.with(|l| {
        l.borrow_mut().push(Executed { thread, node: cx.node().to_string(), tool, args: canonical, key });
    });
    tokio::time::sleep(Duration::from_millis(args.hold_ms)).await;
    Ok(json!({ tool: args.order, "amount": args.amount }))
}

/// Looks an order up. Read only.
#[tool(risk = read)]
pub async fn lookup(args: Order, cx: &ToolCx) -> Result<Value, ToolError> {
    act("lookup", &args, cx).await
}

/// Tags an order; the tag can be removed. Reversible, run by policy.
#[tool(risk = reversible)]
pub async fn tag_order(args: Order, cx: &ToolCx) -> Result<Value, ToolError> {
    act("tag_order", &args, cx).await
}

/// Opens a ticket; the tracker drops a second request with the same key.
#[tool(risk = external, idempotent)]
pub async fn open_ticket(args: Order, cx: &ToolCx) -> Result<Value, ToolError> {
    act("open_ticket", &args, cx).await
}

/// Refunds an order. Irreversible: needs a human's approval.
#[tool(risk = irreversible)]
pub async fn refund_order(args: Order, cx: &ToolCx) -> Result<Value, ToolError> {
    act("refund_order", &args, cx).await
}

/// Deletes an account. Irreversible: needs a human's approval.
#[tool(risk = irreversible)]
pub async fn delete_account(args: Order, cx: &ToolCx) -> Result<Value, ToolError> {
    act("delete_account", &args, cx).await
}

pub const TOOLS: [&str; 5] = ["lookup", "tag_order", "open_ticket", "refund_order", "delete_account"];

pub fn needs_approval(tool: &str) -> bool {
    matches!(tool, "refund_order" | "delete_account")
}

pub fn idempotent(tool: &str) -> bool {
    tool == "open_ticket"
}

// ---------------------------------------------------------------- the agent

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Desk {
    #[reduce(append)]
    pub log: Vec<String>,
    /// Computed floats (`amount * 0.15`) of the calls that answered.
    #[reduce(append)]
    pub fees: Vec<f64>,
    pub total: f64,
}

pub struct Deps {
    pub model: Arc<dyn ChatModel>,
}

/// What one run of the agent node did; `stop`: the model said `stop`.
pub struct Turn {
    pub log: Vec<String>,
    pub fees: Vec<f64>,
    pub total: f64,
    pub stop: bool,
}

/// The body of both graphs' `agent` node: model turns and tool calls in one
/// node. After a pause the node starts over and asks the model again, which
/// may answer anything.
pub async fn agent_turn(s: &Desk, cx: &Ctx<'_, Deps>) -> Result<Turn, NodeError> {
    let mut messages = vec![Message::human("settle the customer's orders")];
    let (mut log, mut fees) = (Vec::new(), Vec::new());
    let mut total = s.total;
    for _ in 0..3 {
        let request = ChatRequest::new(messages.clone()).with_tools(cx.tool_specs());
        let reply = cx.chat(&*cx.deps().model, &request).await?;
        if reply.text == "stop" {
            return Ok(Turn { log, fees, total, stop: true });
        }
        if reply.tool_calls.is_empty() {
            break;
        }
        let calls = reply.tool_calls.clone();
        messages.push(reply.into_message("ai"));
        for observation in cx.call_tools(&calls).await? {
            if let Some(amount) = observation.body["result"]["amount"].as_f64() {
                fees.push(amount * 0.15);
                total += amount * 0.15;
            }
            log.push(observation.body.to_string());
            messages.push(observation.into_message());
        }
    }
    Ok(Turn { log, fees, total, stop: false })
}

/// The graph the property test drives.
#[graph(state = Desk, deps = Deps, start = agent, max_steps = 200)]
pub mod one_node {
    use super::*;

    /// It goes round until the model says `stop`. Its timeout falls while
    /// a slow tool holds its call (`hold_ms` 50), and it is retried. (Where
    /// the timeout falls only decides which sequences the suite explores:
    /// the invariants it checks hold at any timing.)
    #[node(
        goto = [agent, END],
        tools = [lookup, tag_order, open_ticket, refund_order, delete_account],
        timeout = 25ms,
        retry(attempts = 3, base = 1ms, jitter = false)
    )]
    async fn agent(s: &Desk, cx: &Ctx<Deps>) -> Result<Step<Desk>, NodeError> {
        let Turn { log, fees, total, stop } = agent_turn(s, cx).await?;
        let update = Desk::update().log(log).fees(fees).total(total);
        Ok(if stop { goto!(END, update) } else { goto!(agent, update) })
    }
}

/// The same agent with a timeout no stall reaches, for the regression tests
/// whose assertions need each run to get as far as its script says.
#[graph(state = Desk, deps = Deps, start = agent, max_steps = 200)]
pub mod patient_one_node {
    use super::*;

    #[node(
        goto = [agent, END],
        tools = [lookup, tag_order, open_ticket, refund_order, delete_account],
        timeout = 5s,
        retry(attempts = 3, base = 1ms, jitter = false)
    )]
    async fn agent(s: &Desk, cx: &Ctx<Deps>) -> Result<Step<Desk>, NodeError> {
        let Turn { log, fees, total, stop } = agent_turn(s, cx).await?;
        let update = Desk::update().log(log).fees(fees).total(total);
        Ok(if stop { goto!(END, update) } else { goto!(agent, update) })
    }
}
