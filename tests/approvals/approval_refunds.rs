//! The refund fixtures of the approval tests: the tools (a ledger of the refunds that ran), the
//! ReAct refund bot and its scripted model, the approvers, and a one-node pay graph.

use crate::support::stores::store;
use agentflow::approval::{Approver, RoleAuthorizer};
use agentflow::message::Role;
use agentflow::model::{ChatReply, ChatRequest, ScriptedModel};
use agentflow::prebuilt::react::{ReactDeps, ReactState};
use agentflow::prelude::*;
use agentflow::tool::Risk;
use agentflow::{PendingKind, Run};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

// ---------------------------------------------------------------- tools

/// Every refund that actually ran: (order, amount, idempotency key).
pub static LEDGER: Mutex<Vec<(String, u32, String)>> = Mutex::new(Vec::new());

pub fn refunds_for(order: &str) -> Vec<u32> {
    LEDGER.lock().unwrap().iter().filter(|(o, ..)| o == order).map(|(_, a, _)| *a).collect()
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct OrderQuery {
    pub order_id: String,
}

/// Looks up an order: its total and status.
#[tool(risk = read)]
pub async fn query_order(args: OrderQuery) -> Result<Value, ToolError> {
    Ok(json!({ "order_id": args.order_id, "total": 299, "status": "delivered" }))
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct Refund {
    pub order_id: String,
    /// Whole currency units.
    pub amount: u32,
}

/// Refunds `amount` on an order. Irreversible.
#[tool(risk = irreversible)]
pub async fn process_refund(args: Refund, cx: &ToolCx) -> Result<Value, ToolError> {
    LEDGER.lock().unwrap().push((args.order_id.clone(), args.amount, cx.idempotency_key().to_string()));
    Ok(json!({ "refunded": args.amount, "order_id": args.order_id }))
}

/// Orders whose refund fails transiently once more.
pub static FLAKY: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Refunds, but the payment provider times out on the first try.
#[tool(risk = irreversible)]
pub async fn flaky_refund(args: Refund, cx: &ToolCx) -> Result<Value, ToolError> {
    {
        let mut flaky = FLAKY.lock().unwrap();
        if let Some(i) = flaky.iter().position(|o| *o == args.order_id) {
            flaky.remove(i);
            return Err(ToolError::Transient("payment provider timed out".into()));
        }
    }
    LEDGER.lock().unwrap().push((args.order_id.clone(), args.amount, cx.idempotency_key().to_string()));
    Ok(json!({ "refunded": args.amount }))
}

/// Orders whose refund the provider refuses for good, once.
pub static BROKEN: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Refunds, but the provider may refuse it with a fatal error.
#[tool(risk = irreversible)]
pub async fn fragile_refund(args: Refund, cx: &ToolCx) -> Result<Value, ToolError> {
    {
        let mut broken = BROKEN.lock().unwrap();
        if let Some(i) = broken.iter().position(|o| *o == args.order_id) {
            broken.remove(i);
            return Err(ToolError::Fatal("account closed".into()));
        }
    }
    LEDGER.lock().unwrap().push((args.order_id.clone(), args.amount, cx.idempotency_key().to_string()));
    Ok(json!({ "refunded": args.amount }))
}

agentflow::react_agent!(pub mod refunds, tools = [query_order, process_refund], max_steps = 16);

// ---------------------------------------------------------------- helpers

pub const ROLE: &str = "refund-approver";
pub const OWNER: &str = "agent:refund-bot";

pub fn authorizer() -> RoleAuthorizer {
    RoleAuthorizer::new().role_for(Risk::Irreversible, ROLE).role_for(Risk::External, ROLE)
}

pub fn alice() -> Approver {
    Approver::new("alice", [ROLE])
}

pub fn bob() -> Approver {
    Approver::new("bob", [ROLE])
}

pub fn react() -> App<ReactState, ReactDeps> {
    refunds::graph().app().store(store())
}

/// The model's last word: reads the last tool observation and says what happened.
pub fn answer(req: &ChatRequest) -> Result<ChatReply, agentflow::model::ModelError> {
    let last = req.messages.iter().rev().find(|m| m.role == Role::Tool).expect("a tool result");
    let body: Value = serde_json::from_str(&last.content).unwrap();
    Ok(ChatReply::text(if body["ok"] == json!(true) {
        format!("Done: {}", body["result"])
    } else {
        format!("No refund ({}): {}", body["code"].as_str().unwrap(), body["detail"].as_str().unwrap())
    }))
}

/// Looks the order up, asks to refund `amount`, then reports what happened.
pub fn bot(order: &str, amount: u32) -> ReactDeps {
    let model = ScriptedModel::new()
        .reply_tool_call("query_order", json!({ "order_id": order }))
        .reply_tool_call("process_refund", json!({ "order_id": order, "amount": amount }))
        .respond_with(answer);
    ReactDeps::new(Arc::new(model))
}

pub async fn start(graph: &App<ReactState, ReactDeps>, deps: &ReactDeps, thread: &str) -> Run<ReactState> {
    graph.runner(deps).thread(thread).owner(OWNER).run(ReactState::ask(format!("refund {thread}"))).await.unwrap()
}

/// The approval a paused run waits for.
pub fn waiting_for<S>(run: &Run<S>) -> String {
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("not paused: {:?}", run.outcome) };
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(pending[0].kind, PendingKind::Approval);
    pending[0].payload["approval"].as_str().expect("an approval id").to_string()
}

pub fn last_observation(state: &ReactState) -> Value {
    let m = state.messages.iter().rev().find(|m| m.role == Role::Tool).expect("a tool result");
    serde_json::from_str(&m.content).unwrap()
}

pub fn kinds(graph: &App<ReactState, ReactDeps>, thread: &str) -> Vec<String> {
    graph.audit_log(thread).unwrap().into_iter().map(|e| e.kind).collect()
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Pay {
    pub order: String,
    pub amount: u32,
    pub receipt: Option<Value>,
}

#[derive(Default)]
pub struct PayDeps {
    /// Fail this many times after the refund returned (a crash after the effect).
    pub fail_after: AtomicU32,
    /// Ask for this much more on every run of the node after the first.
    pub drift: u32,
    pub runs: AtomicU32,
}

#[graph(state = Pay, deps = PayDeps, start = pay)]
pub mod pay_flow {
    use super::*;

    /// Calls the refund from its own code: the same gateway as a model's call.
    #[node(goto = [END], tools = [process_refund])]
    async fn pay(s: &Pay, cx: &Ctx<PayDeps>) -> Result<Step<Pay>, NodeError> {
        let deps = cx.deps();
        let runs = deps.runs.fetch_add(1, Ordering::SeqCst);
        let amount = s.amount + if runs > 0 { deps.drift } else { 0 };
        let obs = cx.run_tool(process_refund, json!({ "order_id": s.order, "amount": amount })).await?;
        if deps.fail_after.load(Ordering::SeqCst) > 0 {
            deps.fail_after.fetch_sub(1, Ordering::SeqCst);
            return Err(NodeError::fatal("crashed after the refund"));
        }
        Ok(goto!(END, Pay::update().receipt(Some(obs.body))))
    }
}

pub fn pay_graph() -> App<Pay, PayDeps> {
    pay_flow::graph().app().store(store())
}

pub fn pay_input(order: &str, amount: u32) -> Pay {
    Pay { order: order.into(), amount, receipt: None }
}
