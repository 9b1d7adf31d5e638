//! Approvals at the tool boundary: the gateway, the desk and the store's
//! compare-and-set, end to end through the ReAct prebuilt and small graphs.
//!
//! Covered: concurrent decisions (exactly one wins), replay, tampering and
//! expiry refused, edit re-validation, rejection (re-plan or end the run),
//! conditions, the authorizer (roles, self-approval, two-person rule), the
//! gateway that cannot be bypassed, and the audit log.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;

use agentflow::approval::{ApprovalStatus, Approver, DecisionError, RoleAuthorizer};
use agentflow::message::{Role, ToolCall};
use agentflow::model::{ChatReply, ChatRequest, ScriptedModel};
use agentflow::persist::ResumeError;
use agentflow::prebuilt::react::{ReactDeps, ReactState};
use agentflow::prelude::*;
use agentflow::tool::{Code, Decision, OnReject, Risk, RiskPolicy, args_hash};
use agentflow::{PendingKind, Run, RunError};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

// ---------------------------------------------------------------- tools

/// Every refund that actually ran: (order, amount, idempotency key).
static LEDGER: Mutex<Vec<(String, u32, String)>> = Mutex::new(Vec::new());

fn refunds_for(order: &str) -> Vec<u32> {
    LEDGER.lock().unwrap().iter().filter(|(o, ..)| o == order).map(|(_, a, _)| *a).collect()
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct OrderQuery {
    order_id: String,
}

/// Looks up an order: its total and status.
#[tool(risk = read)]
async fn query_order(args: OrderQuery) -> Result<Value, ToolError> {
    Ok(json!({ "order_id": args.order_id, "total": 299, "status": "delivered" }))
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct Refund {
    order_id: String,
    /// Whole currency units.
    amount: u32,
}

/// Refunds `amount` on an order. Irreversible.
#[tool(risk = irreversible)]
async fn process_refund(args: Refund, cx: &ToolCx) -> Result<Value, ToolError> {
    LEDGER.lock().unwrap().push((args.order_id.clone(), args.amount, cx.idempotency_key().to_string()));
    Ok(json!({ "refunded": args.amount, "order_id": args.order_id }))
}

/// Orders whose refund fails transiently once more.
static FLAKY: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Refunds, but the payment provider times out on the first try.
#[tool(risk = irreversible)]
async fn flaky_refund(args: Refund, cx: &ToolCx) -> Result<Value, ToolError> {
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
static BROKEN: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Refunds, but the provider may refuse it with a fatal error.
#[tool(risk = irreversible)]
async fn fragile_refund(args: Refund, cx: &ToolCx) -> Result<Value, ToolError> {
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

agentflow::react_agent!(mod refunds, tools = [query_order, process_refund], max_steps = 16);

// ---------------------------------------------------------------- helpers

const ROLE: &str = "refund-approver";
const OWNER: &str = "agent:refund-bot";

fn authorizer() -> RoleAuthorizer {
    RoleAuthorizer::new().role_for(Risk::Irreversible, ROLE).role_for(Risk::External, ROLE)
}

fn alice() -> Approver {
    Approver::new("alice", [ROLE])
}

fn bob() -> Approver {
    Approver::new("bob", [ROLE])
}

use crate::support::stores::store;

fn react() -> App<ReactState, ReactDeps> {
    refunds::graph().app().store(store())
}

/// The model's last word: reads the last tool observation and says what happened.
fn answer(req: &ChatRequest) -> Result<ChatReply, agentflow::model::ModelError> {
    let last = req.messages.iter().rev().find(|m| m.role == Role::Tool).expect("a tool result");
    let body: Value = serde_json::from_str(&last.content).unwrap();
    Ok(ChatReply::text(if body["ok"] == json!(true) {
        format!("Done: {}", body["result"])
    } else {
        format!("No refund ({}): {}", body["code"].as_str().unwrap(), body["detail"].as_str().unwrap())
    }))
}

/// Looks the order up, asks to refund `amount`, then reports what happened.
fn bot(order: &str, amount: u32) -> ReactDeps {
    let model = ScriptedModel::new()
        .reply_tool_call("query_order", json!({ "order_id": order }))
        .reply_tool_call("process_refund", json!({ "order_id": order, "amount": amount }))
        .respond_with(answer);
    ReactDeps::new(Arc::new(model))
}

async fn start(graph: &App<ReactState, ReactDeps>, deps: &ReactDeps, thread: &str) -> Run<ReactState> {
    graph.runner(deps).thread(thread).owner(OWNER).run(ReactState::ask(format!("refund {thread}"))).await.unwrap()
}

/// The approval a paused run waits for.
fn waiting_for<S>(run: &Run<S>) -> String {
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("not paused: {:?}", run.outcome) };
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(pending[0].kind, PendingKind::Approval);
    pending[0].payload["approval"].as_str().expect("an approval id").to_string()
}

fn last_observation(state: &ReactState) -> Value {
    let m = state.messages.iter().rev().find(|m| m.role == Role::Tool).expect("a tool result");
    serde_json::from_str(&m.content).unwrap()
}

fn kinds(graph: &App<ReactState, ReactDeps>, thread: &str) -> Vec<String> {
    graph.audit_log(thread).unwrap().into_iter().map(|e| e.kind).collect()
}

// ---------------------------------------------------------------- the approved path and the audit log

#[tokio::test]
async fn an_approved_call_runs_once_and_the_audit_log_tells_the_story() {
    let graph = react();
    let desk = graph.approvals(authorizer()).unwrap();
    let deps = bot("A-1", 299);
    let run = start(&graph, &deps, "A-1").await;
    let id = waiting_for(&run);
    // Nothing ran yet; the request is recorded with everything a reviewer needs.
    assert!(refunds_for("A-1").is_empty());
    let record = desk.get(&id).unwrap().unwrap();
    assert_eq!(record.status, ApprovalStatus::Pending);
    assert_eq!((record.tool.as_str(), record.risk.as_str()), ("process_refund", "irreversible"));
    assert_eq!(record.args, r#"{"amount":299,"order_id":"A-1"}"#);
    assert_eq!(record.args_hash, args_hash(&json!({ "order_id": "A-1", "amount": 299 })));
    assert_eq!((record.thread.as_str(), record.node.as_str(), record.requester.as_str()), ("A-1", "tools", OWNER));
    // No `approval_ttl` set: valid for the default 24 hours.
    assert_eq!(record.expires_at - record.created_at, 24 * 3_600_000);
    assert_eq!(graph.pending("A-1").unwrap()[0].kind, PendingKind::Approval);
    assert!(desk.pending().unwrap().iter().any(|r| r.id == id));

    // Resuming while it is still pending just pauses again.
    let again = graph.runner(&deps).thread("A-1").resume().await.unwrap();
    assert_eq!(waiting_for(&again), id);
    // A value is not how an approval is given.
    let err = graph.runner(&deps).thread("A-1").resume_with(true).await.unwrap_err();
    assert!(matches!(err, RunError::NotWaiting { .. }), "{err}");

    let approved = desk.approve(&id, &alice()).unwrap();
    assert_eq!((approved.status, approved.decided_by.as_deref()), (ApprovalStatus::Approved, Some("alice")));
    let done = graph.runner(&deps).thread("A-1").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(refunds_for("A-1"), vec![299]);
    assert_eq!(done.state.answer.as_deref(), Some(r#"Done: {"order_id":"A-1","refunded":299}"#));
    assert_eq!(desk.get(&id).unwrap().unwrap().status, ApprovalStatus::Succeeded);

    // request -> decision (who, when, what) -> execution start -> result
    let log = graph.audit_log("A-1").unwrap();
    let approval: Vec<_> = log.iter().filter(|e| e.detail.get("approval") == Some(&json!(id))).collect();
    let kinds: Vec<&str> = approval.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds, ["approval.requested", "approval.approved", "approval.executing", "approval.succeeded"]);
    assert_eq!(approval[0].actor, OWNER);
    assert_eq!(approval[0].detail["tool"], "process_refund");
    assert_eq!(approval[1].actor, "alice");
    assert_eq!(approval[1].detail["decided_by"], "alice");
    assert_eq!(approval[1].detail["args_edited"], false);
    assert!(approval[1].at >= approval[0].at && approval[3].at >= approval[1].at);
    assert_eq!(approval[2].actor, "executor:tools");
    assert!(approval.windows(2).all(|w| w[0].seq < w[1].seq));
}

// ---------------------------------------------------------------- exactly one decision wins

#[tokio::test]
async fn of_32_concurrent_decisions_exactly_one_wins_and_the_refund_runs_once() {
    let graph = react();
    let desk = graph.approvals(authorizer()).unwrap();
    let deps = bot("C-1", 120);
    let id = waiting_for(&start(&graph, &deps, "C-1").await);

    let barrier = Barrier::new(32);
    let results: Vec<Result<_, DecisionError>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..32)
            .map(|i| {
                let (desk, id, barrier) = (&desk, &id, &barrier);
                s.spawn(move || {
                    let who = Approver::new(format!("approver-{i}"), [ROLE]);
                    barrier.wait();
                    // Half approve, a quarter reject, a quarter edit: still one winner.
                    match i % 4 {
                        0 | 1 => desk.approve(id, &who),
                        2 => desk.reject(id, &who, "too much"),
                        _ => desk.edit(id, &who, json!({ "order_id": "C-1", "amount": 100 })),
                    }
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let wins: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    let already = results.iter().filter(|r| matches!(r, Err(DecisionError::AlreadyDecided { .. }))).count();
    assert_eq!((wins.len(), already), (1, 31), "{results:?}");
    let winner = wins[0].clone();
    assert_eq!(desk.get(&id).unwrap().unwrap(), winner);
    let decisions = kinds(&graph, "C-1").iter().filter(|k| *k != "approval.requested").count();
    assert_eq!(decisions, 1, "one decision in the audit log");

    let done = graph.runner(&deps).thread("C-1").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    match winner.status {
        ApprovalStatus::Approved if winner.decision_note.is_some() => assert_eq!(refunds_for("C-1"), vec![100]),
        ApprovalStatus::Approved => assert_eq!(refunds_for("C-1"), vec![120]),
        _ => assert!(refunds_for("C-1").is_empty()),
    }
}

// ---------------------------------------------------------------- replay

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Pay {
    order: String,
    amount: u32,
    receipt: Option<Value>,
}

#[derive(Default)]
pub struct PayDeps {
    /// Fail this many times after the refund returned (a crash after the effect).
    fail_after: AtomicU32,
    /// Ask for this much more on every run of the node after the first.
    drift: u32,
    runs: AtomicU32,
}

#[graph(state = Pay, deps = PayDeps, start = pay)]
mod pay_flow {
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

fn pay_graph() -> App<Pay, PayDeps> {
    pay_flow::graph().app().store(store())
}

fn pay_input(order: &str, amount: u32) -> Pay {
    Pay { order: order.into(), amount, receipt: None }
}

#[tokio::test]
async fn a_used_approval_cannot_be_replayed_and_a_rerun_does_not_refund_twice() {
    let graph = pay_graph();
    let desk = graph.approvals(authorizer()).unwrap();
    let deps = PayDeps { fail_after: AtomicU32::new(1), ..PayDeps::default() };
    let run = graph.runner(&deps).thread("R-1").owner(OWNER).run(pay_input("R-1", 50)).await.unwrap();
    let id = waiting_for(&run);
    desk.approve(&id, &alice()).unwrap();
    // The refund runs, then the node fails: the step is not committed.
    let failed = graph.runner(&deps).thread("R-1").resume().await.unwrap();
    assert!(matches!(&failed.outcome, Outcome::Failed { node, .. } if node == "pay"), "{:?}", failed.outcome);
    assert_eq!(refunds_for("R-1"), vec![50]);
    assert_eq!(desk.get(&id).unwrap().unwrap().status, ApprovalStatus::Succeeded);

    // A double click, or a replay of the decision, is refused.
    for decision in [desk.approve(&id, &alice()), desk.approve(&id, &bob()), desk.reject(&id, &bob(), "late")] {
        let err = decision.unwrap_err();
        assert!(matches!(err, DecisionError::AlreadyDecided { current: ApprovalStatus::Succeeded, .. }), "{err}");
    }
    // The node runs again from its start: the journal returns the first result.
    let done = graph.runner(&deps).thread("R-1").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(refunds_for("R-1"), vec![50], "refunded once");
    assert_eq!(done.state.receipt.unwrap()["result"]["refunded"], 50);
    // A finished thread cannot be resumed into a second refund.
    let err = graph.runner(&deps).thread("R-1").resume().await.unwrap_err();
    assert!(matches!(err, RunError::Resume(ResumeError::Finished { .. })), "{err}");

    // Branching back before the refund is a new call: it needs a new approval.
    graph.fork("R-1", 0, "operator").unwrap();
    let replay = graph.runner(&deps).thread("R-1").resume().await.unwrap();
    let second = waiting_for(&replay);
    assert_ne!(second, id);
    assert_eq!(refunds_for("R-1"), vec![50]);
}

// ---------------------------------------------------------------- tampering

#[tokio::test]
async fn tampered_stored_arguments_are_refused_and_never_run() {
    let graph = react();
    let store = Arc::clone(graph.backing_store().unwrap());
    let deps = bot("T-1", 299);
    let id = waiting_for(&start(&graph, &deps, "T-1").await);
    // Someone with write access to the store approves a bigger refund
    // without going through the desk, keeping the old hash.
    let original = store.approval(&id).unwrap().unwrap();
    let patch = agentflow::approval::ApprovalPatch {
        args: Some(agentflow::approval::ApprovalArgs {
            canonical: r#"{"amount":9999,"order_id":"T-1"}"#.into(),
            hash: original.args_hash.clone(),
        }),
        ..agentflow::approval::ApprovalPatch::by("mallory", 1)
    };
    store.transition_approval(&id, ApprovalStatus::Pending, ApprovalStatus::Approved, patch).unwrap();

    let done = graph.runner(&deps).thread("T-1").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    let obs = last_observation(&done.state);
    assert_eq!(obs["code"], "APPROVAL_INVALID");
    assert!(obs["detail"].as_str().unwrap().contains("do not match its hash"), "{obs}");
    assert!(done.state.answer.unwrap().starts_with("No refund (APPROVAL_INVALID)"));
    assert!(refunds_for("T-1").is_empty(), "never executed");
}

#[tokio::test]
async fn a_call_whose_arguments_changed_after_approval_needs_a_new_approval() {
    // The node asks for 70, is approved, then asks for 700 when it runs again.
    let graph = pay_graph();
    let desk = graph.approvals(authorizer()).unwrap();
    let deps = PayDeps { drift: 630, ..PayDeps::default() };
    let run = graph.runner(&deps).thread("T-2").owner(OWNER).run(pay_input("T-2", 70)).await.unwrap();
    let first = waiting_for(&run);
    desk.approve(&first, &alice()).unwrap();
    let run = graph.runner(&deps).thread("T-2").resume().await.unwrap();
    let second = waiting_for(&run);
    assert_ne!(second, first);
    let pending = desk.get(&second).unwrap().unwrap();
    assert_eq!(
        (pending.status, pending.args.as_str()),
        (ApprovalStatus::Pending, r#"{"amount":700,"order_id":"T-2"}"#)
    );
    // The approval for 70 was not used for 700, and nothing ran.
    assert_eq!(desk.get(&first).unwrap().unwrap().status, ApprovalStatus::Approved);
    assert!(refunds_for("T-2").is_empty());

    // The same through the model's message: rewriting the stored call gives a new request.
    let graph = react();
    let desk = graph.approvals(authorizer()).unwrap();
    let deps = bot("T-3", 30);
    let first = waiting_for(&start(&graph, &deps, "T-3").await);
    desk.approve(&first, &alice()).unwrap();
    let state = graph.state("T-3").unwrap().unwrap().state;
    let mut call = state.messages.iter().rev().find(|m| m.role == Role::Ai).unwrap().clone();
    call.tool_calls[0].arguments = json!({ "order_id": "T-3", "amount": 3000 });
    graph.update_state("T-3", ReactState::update().messages(vec![call]), "mallory").unwrap();
    let run = graph.runner(&deps).thread("T-3").resume().await.unwrap();
    let second = waiting_for(&run);
    assert_ne!(second, first);
    assert_eq!(desk.get(&second).unwrap().unwrap().args, r#"{"amount":3000,"order_id":"T-3"}"#);
    assert!(refunds_for("T-3").is_empty());
}

// ---------------------------------------------------------------- expiry

/// A time to live longer than a u64 of milliseconds holds never ends: it is not wrapped around
/// to one that ended at the request (every approved call would then come back expired).
#[tokio::test]
async fn an_approval_time_to_live_past_what_millis_hold_never_ends() {
    for (n, ttl) in [Duration::from_secs(1 << 62), Duration::MAX].into_iter().enumerate() {
        let graph = refunds::graph().app().store(store()).approval_ttl(ttl);
        let desk = graph.approvals(authorizer()).unwrap();
        let thread = format!("L-{n}");
        let deps = bot(&thread, 10);
        let id = waiting_for(&start(&graph, &deps, &thread).await);
        assert_eq!(desk.get(&id).unwrap().unwrap().expires_at, u64::MAX);
        desk.approve(&id, &alice()).unwrap();
        graph.runner(&deps).thread(thread.as_str()).resume().await.unwrap();
        assert_eq!(refunds_for(&thread), vec![10]);
    }
}

#[tokio::test]
async fn an_expired_approval_is_never_executed() {
    let graph = refunds::graph().app().store(store()).approval_ttl(Duration::from_millis(150));
    let desk = graph.approvals(authorizer()).unwrap();

    // Decided too late: refused, and the run learns it expired.
    let deps = bot("E-1", 10);
    let id = waiting_for(&start(&graph, &deps, "E-1").await);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let err = desk.approve(&id, &alice()).unwrap_err();
    assert!(matches!(err, DecisionError::Expired { .. }), "{err}");
    assert_eq!(desk.get(&id).unwrap().unwrap().status, ApprovalStatus::Expired);
    let err = desk.approve(&id, &alice()).unwrap_err();
    assert!(matches!(err, DecisionError::AlreadyDecided { current: ApprovalStatus::Expired, .. }), "{err}");
    let done = graph.runner(&deps).thread("E-1").resume().await.unwrap();
    assert_eq!(last_observation(&done.state)["code"], "APPROVAL_EXPIRED");
    assert!(refunds_for("E-1").is_empty());

    // Approved in time but used too late: also refused. A TTL that leaves room for a slow
    // machine between the request and its approval; the run resumes once it has passed.
    let slow = refunds::graph().app().store(store()).approval_ttl(Duration::from_millis(1500));
    let slow_desk = slow.approvals(authorizer()).unwrap();
    let deps = bot("E-2", 10);
    let id = waiting_for(&start(&slow, &deps, "E-2").await);
    slow_desk.approve(&id, &alice()).unwrap();
    let expires_at = slow_desk.get(&id).unwrap().unwrap().expires_at;
    while agentflow::timer::now_ms() <= expires_at {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let done = slow.runner(&deps).thread("E-2").resume().await.unwrap();
    assert_eq!(last_observation(&done.state)["code"], "APPROVAL_EXPIRED");
    assert_eq!(slow_desk.get(&id).unwrap().unwrap().status, ApprovalStatus::Expired);
    assert!(refunds_for("E-2").is_empty());

    // Nobody decided, the thread resumed after the TTL: expired at the gateway.
    let deps = bot("E-3", 10);
    let id = waiting_for(&start(&graph, &deps, "E-3").await);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let done = graph.runner(&deps).thread("E-3").resume().await.unwrap();
    assert_eq!(last_observation(&done.state)["code"], "APPROVAL_EXPIRED");
    assert_eq!(desk.get(&id).unwrap().unwrap().status, ApprovalStatus::Expired);
    assert!(refunds_for("E-3").is_empty());
}

// ---------------------------------------------------------------- edit

#[tokio::test]
async fn an_edit_is_revalidated_and_the_tool_runs_with_the_edited_arguments() {
    let graph = react();
    let desk = graph.approvals(authorizer()).unwrap();
    let deps = bot("D-1", 299);
    let id = waiting_for(&start(&graph, &deps, "D-1").await);
    let original = desk.get(&id).unwrap().unwrap();

    for (bad, says) in [
        (json!({ "order_id": "D-1", "amount": "lots" }), "invalid type"),
        (json!({ "order_id": "D-1", "amount": -5 }), "invalid value"),
        (json!({ "order_id": "D-1", "amount": 199, "note": "x" }), "unknown field(s) note"),
        (json!({ "amount": 199 }), "missing field `order_id`"),
    ] {
        let err = desk.edit(&id, &alice(), bad).unwrap_err();
        assert!(matches!(&err, DecisionError::InvalidEdit { tool, .. } if tool == "process_refund"), "{err}");
        assert!(err.to_string().contains("the edited arguments for `process_refund` do not validate"), "{err}");
        assert!(err.to_string().contains(says), "{err}");
    }
    assert_eq!(desk.get(&id).unwrap().unwrap().status, ApprovalStatus::Pending, "a refused edit decides nothing");

    let edited = json!({ "order_id": "D-1", "amount": 199 });
    let record = desk.edit(&id, &alice(), edited.clone()).unwrap();
    assert_eq!(record.status, ApprovalStatus::Approved);
    assert_eq!(record.args, r#"{"amount":199,"order_id":"D-1"}"#);
    assert_eq!(record.args_hash, args_hash(&edited));
    assert_ne!(record.args_hash, original.args_hash);
    let done = graph.runner(&deps).thread("D-1").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(refunds_for("D-1"), vec![199]);
    assert_eq!(last_observation(&done.state)["result"]["refunded"], 199);
    let log = graph.audit_log("D-1").unwrap();
    let decision = log.iter().find(|e| e.kind == "approval.approved").unwrap();
    assert_eq!(decision.detail["args_edited"], true);
    assert_eq!(decision.detail["args_hash"], json!(args_hash(&edited)));
    let note = decision.detail["note"].as_str().unwrap();
    assert!(note.contains(r#""amount":299"#) && note.contains(r#""amount":199"#), "{note}");
}

// ---------------------------------------------------------------- rejection

#[tokio::test]
async fn a_rejection_reaches_the_model_which_answers_without_refunding() {
    let graph = react();
    let desk = graph.approvals(authorizer()).unwrap();
    let model = Arc::new(
        ScriptedModel::new()
            .reply_tool_call("query_order", json!({ "order_id": "J-1" }))
            .reply_tool_call("process_refund", json!({ "order_id": "J-1", "amount": 299 }))
            .respond_with(answer),
    );
    let deps = ReactDeps::new(model.clone());
    let id = waiting_for(&start(&graph, &deps, "J-1").await);
    desk.reject(&id, &alice(), "outside the 30-day refund window").unwrap();
    let done = graph.runner(&deps).thread("J-1").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert!(refunds_for("J-1").is_empty());
    // The model saw the REJECTED observation with the reason, and answered.
    let seen = model.last_request().unwrap();
    let rejected = seen.messages.iter().find(|m| m.content.contains("REJECTED")).expect("REJECTED observation");
    assert!(rejected.content.contains("rejected by alice: outside the 30-day refund window"), "{}", rejected.content);
    assert_eq!(
        done.state.answer.as_deref(),
        Some("No refund (REJECTED): rejected by alice: outside the 30-day refund window")
    );
    assert_eq!(desk.get(&id).unwrap().unwrap().status, ApprovalStatus::Rejected);
    assert!(kinds(&graph, "J-1").contains(&"approval.rejected".to_string()));
}

#[tokio::test]
async fn a_rejection_can_end_the_run() {
    let graph = refunds::graph().app().store(store()).on_reject(OnReject::EndRun);
    let desk = graph.approvals(authorizer()).unwrap();
    let deps = bot("J-2", 299);
    let id = waiting_for(&start(&graph, &deps, "J-2").await);
    desk.reject(&id, &alice(), "fraud suspected").unwrap();
    let done = graph.runner(&deps).thread("J-2").resume().await.unwrap();
    let Outcome::Failed { node, error } = &done.outcome else { panic!("{:?}", done.outcome) };
    assert_eq!(node, "tools");
    assert!(error.message.contains("rejected by alice: fraud suspected"), "{error}");
    assert!(done.state.answer.is_none());
    assert!(refunds_for("J-2").is_empty());
}

#[tokio::test]
async fn conditions_of_an_approval_reach_the_next_node() {
    let graph = react();
    let desk = graph.approvals(authorizer()).unwrap();
    let model = Arc::new(
        ScriptedModel::new()
            .reply_tool_call("query_order", json!({ "order_id": "K-1" }))
            .reply_tool_call("process_refund", json!({ "order_id": "K-1", "amount": 80 }))
            .respond_with(answer),
    );
    let deps = ReactDeps::new(model.clone());
    let id = waiting_for(&start(&graph, &deps, "K-1").await);
    desk.approve_with_conditions(&id, &alice(), json!({ "notify": "customer", "note": "goodwill" })).unwrap();
    let done = graph.runner(&deps).thread("K-1").resume().await.unwrap();
    assert_eq!(last_observation(&done.state)["conditions"], json!({ "notify": "customer", "note": "goodwill" }));
    let seen = model.last_request().unwrap();
    assert!(seen.messages.iter().any(|m| m.content.contains("goodwill")));
    assert_eq!(refunds_for("K-1"), vec![80]);
}

// ---------------------------------------------------------------- the authorizer

#[tokio::test]
async fn the_authorizer_checks_roles_and_refuses_self_approval() {
    let graph = react();
    let desk = graph.approvals(authorizer()).unwrap();
    let deps = bot("Z-1", 40);
    let id = waiting_for(&start(&graph, &deps, "Z-1").await);

    let intern = Approver::new("ivan", ["support"]);
    let err = desk.approve(&id, &intern).unwrap_err();
    assert!(matches!(&err, DecisionError::NotAuthorized { approver, .. } if approver == "ivan"), "{err}");
    assert!(err.to_string().contains("deciding irreversible calls needs the `refund-approver` role"), "{err}");
    // Knowing the id (or the thread) grants nothing: not even a rejection or a cancel.
    assert!(matches!(desk.reject(&id, &intern, "x"), Err(DecisionError::NotAuthorized { .. })));
    assert!(matches!(desk.cancel(&id, &intern), Err(DecisionError::NotAuthorized { .. })));
    // The requester holds the role but may not approve its own request.
    let itself = Approver::new(OWNER, [ROLE]);
    let err = desk.approve(&id, &itself).unwrap_err();
    assert!(err.to_string().contains("cannot approve it"), "{err}");
    // Nor under its name cased otherwise (the inbox tells its users apart ignoring case).
    let shouted = Approver::new(OWNER.to_uppercase(), [ROLE]);
    let err = desk.approve(&id, &shouted).unwrap_err();
    assert!(err.to_string().contains("cannot approve it"), "{err}");
    let err = desk.approve("apr-does-not-exist", &alice()).unwrap_err();
    assert!(matches!(err, DecisionError::NotFound { .. }), "{err}");
    // Nobody without a name decides (the audit log would name no one).
    for blank in ["", "  "] {
        let err = desk.approve(&id, &Approver::new(blank, [ROLE])).unwrap_err();
        assert!(
            matches!(&err, DecisionError::NotAuthorized { reason, .. } if reason.contains("needs a name")),
            "{err}"
        );
    }
    assert_eq!(desk.get(&id).unwrap().unwrap().status, ApprovalStatus::Pending);
    assert!(refunds_for("Z-1").is_empty());

    // A request made in a resumed run is still the thread owner's: a runner
    // that resumes without naming the owner does not make it self-approvable.
    let model = ScriptedModel::new()
        .reply_tool_call("process_refund", json!({ "order_id": "Z-2", "amount": 5 }))
        .reply_tool_call("process_refund", json!({ "order_id": "Z-2", "amount": 6 }))
        .respond_with(answer);
    let deps = ReactDeps::new(Arc::new(model));
    let first = waiting_for(&start(&graph, &deps, "Z-2").await);
    desk.approve(&first, &alice()).unwrap();
    let run = graph.runner(&deps).thread("Z-2").resume().await.unwrap();
    let second = waiting_for(&run);
    assert_eq!(desk.get(&second).unwrap().unwrap().requester, OWNER);
    assert!(desk.approve(&second, &itself).is_err());
    assert_eq!(refunds_for("Z-2"), vec![5]);
}

#[tokio::test]
async fn the_two_person_rule_needs_two_distinct_approvers_of_the_same_arguments() {
    let graph = react();
    let desk = graph.approvals(authorizer().two_person_for_irreversible()).unwrap();
    let deps = bot("W-1", 500);
    let id = waiting_for(&start(&graph, &deps, "W-1").await);

    let first = desk.approve(&id, &alice()).unwrap();
    assert_eq!(first.status, ApprovalStatus::Pending, "one sign-off is not enough");
    let err = desk.approve(&id, &alice()).unwrap_err();
    assert!(matches!(&err, DecisionError::SameApprover { approver, .. } if approver == "alice"), "{err}");
    // One person under a name cased otherwise is still one person.
    let err = desk.approve(&id, &Approver::new("Alice", [ROLE])).unwrap_err();
    assert!(matches!(&err, DecisionError::SameApprover { approver, .. } if approver == "Alice"), "{err}");
    // Still pending: the run pauses again.
    assert_eq!(waiting_for(&graph.runner(&deps).thread("W-1").resume().await.unwrap()), id);
    let second = desk.approve(&id, &bob()).unwrap();
    assert_eq!((second.status, second.decided_by.as_deref()), (ApprovalStatus::Approved, Some("bob")));
    graph.runner(&deps).thread("W-1").resume().await.unwrap();
    assert_eq!(refunds_for("W-1"), vec![500]);
    let sign_offs: Vec<String> = graph
        .audit_log("W-1")
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == "approval.sign_off")
        .map(|e| e.actor)
        .collect();
    assert_eq!(sign_offs, ["alice", "bob"]);

    // A second person cannot change the arguments on the strength of the
    // first person's sign-off: an edit needs its own two sign-offs.
    let deps = bot("W-2", 500);
    let id = waiting_for(&start(&graph, &deps, "W-2").await);
    desk.approve(&id, &alice()).unwrap();
    let edited = desk.edit(&id, &bob(), json!({ "order_id": "W-2", "amount": 5000 })).unwrap();
    assert_eq!(edited.status, ApprovalStatus::Pending, "alice never saw 5000");
    let carol = Approver::new("carol", [ROLE]);
    let edited = desk.edit(&id, &carol, json!({ "order_id": "W-2", "amount": 5000 })).unwrap();
    assert_eq!(edited.status, ApprovalStatus::Approved);
    assert_eq!(edited.args, r#"{"amount":5000,"order_id":"W-2"}"#);
    // While it waited for carol, bob's edit was kept with his sign-off, not lost.
    let sign_offs = |thread: &str| -> Vec<Value> {
        let log = graph.audit_log(thread).unwrap();
        log.into_iter().filter(|e| e.kind == "approval.sign_off").map(|e| e.detail).collect()
    };
    assert_eq!(sign_offs("W-2")[1]["args"], r#"{"amount":5000,"order_id":"W-2"}"#);

    // The conditions are part of what is signed: a co-signer who leaves out the conditions the
    // first approver attached does not complete that approval (the call would run without them),
    // and the conditions are kept with the sign-off meanwhile.
    let deps = bot("W-3", 500);
    let id = waiting_for(&start(&graph, &deps, "W-3").await);
    let max = json!({ "max_amount": 10 });
    assert_eq!(desk.approve_with_conditions(&id, &alice(), max.clone()).unwrap().status, ApprovalStatus::Pending);
    assert_eq!(desk.approve(&id, &bob()).unwrap().status, ApprovalStatus::Pending, "bob left alice's conditions out");
    let approved = desk.approve_with_conditions(&id, &carol, max.clone()).unwrap();
    assert_eq!((approved.status, approved.conditions), (ApprovalStatus::Approved, Some(max.clone())));
    let kept: Vec<Value> = sign_offs("W-3").into_iter().map(|d| d["conditions"].clone()).collect();
    assert_eq!(kept, [max.clone(), Value::Null, max]);
}

#[tokio::test]
async fn two_concurrent_sign_offs_approve_the_call() {
    let graph = react();
    let desk = graph.approvals(authorizer().two_person_for_irreversible()).unwrap();
    for round in 0..8 {
        let thread = format!("W2-{round}");
        let deps = bot(&thread, 1);
        let id = waiting_for(&start(&graph, &deps, &thread).await);
        let barrier = Barrier::new(2);
        std::thread::scope(|s| {
            for who in [alice(), bob()] {
                let (desk, id, barrier) = (&desk, &id, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    let r = desk.approve(id, &who);
                    assert!(r.is_ok(), "{who:?}: {r:?}");
                });
            }
        });
        assert_eq!(desk.get(&id).unwrap().unwrap().status, ApprovalStatus::Approved, "round {round}");
    }
}

// ---------------------------------------------------------------- no way around the gateway

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Probe {
    #[reduce(append)]
    seen: Vec<Value>,
}

#[graph(state = Probe, deps = (), start = sneaky)]
mod bypass {
    use super::*;

    /// Allowed only to read; tries to call the refund by name anyway.
    #[node(goto = [END], tools = [query_order])]
    async fn sneaky(_s: &Probe, cx: &Ctx<()>) -> Result<Step<Probe>, NodeError> {
        let forged = ToolCall::new("forged-1", "process_refund", json!({ "order_id": "B-1", "amount": 1 }));
        let obs = cx.call_tool(&forged).await?;
        let unknown = cx.call_tool(&ToolCall::new("forged-2", "drop_tables", json!({}))).await?;
        Ok(goto!(END, Probe::update().seen(vec![obs.body, unknown.body])))
    }
}

#[tokio::test]
async fn the_gateway_cannot_be_bypassed() {
    // A node without the tool in its set: PERMISSION_DENIED, nothing runs,
    // whatever the policy says.
    let graph = bypass::graph().app().store(store()).policy(RiskPolicy::allow_all());
    let run = graph.runner(&()).thread("B-1").run(Probe::default()).await.unwrap();
    assert_eq!(run.outcome, Outcome::Completed);
    assert_eq!(run.state.seen[0]["code"], "PERMISSION_DENIED");
    assert!(
        run.state.seen[0]["detail"].as_str().unwrap().contains("not allowed in node `sneaky`; allowed: query_order")
    );
    assert_eq!(run.state.seen[1]["code"], "PERMISSION_DENIED");
    assert!(refunds_for("B-1").is_empty());

    // A node that has the tool still goes through the policy: its own direct
    // call pauses for a human like a model's call does.
    let graph = pay_graph();
    let deps = PayDeps::default();
    let run = graph.runner(&deps).thread("B-2").owner(OWNER).run(pay_input("B-2", 9)).await.unwrap();
    waiting_for(&run);
    assert!(refunds_for("B-2").is_empty());

    // The policy can deny outright, by tool name.
    let graph =
        pay_flow::graph().app().store(store()).policy(RiskPolicy::default().tool("process_refund", Decision::Deny));
    let run = graph.runner(&deps).thread("B-3").run(pay_input("B-3", 9)).await.unwrap();
    assert_eq!(run.state.receipt.unwrap()["code"], "PERMISSION_DENIED");
    assert!(refunds_for("B-3").is_empty());

    // Without a store there is nowhere to record an approval: refused, not run.
    let graph = pay_flow::graph();
    let run = graph.run(pay_input("B-4", 9), &deps).await.unwrap();
    let receipt = run.state.receipt.unwrap();
    assert_eq!(receipt["code"], "PERMISSION_DENIED");
    assert!(receipt["detail"].as_str().unwrap().contains("no store to record it in"));
    assert!(refunds_for("B-4").is_empty());

    // `Tool::invoke` is the only other way to the body, and it takes a
    // `ToolCx`, which has no public constructor: only the gateway makes one.
    // (`ToolCx { .. }` outside agentflow does not compile.) The codes a model
    // can get back are refusals; none of them ran the tool.
    for code in [Code::PermissionDenied, Code::ApprovalInvalid, Code::ApprovalExpired, Code::Rejected] {
        assert!(serde_json::to_value(code).unwrap().is_string());
    }
}

// ---------------------------------------------------------------- failures while executing

#[graph(state = Pay, deps = (), start = pay)]
mod flaky_flow {
    use super::*;

    #[node(goto = [END], tools = [flaky_refund], retry(attempts = 2, base = 5ms, jitter = false))]
    async fn pay(s: &Pay, cx: &Ctx<()>) -> Result<Step<Pay>, NodeError> {
        let obs = cx.run_tool(flaky_refund, json!({ "order_id": s.order, "amount": s.amount })).await?;
        Ok(goto!(END, Pay::update().receipt(Some(obs.body))))
    }
}

#[tokio::test]
async fn a_transient_failure_is_retried_under_the_same_approval_and_recorded_once() {
    let graph = flaky_flow::graph().app().store(store());
    let desk = graph.approvals(authorizer()).unwrap();
    FLAKY.lock().unwrap().push("F-1".into());
    let run = graph.runner(&()).thread("F-1").owner(OWNER).run(pay_input("F-1", 25)).await.unwrap();
    let id = waiting_for(&run);
    desk.approve(&id, &alice()).unwrap();
    let done = graph.runner(&()).thread("F-1").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(refunds_for("F-1"), vec![25]);
    assert_eq!(desk.get(&id).unwrap().unwrap().status, ApprovalStatus::Succeeded);
    let kinds: Vec<String> = graph.audit_log("F-1").unwrap().into_iter().map(|e| e.kind).collect();
    assert_eq!(kinds, ["approval.requested", "approval.approved", "approval.executing", "approval.succeeded"]);
}

#[graph(state = Pay, deps = (), start = pay)]
mod forgiving_flow {
    use super::*;

    /// Calls the flaky refund once and, when it fails, goes on without it.
    #[node(goto = [END], tools = [flaky_refund])]
    async fn pay(s: &Pay, cx: &Ctx<()>) -> Result<Step<Pay>, NodeError> {
        let receipt = match cx.run_tool(flaky_refund, json!({ "order_id": s.order, "amount": s.amount })).await {
            Ok(obs) => obs.body,
            Err(e) if e.class == agentflow::ErrorClass::Transient => json!({ "gave_up": e.message }),
            Err(e) => return Err(e),
        };
        Ok(goto!(END, Pay::update().receipt(Some(receipt))))
    }
}

/// An approved call that fails with a passing fault is left `EXECUTING` for a retry of its
/// node; a node that goes on without one finishes the call as `FAILED` with its step (it was
/// left `EXECUTING` for good, or called an unknown outcome after a resume).
#[tokio::test]
async fn an_approved_call_whose_passing_fault_the_node_gives_up_on_ends_failed() {
    let graph = forgiving_flow::graph().app().store(store());
    let desk = graph.approvals(authorizer()).unwrap();
    FLAKY.lock().unwrap().push("F-3".into());
    let run = graph.runner(&()).thread("F-3").owner(OWNER).run(pay_input("F-3", 25)).await.unwrap();
    let id = waiting_for(&run);
    desk.approve(&id, &alice()).unwrap();
    let done = graph.runner(&()).thread("F-3").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert!(done.state.receipt.unwrap()["gave_up"].as_str().unwrap().contains("timed out"));
    let record = desk.get(&id).unwrap().unwrap();
    assert_eq!(record.status, ApprovalStatus::Failed, "{record:?}");
    assert!(refunds_for("F-3").is_empty());
    assert!(desk.pending().unwrap().iter().all(|r| r.id != id), "not listed for a human");
}

#[graph(state = Pay, deps = (), start = pay)]
mod fragile_flow {
    use super::*;

    #[node(goto = [END], tools = [fragile_refund])]
    async fn pay(s: &Pay, cx: &Ctx<()>) -> Result<Step<Pay>, NodeError> {
        let obs = cx.run_tool(fragile_refund, json!({ "order_id": s.order, "amount": s.amount })).await?;
        Ok(goto!(END, Pay::update().receipt(Some(obs.body))))
    }
}

#[tokio::test]
async fn a_failed_approved_call_is_not_run_again_on_resume() {
    let graph = fragile_flow::graph().app().store(store());
    let desk = graph.approvals(authorizer()).unwrap();
    BROKEN.lock().unwrap().push("F-2".into());
    let run = graph.runner(&()).thread("F-2").owner(OWNER).run(pay_input("F-2", 25)).await.unwrap();
    let id = waiting_for(&run);
    desk.approve(&id, &alice()).unwrap();
    let failed = graph.runner(&()).thread("F-2").resume().await.unwrap();
    assert!(matches!(&failed.outcome, Outcome::Failed { error, .. } if error.message.contains("account closed")));
    assert_eq!(desk.get(&id).unwrap().unwrap().status, ApprovalStatus::Failed);
    // The provider would accept it now, but the approval was used: not run again.
    let done = graph.runner(&()).thread("F-2").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(done.state.receipt.unwrap()["code"], "APPROVAL_INVALID");
    assert!(refunds_for("F-2").is_empty());
}

// ---------------------------------------------------------------- a read the policy asks a human about

/// Exports of each order's personal data that actually ran.
static EXPORTS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Exports a customer's personal data. A read, but the policy asks a human first.
#[tool(risk = read)]
async fn export_pii(args: OrderQuery) -> Result<Value, ToolError> {
    EXPORTS.lock().unwrap().push(args.order_id.clone());
    Ok(json!({ "order_id": args.order_id, "email": "someone@example.com" }))
}

/// Fails the first run of the node after the export returned: the retry makes the same call.
static EXPORT_FAILS: AtomicU32 = AtomicU32::new(1);

#[graph(state = Pay, deps = (), start = export)]
mod export_flow {
    use super::*;

    #[node(goto = [END], tools = [export_pii], retry(attempts = 3, base = 1ms, jitter = false))]
    async fn export(s: &Pay, cx: &Ctx<()>) -> Result<Step<Pay>, NodeError> {
        let obs = cx.run_tool(export_pii, json!({ "order_id": s.order })).await?;
        if EXPORT_FAILS.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok() {
            return Err(NodeError::transient("the upload of the export timed out"));
        }
        Ok(goto!(END, Pay::update().receipt(Some(obs.body))))
    }
}

/// An approval of a `read` tool (one the policy asks a human about) is used once, like any
/// other: the node's retry replays the export's result instead of exporting again, and the
/// approval ends `SUCCEEDED`, not still `APPROVED` (usable again until it expires).
#[tokio::test]
async fn an_approval_of_a_read_tool_is_used_once() {
    let policy = RiskPolicy::default().tool("export_pii", Decision::NeedsApproval);
    let graph = export_flow::graph().app().store(store()).policy(policy);
    let desk = graph.approvals(authorizer().role_for(Risk::Read, ROLE)).unwrap();
    let run = graph.runner(&()).thread("X-1").owner(OWNER).run(pay_input("X-1", 0)).await.unwrap();
    let id = waiting_for(&run);
    assert!(EXPORTS.lock().unwrap().iter().all(|o| o != "X-1"), "nothing exported before the decision");
    desk.approve(&id, &alice()).unwrap();
    let done = graph.runner(&()).thread("X-1").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed, "{:?}", done.outcome);
    assert_eq!(EXPORT_FAILS.load(Ordering::SeqCst), 0, "the node was retried");
    assert_eq!(EXPORTS.lock().unwrap().iter().filter(|o| *o == "X-1").count(), 1, "exported once");
    assert_eq!(done.state.receipt.unwrap()["result"]["email"], "someone@example.com");
    assert_eq!(desk.get(&id).unwrap().unwrap().status, ApprovalStatus::Succeeded);
    let kinds: Vec<String> = graph.audit_log("X-1").unwrap().into_iter().map(|e| e.kind).collect();
    assert_eq!(kinds, ["approval.requested", "approval.approved", "approval.executing", "approval.succeeded"]);
}
