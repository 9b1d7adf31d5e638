//! A refund agent whose irreversible tool waits for a human: the approval
//! gateway at the tool boundary, decided through an `ApprovalDesk`.
//!
//! `cargo run --example refund_approval`
//!
//! A ReAct agent (`react_agent!`) has `query_order` (risk `read`: runs at
//! once) and `process_refund(order_id, amount)` (risk `irreversible`: under
//! `RiskPolicy::default()` it needs an approval). Six scenarios, each on its
//! own thread in one store (a temp file, deleted at the end): approved,
//! edited (299 -> 199), rejected (the model re-plans), a replayed approval,
//! tampered arguments and an expired approval. The audit log closes the run.
//!
//! The model is `ScriptedModel`, a deterministic test double that reads the
//! conversation and follows a fixed plan; it is not a language model. The
//! payment provider is a stand-in that records refunds; `process_refund`
//! reaches it through the graph's deps (`RefundDeps`), not a global.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentflow::approval::{ApprovalArgs, ApprovalDesk, ApprovalPatch, ApprovalStatus, Approver, RoleAuthorizer};
use agentflow::message::{Role, ToolCall};
use agentflow::model::{ChatReply, ChatRequest, ModelError, ScriptedModel};
use agentflow::prebuilt::react::{ReactDeps, ReactState};
use agentflow::prelude::*;
use agentflow::tool::RiskPolicy;
use agentflow::{PendingKind, RedbStore, Run, Store};
use serde::Deserialize;
use serde_json::{Value, json};

// ---------------------------------------------------------------- tools

#[derive(Deserialize, schemars::JsonSchema)]
pub struct OrderQuery {
    /// The order, e.g. `ORD-1001`.
    order_id: String,
}

/// Looks up an order: what was paid, and when it was delivered.
#[tool(risk = read)]
async fn query_order(args: OrderQuery) -> Result<Value, ToolError> {
    Ok(json!({ "order_id": args.order_id, "paid": 299, "currency": "EUR", "delivered_days_ago": 12 }))
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct Refund {
    /// The order to refund.
    order_id: String,
    /// Whole currency units.
    amount: u32,
}

/// The payment provider's client, in a real agent an HTTP client with its
/// credentials; here it records every refund that actually ran.
#[derive(Default)]
pub struct Payments {
    executed: Mutex<Vec<(String, u32)>>,
}

impl Payments {
    fn refund(&self, order: &str, amount: u32) {
        self.executed.lock().unwrap().push((order.to_string(), amount));
    }

    fn executed(&self, order: &str) -> Vec<u32> {
        self.executed.lock().unwrap().iter().filter(|(o, _)| o == order).map(|(_, a)| *a).collect()
    }
}

/// The agent's deps: the model (for the ReAct loop) and what its tools reach.
pub struct RefundDeps {
    react: ReactDeps,
    payments: Payments,
}

impl AsRef<ReactDeps> for RefundDeps {
    fn as_ref(&self) -> &ReactDeps {
        &self.react
    }
}

/// Refunds `amount` on an order. Irreversible: money leaves the company.
#[tool(risk = irreversible)]
async fn process_refund(args: Refund, cx: &ToolCx<RefundDeps>) -> Result<Value, ToolError> {
    cx.deps().payments.refund(&args.order_id, args.amount);
    println!(
        "    [payments] REFUND EXECUTED: {} amount {} (idempotency key {})",
        args.order_id,
        args.amount,
        cx.idempotency_key()
    );
    Ok(json!({ "refunded": args.amount, "order_id": args.order_id }))
}

agentflow::react_agent!(pub mod refund_agent, deps = RefundDeps, tools = [query_order, process_refund], max_steps = 16);

// ---------------------------------------------------------------- the scripted model

/// What the test double does next, read off the conversation: look the order
/// up, ask for the refund the customer wants, then say what happened.
fn plan(req: &ChatRequest) -> Result<ChatReply, ModelError> {
    let question = &req.messages.iter().find(|m| m.role == Role::Human).expect("a question").content;
    let word = |prefix: &str| {
        question
            .split_whitespace()
            .find_map(|w| w.strip_prefix(prefix))
            .map(|w| w.trim_end_matches(['.', ',', ')']).to_string())
    };
    let order = word("order=").unwrap_or_default();
    let amount: u32 = word("amount=").and_then(|a| a.parse().ok()).unwrap_or(0);
    let call = |name: &str, args: Value| {
        let id = format!("call_{}", req.messages.len());
        Ok(ChatReply { tool_calls: vec![ToolCall::new(id, name, args)], ..ChatReply::default() })
    };
    let Some(last) = req.messages.last().filter(|m| m.role == Role::Tool) else {
        return call("query_order", json!({ "order_id": order }));
    };
    // Which tool this result answers.
    let tool = req
        .messages
        .iter()
        .flat_map(|m| &m.tool_calls)
        .find(|c| Some(&c.id) == last.tool_call_id.as_ref())
        .map_or("", |c| c.name.as_str());
    let body: Value = serde_json::from_str(&last.content).unwrap_or(Value::Null);
    if tool == "query_order" {
        return call("process_refund", json!({ "order_id": order, "amount": amount }));
    }
    let detail = body["detail"].as_str().unwrap_or_default();
    let text = match body["code"].as_str() {
        None => format!("Refunded {} EUR on {order}.", body["result"]["refunded"]),
        Some("REJECTED") => {
            format!("I have not refunded {order}: the refund was declined ({detail}). I told the customer.")
        }
        Some("APPROVAL_EXPIRED") => format!("Nothing was refunded on {order}: the approval expired. I will ask again."),
        Some(code) => format!("Nothing was refunded on {order}: {code} ({detail})."),
    };
    Ok(ChatReply::text(text))
}

// ---------------------------------------------------------------- helpers

pub const OWNER: &str = "agent:refund-bot";

/// The agent, under `RiskPolicy::default()`: `process_refund` waits for an approval.
pub fn agent() -> App<ReactState, RefundDeps> {
    refund_agent::graph().app().policy(RiskPolicy::default())
}

/// The agent's deps: the scripted model and the stand-in payment provider.
pub fn deps() -> RefundDeps {
    RefundDeps {
        react: ReactDeps::new(Arc::new(ScriptedModel::new().respond_with(plan))),
        payments: Payments::default(),
    }
}

/// Holders of `refund-approver` decide irreversible calls.
pub fn authorizer() -> RoleAuthorizer {
    RoleAuthorizer::new().role_for(Risk::Irreversible, "refund-approver")
}

pub fn alice() -> Approver {
    Approver::new("alice", ["refund-approver"])
}

pub fn question(order: &str, amount: u32) -> ReactState {
    ReactState::ask(format!("Customer writes: please refund order={order} amount={amount}."))
}

/// Starts a thread and prints what it waits for; returns the approval id.
async fn start(
    graph: &App<ReactState, RefundDeps>,
    deps: &RefundDeps,
    thread: &str,
    order: &str,
    amount: u32,
) -> String {
    let run = graph.runner(deps).thread(thread).owner(OWNER).run(question(order, amount)).await.expect("run");
    println!("  run `{thread}`: {}", run.outcome);
    paused_for(&run).expect("a pause for approval")
}

fn paused_for(run: &Run<ReactState>) -> Option<String> {
    let Outcome::Interrupted { pending, .. } = &run.outcome else { return None };
    let p = pending.iter().find(|p| p.kind == PendingKind::Approval)?;
    println!(
        "  waiting for approval {}: {} {} (risk {})",
        p.payload["approval"].as_str()?,
        p.payload["tool"].as_str()?,
        p.payload["args"],
        p.payload["risk"].as_str()?
    );
    Some(p.payload["approval"].as_str()?.to_string())
}

async fn resume(graph: &App<ReactState, RefundDeps>, deps: &RefundDeps, thread: &str) -> Run<ReactState> {
    let run = graph.runner(deps).thread(thread).resume().await.expect("resume");
    println!("  resume `{thread}`: {}", run.outcome);
    run
}

fn last_observation(run: &Run<ReactState>) -> String {
    run.state.messages.iter().rev().find(|m| m.role == Role::Tool).map_or_else(String::new, |m| m.content.clone())
}

fn report(run: &Run<ReactState>, desk: &ApprovalDesk, payments: &Payments, id: &str, order: &str) {
    println!("  the model saw: {}", last_observation(run));
    println!("  answer: {}", run.state.answer.as_deref().unwrap_or("(none)"));
    let status = desk.get(id).ok().flatten().map_or("?".to_string(), |r| r.status.to_string());
    println!("  approval {id}: {status}; refunds executed on {order}: {:?}", payments.executed(order));
}

fn short(hash: &str) -> &str {
    &hash[..12.min(hash.len())]
}

// ---------------------------------------------------------------- the scenarios

#[tokio::main]
async fn main() {
    let path = std::env::temp_dir().join(format!("agentflow-refund-{}.redb", std::process::id()));
    let store = Arc::new(RedbStore::open(&path).expect("open the store"));
    let shared: Arc<dyn Store> = store.clone();
    let graph = agent().store(Arc::clone(&shared));
    let authorizer = authorizer();
    let desk = graph.approvals(authorizer.clone()).expect("the graph has a store");
    let deps = deps();
    let payments = &deps.payments;

    println!("refund_approval: a ReAct agent whose irreversible tool waits for a human");
    println!("  model: {} (a deterministic test double, not an LLM)", agentflow::model::SCRIPTED_MODEL_NAME);
    println!("  policy: RiskPolicy::default(): query_order (read) runs, process_refund (irreversible) needs approval");
    println!("  approvers: alice holds `refund-approver`; the requester ({OWNER}) may not approve itself");
    println!("  store: {} (temporary)", path.display());

    println!("\n== 1. approved: the refund runs once");
    let id1 = start(&graph, &deps, "approved", "ORD-1001", 299).await;
    println!("  executed so far: {:?} (nothing runs before a decision)", payments.executed("ORD-1001"));
    match desk.approve(&id1, &Approver::new("ivan", ["support"])) {
        Err(e) => println!("  ivan (role support) tries to approve: refused: {e}"),
        Ok(_) => unreachable!("ivan has no approver role"),
    }
    match desk.approve(&id1, &Approver::new(OWNER, ["refund-approver"])) {
        Err(e) => println!("  the agent tries to approve itself: refused: {e}"),
        Ok(_) => unreachable!("self-approval"),
    }
    let r = desk.approve(&id1, &alice()).expect("alice may approve");
    println!("  alice approves: {}", r.status);
    let run = resume(&graph, &deps, "approved").await;
    report(&run, &desk, payments, &id1, "ORD-1001");

    println!("\n== 2. edited: the model asks 299, the approver edits to 199");
    let id2 = start(&graph, &deps, "edited", "ORD-1002", 299).await;
    let before = desk.get(&id2).unwrap().unwrap();
    match desk.edit(&id2, &alice(), json!({ "order_id": "ORD-1002", "amount": "199 EUR" })) {
        Err(e) => println!("  alice edits with a malformed amount: refused: {e}"),
        Ok(_) => unreachable!("invalid edit"),
    }
    let r = desk.edit(&id2, &alice(), json!({ "order_id": "ORD-1002", "amount": 199 })).expect("a valid edit");
    println!(
        "  alice edits: {} with {} (hash {}.., was {}..)",
        r.status,
        r.args,
        short(&r.args_hash),
        short(&before.args_hash)
    );
    let run = resume(&graph, &deps, "edited").await;
    report(&run, &desk, payments, &id2, "ORD-1002");
    println!("  executed amount: {:?}", payments.executed("ORD-1002").first());

    println!("\n== 3. rejected: the reason reaches the model, which answers without refunding");
    let id3 = start(&graph, &deps, "rejected", "ORD-1003", 299).await;
    desk.reject(&id3, &alice(), "the customer already got a voucher for this order").unwrap();
    println!("  alice rejects: the customer already got a voucher for this order");
    let run = resume(&graph, &deps, "rejected").await;
    report(&run, &desk, payments, &id3, "ORD-1003");

    println!("\n== 4. replayed approval: a used approval is refused, the refund does not run twice");
    for who in [alice(), Approver::new("bob", ["refund-approver"])] {
        match desk.approve(&id1, &who) {
            Err(e) => println!("  {} approves {id1} again: refused: {e}", who.id),
            Ok(_) => unreachable!("replay"),
        }
    }
    match graph.runner(&deps).thread("approved").resume().await {
        Err(e) => println!("  resume `approved` again: refused: {e}"),
        Ok(run) => println!("  resume `approved` again: {}", run.outcome),
    }
    println!("  refunds executed on ORD-1001: {:?} (once)", payments.executed("ORD-1001"));

    println!("\n== 5a. tampered: the stored approval's arguments changed behind the desk's back");
    let id5 = start(&graph, &deps, "tampered-record", "ORD-1005", 299).await;
    let original = shared.approval(&id5).unwrap().unwrap();
    let patch = ApprovalPatch {
        args: Some(ApprovalArgs {
            canonical: r#"{"amount":9999,"order_id":"ORD-1005"}"#.into(),
            hash: original.args_hash,
        }),
        ..ApprovalPatch::by("mallory", original.created_at)
    };
    shared.transition_approval(&id5, ApprovalStatus::Pending, ApprovalStatus::Approved, patch).unwrap();
    println!("  mallory writes APPROVED with amount 9999 straight into the store, keeping the old hash");
    let run = resume(&graph, &deps, "tampered-record").await;
    report(&run, &desk, payments, &id5, "ORD-1005");

    println!("\n== 5b. tampered: the call's arguments changed after the approval");
    let id6 = start(&graph, &deps, "tampered-call", "ORD-1006", 299).await;
    desk.approve(&id6, &alice()).unwrap();
    println!("  alice approves 299");
    let state = graph.state("tampered-call").unwrap().unwrap().state;
    let mut call = state.messages.iter().rev().find(|m| m.role == Role::Ai).unwrap().clone();
    call.tool_calls[0].arguments = json!({ "order_id": "ORD-1006", "amount": 2990 });
    graph.update_state("tampered-call", ReactState::update().messages(vec![call]), "mallory").unwrap();
    println!("  mallory rewrites the model's call in the thread's state to amount 2990");
    let run = graph.runner(&deps).thread("tampered-call").resume().await.unwrap();
    println!("  resume `tampered-call`: {}", run.outcome);
    let new_id = paused_for(&run).expect("a new approval is needed");
    println!(
        "  -> a NEW approval ({}), not the approved one: {id6} stays {}",
        desk.get(&new_id).unwrap().unwrap().status,
        desk.get(&id6).unwrap().unwrap().status
    );
    desk.reject(&new_id, &alice(), "2990 is not what I approved").unwrap();
    let run = resume(&graph, &deps, "tampered-call").await;
    report(&run, &desk, payments, &new_id, "ORD-1006");

    println!("\n== 6. expired: a decision after the TTL is refused; the call never runs");
    let short_ttl = refund_agent::graph().app().store(Arc::clone(&shared)).approval_ttl(Duration::from_millis(200));
    let short_desk = short_ttl.approvals(authorizer).unwrap();
    let id7 = start(&short_ttl, &deps, "expired", "ORD-1007", 299).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    match short_desk.approve(&id7, &alice()) {
        Err(e) => println!("  alice approves 300 ms later (TTL 200 ms): refused: {e}"),
        Ok(_) => unreachable!("expired"),
    }
    let run = resume(&short_ttl, &deps, "expired").await;
    report(&run, &short_desk, payments, &id7, "ORD-1007");

    println!("\n== audit log (per thread: seq, +ms since the request, actor, what)");
    for thread in ["approved", "edited", "rejected", "tampered-record", "tampered-call", "expired"] {
        let log = graph.audit_log(thread).unwrap();
        let t0 = log.first().map_or(0, |e| e.at);
        println!("  {thread}:");
        for e in log {
            let d = &e.detail;
            let what = match e.kind.as_str() {
                "approval.requested" => format!(
                    "{} args#{}..",
                    d["tool"].as_str().unwrap_or(""),
                    short(d["args_hash"].as_str().unwrap_or(""))
                ),
                "state.updated" => "state rewritten".to_string(),
                _ => {
                    let mut parts =
                        vec![format!("{} -> {}", d["from"].as_str().unwrap_or("?"), d["to"].as_str().unwrap_or("?"))];
                    if d["args_edited"] == json!(true) {
                        parts.push(format!("args edited, new args#{}..", short(d["args_hash"].as_str().unwrap_or(""))));
                    }
                    if let Some(note) = d["note"].as_str() {
                        parts.push(format!("note: {note}"));
                    }
                    parts.join("; ")
                }
            };
            println!("    {:>2} +{:>4}ms {:<16} {:<19} {what}", e.seq, e.at.saturating_sub(t0), e.actor, e.kind);
        }
    }

    drop((graph, short_ttl, desk, short_desk, shared));
    drop(store);
    let _ = std::fs::remove_file(&path);
}
