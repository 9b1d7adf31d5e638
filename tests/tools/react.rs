//! The prebuilt ReAct loop with real tools and the scripted test double.

use std::sync::{Arc, Mutex};

use agentflow::approval::{ApprovalStatus, Approver, RoleAuthorizer};
use agentflow::message::{Role, ToolCall};
use agentflow::model::{ChatReply, ChatRequest, ModelError, ScriptedModel};
use agentflow::prebuilt::react::{ReactDeps, ReactState};
use agentflow::prelude::*;
use agentflow::tool::Risk;
use agentflow::{Budget, Limits, PendingKind, RedbStore, Store};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::support::calculator::{add, divide, multiply};

agentflow::react_agent!(mod calculator, tools = [add, multiply, divide], max_steps = 12);
agentflow::react_agent!(mod support, tools = [create_ticket, process_refund], max_steps = 12);

#[tokio::test]
async fn two_dependent_calls_give_35() {
    let model = Arc::new(
        ScriptedModel::new()
            .reply_tool_call("add", json!({"a": 3, "b": 4}))
            .reply_tool_call("multiply", json!({"a": 7, "b": 5}))
            .reply_text("(3 + 4) * 5 = 35"),
    );
    let deps = ReactDeps::new(model.clone());
    let run = calculator::graph().run(ReactState::ask("what is (3 + 4) * 5?"), &deps).await.unwrap();
    assert_eq!(run.outcome, Outcome::Completed);
    assert_eq!(run.state.answer.as_deref(), Some("(3 + 4) * 5 = 35"));
    let tool_results: Vec<&str> =
        run.state.messages.iter().filter(|m| m.role == Role::Tool).map(|m| m.content.as_str()).collect();
    assert_eq!(tool_results, vec![r#"{"ok":true,"result":7.0}"#, r#"{"ok":true,"result":35.0}"#]);
    assert_eq!(run.usage.model_calls, 3);
    assert_eq!(run.usage.tool_calls, 2);
    // The model was offered exactly the tool node's set.
    let offered: Vec<String> = model.requests()[0].tools.iter().map(|t| t.name.clone()).collect();
    assert_eq!(offered, vec!["add", "multiply", "divide"]);
}

#[tokio::test]
async fn bad_arguments_and_unknown_tools_come_back_as_observations() {
    let model = Arc::new(
        ScriptedModel::new()
            .reply_tool_call("add", json!({"a": 3, "b": "four", "c": 1}))
            .reply_tool_call("delete_everything", json!({}))
            .reply_tool_call("divide", json!({"a": 10, "b": 0}))
            .reply_text("10 / 0 is undefined"),
    );
    let deps = ReactDeps::new(model);
    let run = calculator::graph().run(ReactState::ask("..."), &deps).await.unwrap();
    assert_eq!(run.outcome, Outcome::Completed);
    let codes: Vec<String> = run
        .state
        .messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .map(|m| serde_json::from_str::<serde_json::Value>(&m.content).unwrap()["code"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(codes, vec!["INVALID_ARGUMENT", "PERMISSION_DENIED", "TOOL_ERROR"]);
}

#[tokio::test]
async fn deep_arguments_from_the_model_are_an_invalid_argument_observation_on_a_store() {
    // 125 levels: within what serde_json reads, past what the store keeps inside a state.
    let deep = (0..124).fold(json!(1), |inner, _| json!([inner]));
    let model = Arc::new(
        ScriptedModel::new()
            .reply_tool_call("add", json!({ "a": deep, "b": 1 }))
            .reply_tool_call("add", json!({"a": 3, "b": 4}))
            .reply_text("3 + 4 = 7"),
    );
    let deps = ReactDeps::new(model);
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = calculator::graph().app().store(store);
    let run = app.runner(&deps).thread("deep-args").run(ReactState::ask("add")).await.unwrap();
    assert_eq!(run.outcome, Outcome::Completed);
    let observations: Vec<Value> = run
        .state
        .messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .map(|m| serde_json::from_str(&m.content).unwrap())
        .collect();
    assert_eq!(observations.len(), 2);
    assert_eq!(observations[0]["code"], "INVALID_ARGUMENT", "{}", observations[0]);
    assert!(observations[0]["detail"].as_str().unwrap().contains("nests deeper than"), "{}", observations[0]);
    assert_eq!(observations[1]["result"], 7.0);
    assert_eq!(app.state("deep-args").unwrap().unwrap().state, run.state);
}

#[tokio::test]
async fn a_model_that_keeps_calling_tools_runs_out_of_budget() {
    let mut model = ScriptedModel::new();
    for i in 0..50 {
        model = model.reply_tool_call("add", json!({"a": i, "b": 1}));
    }
    let deps = ReactDeps::new(Arc::new(model));
    let graph = calculator::graph();
    let run =
        graph.app().runner(&deps).limits(Limits::none().model_calls(4)).run(ReactState::ask("loop")).await.unwrap();
    assert_eq!(run.outcome, Outcome::BudgetExhausted { which: Budget::ModelCalls });
    assert_eq!(run.usage.model_calls, 4);
    // The step bound catches it too, never as success.
    let mut model = ScriptedModel::new();
    for i in 0..50 {
        model = model.reply_tool_call("add", json!({"a": i, "b": 1}));
    }
    let deps = ReactDeps::new(Arc::new(model));
    let run = graph.run(ReactState::ask("loop"), &deps).await.unwrap();
    assert_eq!(run.outcome, Outcome::BudgetExhausted { which: Budget::Steps });
}

#[tokio::test]
async fn a_repeated_identical_call_stops_the_loop() {
    let model = ScriptedModel::new()
        .reply_tool_call("add", json!({"a": 1, "b": 1}))
        .reply_tool_call("add", json!({"b": 1, "a": 1}))
        .reply_text("never reached");
    let deps = ReactDeps::new(Arc::new(model));
    let run = calculator::graph().run(ReactState::ask("1+1"), &deps).await.unwrap();
    let Outcome::Failed { node, error } = &run.outcome else { panic!("{:?}", run.outcome) };
    assert_eq!(node, "tools");
    assert!(error.message.contains("repeated the call `add`"), "{error}");
}

// ---------------------------------------------------------------- side effects around an approval

static TICKETS: Mutex<Vec<String>> = Mutex::new(Vec::new());
static REFUNDS: Mutex<Vec<(String, u32)>> = Mutex::new(Vec::new());

#[derive(Deserialize, schemars::JsonSchema)]
pub struct TicketArgs {
    order_id: String,
}

/// Opens a support ticket for an order. Reversible (it can be closed).
#[tool(risk = reversible)]
async fn create_ticket(args: TicketArgs) -> Result<Value, ToolError> {
    TICKETS.lock().unwrap().push(args.order_id.clone());
    Ok(json!({ "ticket": format!("T-{}", args.order_id) }))
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct RefundArgs {
    order_id: String,
    amount: u32,
}

/// Refunds `amount` on an order. Irreversible: the policy asks a human first.
#[tool(risk = irreversible)]
async fn process_refund(args: RefundArgs) -> Result<Value, ToolError> {
    REFUNDS.lock().unwrap().push((args.order_id.clone(), args.amount));
    Ok(json!({ "refunded": args.amount }))
}

/// Opens a ticket and refunds (in two turns, or in one reply when
/// `together`), acting on what it is shown; fresh call ids on every call.
fn support_model(order: &'static str, together: bool) -> ScriptedModel {
    let ticket = move || ToolCall::new("ticket", "create_ticket", json!({ "order_id": order }));
    let refund = move || ToolCall::new("refund", "process_refund", json!({ "order_id": order, "amount": 40 }));
    let calls = |calls: Vec<ToolCall>| Ok(ChatReply { tool_calls: calls, ..ChatReply::default() });
    ScriptedModel::new()
        .respond_with(move |req: &ChatRequest| -> Result<ChatReply, ModelError> {
            let results: Vec<Value> = req
                .messages
                .iter()
                .filter(|m| m.role == Role::Tool)
                .map(|m| serde_json::from_str(&m.content).unwrap_or(Value::Null))
                .collect();
            let ticketed = results.iter().any(|r| r["result"].get("ticket").is_some());
            let refunded = results.iter().any(|r| r["result"].get("refunded").is_some());
            match (ticketed, refunded) {
                (_, true) => Ok(ChatReply::text("ticket opened, 40 refunded")),
                (false, false) if together => calls(vec![ticket(), refund()]),
                (false, false) => calls(vec![ticket()]),
                (true, false) => calls(vec![refund()]),
            }
        })
        .fresh_call_ids()
}

async fn ticket_then_refund(order: &'static str, together: bool) {
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let graph = support::graph().app().store(store);
    let desk = graph.approvals(RoleAuthorizer::new().role_for(Risk::Irreversible, "approver")).unwrap();
    let model = Arc::new(support_model(order, together));
    let deps = ReactDeps::new(model.clone());
    let alice = Approver::new("alice", ["approver"]);
    let mut run =
        graph.runner(&deps).thread(order).owner("agent:support").run(ReactState::ask("broken")).await.unwrap();
    for _ in 0..3 {
        let Outcome::Interrupted { pending, .. } = &run.outcome else { break };
        assert_eq!(pending[0].kind, PendingKind::Approval);
        for record in desk.for_thread(order).unwrap() {
            if record.status == ApprovalStatus::Pending {
                desk.approve(&record.id, &alice).unwrap();
            }
        }
        run = graph.runner(&deps).thread(order).resume().await.unwrap();
    }
    assert_eq!(TICKETS.lock().unwrap().iter().filter(|o| *o == order).count(), 1, "one ticket");
    let refunds: Vec<u32> = REFUNDS.lock().unwrap().iter().filter(|(o, _)| o == order).map(|(_, a)| *a).collect();
    assert_eq!(refunds, [40], "one refund");
    let approvals = desk.for_thread(order).unwrap();
    assert_eq!(approvals.len(), 1, "{approvals:?}");
    assert_eq!(approvals[0].status, ApprovalStatus::Succeeded);
    assert_eq!(run.outcome, Outcome::Completed);
    assert_eq!(run.state.answer.as_deref(), Some("ticket opened, 40 refunded"));
    // No model turn was asked twice: one per tool round, one for the answer.
    assert_eq!(model.calls(), if together { 2 } else { 3 });
}

#[tokio::test]
async fn an_approved_refund_after_a_ticket_runs_once_with_fresh_call_ids() {
    ticket_then_refund("R-1", false).await;
}

#[tokio::test]
async fn a_ticket_and_a_refund_in_one_reply_run_once_each_with_fresh_call_ids() {
    ticket_then_refund("R-2", true).await;
}

// ---------------------------------------------------------------- approvals written around the desk

#[tokio::test]
async fn an_approval_written_straight_into_the_store_without_a_decider_is_not_used() {
    let graph = support::graph().app().store(Arc::new(RedbStore::in_memory().unwrap()));
    let model = ScriptedModel::new()
        .reply_tool_call("process_refund", json!({ "order_id": "R-3", "amount": 40 }))
        .respond_with(|req: &ChatRequest| {
            let last = req.messages.iter().rev().find(|m| m.role == Role::Tool).unwrap();
            Ok(ChatReply::text(last.content.clone()))
        });
    let deps = ReactDeps::new(Arc::new(model));
    let run = graph.runner(&deps).thread("R-3").owner("agent:support").run(ReactState::ask("refund")).await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{:?}", run.outcome) };
    let id = pending[0].payload["approval"].as_str().unwrap().to_string();
    // Someone holding the store moves the approval to APPROVED by hand: no
    // approver decided it (no `decided_by`), the desk never saw it.
    let store = graph.backing_store().unwrap();
    let patch = agentflow::approval::ApprovalPatch::by("script", 1);
    store.transition_approval(&id, ApprovalStatus::Pending, ApprovalStatus::Approved, patch).unwrap();

    let done = graph.runner(&deps).thread("R-3").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    let observation: Value = serde_json::from_str(done.state.answer.as_deref().unwrap()).unwrap();
    assert_eq!(observation["code"], "APPROVAL_INVALID", "{observation}");
    assert!(
        observation["detail"].as_str().unwrap().contains("holds no approver's decision (no `decided_by`)"),
        "{observation}"
    );
    assert!(REFUNDS.lock().unwrap().iter().all(|(o, _)| o != "R-3"), "the refund never ran");
}

#[tokio::test]
async fn an_approval_written_straight_into_the_store_in_someone_elses_name_is_not_used() {
    let graph = support::graph().app().store(Arc::new(RedbStore::in_memory().unwrap()));
    let model = ScriptedModel::new()
        .reply_tool_call("process_refund", json!({ "order_id": "R-4", "amount": 40 }))
        .respond_with(|req: &ChatRequest| {
            let last = req.messages.iter().rev().find(|m| m.role == Role::Tool).unwrap();
            Ok(ChatReply::text(last.content.clone()))
        });
    let deps = ReactDeps::new(Arc::new(model));
    let run = graph.runner(&deps).thread("R-4").owner("agent:support").run(ReactState::ask("refund")).await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{:?}", run.outcome) };
    let id = pending[0].payload["approval"].as_str().unwrap().to_string();
    // A script writes the decision and names alice as the decider: the
    // audit entry the store writes with it is the script's, not alice's.
    let patch = agentflow::approval::ApprovalPatch {
        decided_by: Some("alice".into()),
        ..agentflow::approval::ApprovalPatch::by("script", 1)
    };
    graph
        .backing_store()
        .unwrap()
        .transition_approval(&id, ApprovalStatus::Pending, ApprovalStatus::Approved, patch)
        .unwrap();

    let done = graph.runner(&deps).thread("R-4").resume().await.unwrap();
    let observation: Value = serde_json::from_str(done.state.answer.as_deref().unwrap()).unwrap();
    assert_eq!(observation["code"], "APPROVAL_INVALID", "{observation}");
    assert!(observation["detail"].as_str().unwrap().contains("no `approval.approved` audit entry by its decider"));
    assert!(REFUNDS.lock().unwrap().iter().all(|(o, _)| o != "R-4"), "the refund never ran");
}
