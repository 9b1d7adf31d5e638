//! The prebuilt Plan-and-Execute graph with real tools and the scripted test double.

use std::sync::{Arc, Mutex};

use agentflow::approval::{ApprovalRecord, ApprovalStatus, Approver, RoleAuthorizer};
use agentflow::message::{Message, Role, ToolCall};
use agentflow::model::{ChatReply, ChatRequest, ModelError, ScriptedModel};
use agentflow::prebuilt::plan_execute::{PlanExecuteDeps, PlanExecuteState};
use agentflow::prelude::*;
use agentflow::tool::Risk;
use agentflow::{Budget, ErrorClass, Limits, PendingKind, RedbStore, Run, Store};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::support::calculator::{add, divide, multiply};

agentflow::plan_execute_agent!(mod analyst, tools = [add, multiply, divide], max_steps = 24);
agentflow::plan_execute_agent!(mod support, tools = [create_ticket, process_refund], max_steps = 24);

fn plan(steps: &[&str]) -> String {
    json!({ "steps": steps }).to_string()
}

fn deps(model: &Arc<ScriptedModel>) -> PlanExecuteDeps {
    PlanExecuteDeps::new(model.clone())
}

#[tokio::test]
async fn happy_path_runs_every_step_and_answers() {
    let model = Arc::new(
        ScriptedModel::new()
            .reply_text(plan(&["add 3 and 4", "multiply the sum by 5"]))
            .reply_tool_call("add", json!({"a": 3, "b": 4}))
            .reply_text("3 + 4 = 7")
            .reply_tool_call("multiply", json!({"a": 7, "b": 5}))
            .reply_text("7 * 5 = 35")
            .reply_text("(3 + 4) * 5 = 35"),
    );
    let run = analyst::graph().run(PlanExecuteState::task("what is (3 + 4) * 5?"), &deps(&model)).await.unwrap();
    assert_eq!(run.outcome, Outcome::Completed);
    assert_eq!(run.state.answer.as_deref(), Some("(3 + 4) * 5 = 35"));
    assert_eq!(run.state.plan, ["add 3 and 4", "multiply the sum by 5"]);
    assert_eq!(run.state.results.len(), 2);
    assert!(run.state.results.iter().all(|r| r.ok));
    assert_eq!(run.state.results[1].observations, [json!({"ok": true, "result": 35.0})]);
    assert_eq!(run.state.replans, 0);
    assert_eq!(run.usage.model_calls, 6);
    assert_eq!(run.usage.tool_calls, 2);
    assert!(run.usage.usage_known());
    // Planner; per plan step a model turn that calls a tool, its tool turn,
    // and a model turn that ends the step; finalizer.
    assert_eq!(run.steps, 8);
    assert_eq!(run.state.running, None, "no step is left in progress");

    let requests = model.requests();
    // The planner asks for structured output, offers no tools, and describes them.
    assert!(requests[0].response_schema.is_some());
    assert!(requests[0].tools.is_empty());
    assert!(requests[0].messages[0].content.contains("- divide: Divides `a` by `b`"));
    // The executor offers exactly its node's tools.
    let offered: Vec<&str> = requests[1].tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(offered, ["add", "multiply", "divide"]);
    // The second step sees the first step's result.
    assert!(requests[3].messages[1].content.contains("1. add 3 and 4 -> done: 3 + 4 = 7"), "{:?}", requests[3]);
    // The finalizer is offered no tools.
    assert!(requests[5].tools.is_empty());
    // The trace ties each tool result to its call.
    let tool_messages: Vec<_> = run.state.messages.iter().filter(|m| m.role == Role::Tool).collect();
    assert_eq!(tool_messages[0].tool_call_id.as_deref(), Some("call_1"));
    assert_eq!(tool_messages[1].tool_call_id.as_deref(), Some("call_2"));
}

#[tokio::test]
async fn a_failing_step_triggers_a_replan_then_the_run_completes() {
    let model = Arc::new(
        ScriptedModel::new()
            .reply_text(plan(&["divide 10 by 0", "add 1 to the quotient"]))
            .reply_tool_call("divide", json!({"a": 10, "b": 0}))
            .reply_text("10 cannot be divided by 0")
            .reply_text(
                json!({"action": "revise", "steps": ["divide 10 by 2 instead", "add 1 to the quotient"]}).to_string(),
            )
            .reply_tool_call("divide", json!({"a": 10, "b": 2}))
            .reply_text("10 / 2 = 5")
            .reply_tool_call("add", json!({"a": 5, "b": 1}))
            .reply_text("5 + 1 = 6")
            .reply_text("Dividing by 0 is undefined, so the plan divided by 2 instead: 10 / 2 + 1 = 6"),
    );
    let run = analyst::graph().run(PlanExecuteState::task("compute 10 / 0 + 1"), &deps(&model)).await.unwrap();
    assert_eq!(run.outcome, Outcome::Completed, "{:?}", run.state.results);
    assert_eq!(run.state.replans, 1);
    assert_eq!(run.state.plan, ["divide 10 by 2 instead", "add 1 to the quotient"]);
    let failed = &run.state.results[0];
    assert!(!failed.ok);
    assert_eq!(failed.step, "divide 10 by 0");
    assert!(failed.output.contains("`divide` refused (TOOL_ERROR): division by zero"), "{}", failed.output);
    assert!(failed.output.contains("10 cannot be divided by 0"), "the model's words are kept: {}", failed.output);
    assert_eq!(failed.observations[0]["code"], "TOOL_ERROR");
    assert_eq!(run.state.results.iter().filter(|r| r.ok).count(), 2);
    assert_eq!(run.state.answer.as_deref().map(|a| a.ends_with("= 6")), Some(true));
    assert_eq!(run.usage.model_calls, 9);
    assert_eq!(run.usage.tool_calls, 3);
    // The replanner saw the failure and why.
    let replan_ask = &model.requests()[3].messages[1].content;
    assert!(replan_ask.contains("1. divide 10 by 0 -> FAILED: `divide` refused (TOOL_ERROR)"), "{replan_ask}");
}

#[tokio::test]
async fn a_model_that_recovers_within_the_step_completes_it() {
    // The first call is refused, the corrected one succeeds: the step's last
    // round of tool calls succeeded, so the step did.
    let model = Arc::new(
        ScriptedModel::new()
            .reply_text(plan(&["add 3 and 4", "multiply the sum by 5"]))
            .reply_tool_call("add", json!({"a": "three", "b": 4}))
            .reply_tool_call("add", json!({"a": 3, "b": 4}))
            .reply_text("7")
            .reply_tool_call("multiply", json!({"a": 7, "b": 5}))
            .reply_text("35")
            .reply_text("35"),
    );
    let run = analyst::graph().run(PlanExecuteState::task("(3 + 4) * 5"), &deps(&model)).await.unwrap();
    assert_eq!(run.outcome, Outcome::Completed);
    assert_eq!(run.state.results[0].observations[0]["code"], "INVALID_ARGUMENT");
    assert!(run.state.results.iter().all(|r| r.ok));
}

#[tokio::test]
async fn the_finalizer_refuses_when_the_replanner_claims_to_be_done_with_a_step_unresolved() {
    let model = Arc::new(
        ScriptedModel::new()
            .reply_text(plan(&["add 3 and 4", "divide the sum by 0"]))
            .reply_tool_call("add", json!({"a": 3, "b": 4}))
            .reply_text("7")
            .reply_tool_call("divide", json!({"a": 7, "b": 0}))
            .reply_text("The answer is 42.")
            .reply_text(json!({"action": "finish", "reason": "the answer is clearly 42"}).to_string()),
    );
    let run = analyst::graph().run(PlanExecuteState::task("(3 + 4) / 0"), &deps(&model)).await.unwrap();
    let Outcome::Failed { node, error } = &run.outcome else { panic!("{:?}", run.outcome) };
    assert_eq!(node, "finalizer");
    assert_eq!(error.class, ErrorClass::Fatal);
    assert!(error.message.starts_with("refusing to answer: a step of the plan has no successful result"), "{error}");
    assert!(error.message.contains("step 2 `divide the sum by 0` (failed: `divide` refused (TOOL_ERROR)"), "{error}");
    assert_eq!(run.state.answer, None);
    // The step's claim ("The answer is 42.") did not make it a success.
    assert!(!run.state.results[1].ok);
    // The finalizer refused before asking the model for an answer.
    assert_eq!(model.remaining(), 0);
    assert_eq!(run.usage.model_calls, 6);
}

#[tokio::test]
async fn with_no_replans_left_a_failed_step_is_refused_at_the_finalizer() {
    let model = Arc::new(
        ScriptedModel::new()
            .reply_text(plan(&["delete the database", "add 1 and 1"]))
            .reply_tool_call("drop_tables", json!({}))
            .reply_text("done"),
    );
    let deps = deps(&model).with_max_replans(0);
    let run = analyst::graph().run(PlanExecuteState::task("clean up"), &deps).await.unwrap();
    let Outcome::Failed { node, error } = &run.outcome else { panic!("{:?}", run.outcome) };
    assert_eq!(node, "finalizer");
    assert!(error.message.contains("(0 of 0 replans used)"), "{error}");
    assert!(error.message.contains("PERMISSION_DENIED"), "{error}");
    assert!(error.message.contains("step 2 `add 1 and 1` (never ran)"), "{error}");
    assert_eq!(run.state.results[0].observations[0]["code"], "PERMISSION_DENIED");
    // The refused call was asked for, so it counts against the tool-call budget.
    assert_eq!(run.usage.tool_calls, 1);
}

#[tokio::test]
async fn a_plan_outside_two_to_six_steps_is_asked_again() {
    let model = Arc::new(
        ScriptedModel::new()
            .reply_text(plan(&["just answer"]))
            .reply_text("{\"steps\": [\"add 1 and 1\", \"add 2 and 2\"], \"confidence\": 0.9}")
            .reply_text(plan(&["add 1 and 1", "add the sum and 2"]))
            .reply_tool_call("add", json!({"a": 1, "b": 1}))
            .reply_text("2")
            .reply_tool_call("add", json!({"a": 2, "b": 2}))
            .reply_text("4")
            .reply_text("4"),
    );
    let run = analyst::graph().run(PlanExecuteState::task("1 + 1 + 2"), &deps(&model)).await.unwrap();
    assert_eq!(run.outcome, Outcome::Completed);
    assert_eq!(run.usage.model_calls, 8, "two re-asks count against the budget");
    let requests = model.requests();
    let correction = &requests[1].messages.last().unwrap().content;
    assert!(correction.contains("a plan has 2 to 6 steps, this one has 1"), "{correction}");
    let correction = &requests[2].messages.last().unwrap().content;
    assert!(correction.contains("unknown field `confidence`"), "{correction}");

    // Past the re-ask bound the planner fails with a correctable error.
    let seven: Vec<String> = (1..=7).map(|i| format!("step {i}")).collect();
    let seven: Vec<&str> = seven.iter().map(String::as_str).collect();
    let model = Arc::new(ScriptedModel::new().reply_text(plan(&seven)).reply_text(plan(&seven)));
    let run = analyst::graph().run(PlanExecuteState::task("x"), &deps(&model).with_max_reasks(1)).await.unwrap();
    let Outcome::Failed { node, error } = &run.outcome else { panic!("{:?}", run.outcome) };
    assert_eq!(node, "planner");
    assert_eq!(error.class, ErrorClass::Correctable);
    assert!(error.message.contains("this one has 7"), "{error}");
    assert!(run.state.plan.is_empty());
}

#[tokio::test]
async fn a_model_call_budget_ends_the_run_as_budget_exhausted() {
    let mut model = ScriptedModel::new().reply_text(plan(&["add 1 and 1", "add 2 and 2"]));
    for i in 0..20 {
        model = model.reply_tool_call("add", json!({"a": i, "b": 1}));
    }
    let model = Arc::new(model);
    let graph = analyst::graph();
    let run = graph
        .app()
        .runner(&deps(&model))
        .limits(Limits::none().model_calls(3))
        .run(PlanExecuteState::task("loop"))
        .await
        .unwrap();
    assert_eq!(run.outcome, Outcome::BudgetExhausted { which: Budget::ModelCalls });
    assert_eq!(run.usage.model_calls, 3);
    // The last finished step's state is kept: the plan is there, no answer.
    assert_eq!(run.state.plan.len(), 2);
    assert_eq!(run.state.answer, None);
}

#[tokio::test]
async fn a_step_still_calling_tools_after_its_turns_fails() {
    let mut model = ScriptedModel::new().reply_text(plan(&["add 1 and 1", "add 2 and 2"]));
    for i in 0..2 {
        model = model.reply_tool_call("add", json!({"a": i, "b": 1}));
    }
    let model = Arc::new(model.reply_text(json!({"action": "finish", "reason": "stuck"}).to_string()));
    let deps = deps(&model).with_max_turns_per_step(2);
    let run = analyst::graph().run(PlanExecuteState::task("loop"), &deps).await.unwrap();
    let Outcome::Failed { node, error } = &run.outcome else { panic!("{:?}", run.outcome) };
    assert_eq!(node, "finalizer");
    assert!(error.message.contains("still calling tools after 2 model turns"), "{error}");
}

// ---------------------------------------------------------------- side effects around an approval

/// Every ticket and refund that actually ran, by order.
static TICKETS: Mutex<Vec<String>> = Mutex::new(Vec::new());
static REFUNDS: Mutex<Vec<(String, u32)>> = Mutex::new(Vec::new());

fn tickets_for(order: &str) -> usize {
    TICKETS.lock().unwrap().iter().filter(|o| *o == order).count()
}

fn refunds_for(order: &str) -> Vec<u32> {
    REFUNDS.lock().unwrap().iter().filter(|(o, _)| o == order).map(|(_, a)| *a).collect()
}

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
    Ok(json!({ "refunded": args.amount, "order_id": args.order_id }))
}

const APPROVER_ROLE: &str = "refund-approver";

fn desk_authorizer() -> RoleAuthorizer {
    RoleAuthorizer::new().role_for(Risk::Irreversible, APPROVER_ROLE)
}

fn tool_results(req: &ChatRequest) -> Vec<Value> {
    req.messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .map(|m| serde_json::from_str(&m.content).unwrap_or(Value::Null))
        .collect()
}

/// A model that acts on what it is shown, like a real one, and whose every
/// reply carries fresh call ids. The plan's first step opens a ticket and
/// refunds the order (in two model turns, or in one reply with both calls
/// when `together`); the second step just confirms.
fn support_model(order: &'static str, together: bool) -> ScriptedModel {
    let ticket = move || ToolCall::new("ticket", "create_ticket", json!({ "order_id": order }));
    let refund = move || ToolCall::new("refund", "process_refund", json!({ "order_id": order, "amount": 40 }));
    let calls = |calls: Vec<ToolCall>| Ok(ChatReply { tool_calls: calls, ..ChatReply::default() });
    ScriptedModel::new()
        .respond_with(move |req: &ChatRequest| -> Result<ChatReply, ModelError> {
            if req.response_schema.is_some() {
                let plan = json!({ "steps": [format!("open a ticket and refund {order}"), "confirm to the customer"] });
                return Ok(ChatReply::text(plan.to_string()));
            }
            if req.tools.is_empty() {
                return Ok(ChatReply::text("ticket opened and refund issued"));
            }
            let ask = req.messages.iter().find(|m| m.role == Role::Human).map_or("", |m: &Message| &m.content);
            if ask.contains("Current step (2 of 2)") {
                return Ok(ChatReply::text("confirmed"));
            }
            let results = tool_results(req);
            let refunded = results.iter().any(|r| r["result"].get("refunded").is_some());
            let ticketed = results.iter().any(|r| r["result"].get("ticket").is_some());
            match (ticketed, refunded) {
                (_, true) => Ok(ChatReply::text("ticket opened, 40 refunded")),
                (false, false) if together => calls(vec![ticket(), refund()]),
                (false, false) => calls(vec![ticket()]),
                (true, false) => calls(vec![refund()]),
            }
        })
        .fresh_call_ids()
}

/// Runs the support agent on `order`, approving every approval it waits
/// for and resuming, at most `rounds` times; returns the last run.
async fn approve_and_resume(
    order: &'static str,
    together: bool,
    rounds: usize,
) -> (Run<PlanExecuteState>, Vec<ApprovalRecord>, usize) {
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let graph = support::graph().app().store(store);
    let desk = graph.approvals(desk_authorizer()).unwrap();
    let model = Arc::new(support_model(order, together));
    let deps = PlanExecuteDeps::new(model.clone());
    let alice = Approver::new("alice", [APPROVER_ROLE]);
    let mut run = graph
        .runner(&deps)
        .thread(order)
        .owner("agent:support")
        .run(PlanExecuteState::task(format!("order {order} arrived broken")))
        .await
        .unwrap();
    for _ in 0..rounds {
        let Outcome::Interrupted { pending, .. } = &run.outcome else { break };
        assert!(pending.iter().all(|p| p.kind == PendingKind::Approval), "{pending:?}");
        for record in desk.for_thread(order).unwrap() {
            if record.status == ApprovalStatus::Pending {
                desk.approve(&record.id, &alice).unwrap();
            }
        }
        run = graph.runner(&deps).thread(order).resume().await.unwrap();
    }
    (run, desk.for_thread(order).unwrap(), model.calls())
}

#[tokio::test]
async fn an_approved_refund_after_a_ticket_runs_once_and_the_ticket_is_not_repeated() {
    let (run, approvals, model_calls) = approve_and_resume("PE-1", false, 3).await;
    assert_eq!(tickets_for("PE-1"), 1, "the ticket is opened once");
    assert_eq!(refunds_for("PE-1"), [40], "the approved refund runs, once");
    assert_eq!(run.outcome, Outcome::Completed, "{:?}", run.state.results);
    assert_eq!(approvals.len(), 1, "one approval is asked for: {approvals:?}");
    assert_eq!(approvals[0].status, ApprovalStatus::Succeeded, "and used");
    assert!(run.state.results.iter().all(|r| r.ok), "{:?}", run.state.results);
    assert_eq!(run.state.answer.as_deref(), Some("ticket opened and refund issued"));
    // Planner, three model turns on step 1 (ticket, refund, done), one on
    // step 2, finalizer: the resume did not ask the model again.
    assert_eq!(model_calls, 6);
}

#[tokio::test]
async fn a_ticket_and_a_refund_in_one_reply_run_once_each_around_the_approval() {
    let (run, approvals, model_calls) = approve_and_resume("PE-2", true, 3).await;
    assert_eq!(tickets_for("PE-2"), 1, "the ticket is replayed from the journal, not opened again");
    assert_eq!(refunds_for("PE-2"), [40]);
    assert_eq!(run.outcome, Outcome::Completed, "{:?}", run.state.results);
    assert_eq!(approvals.len(), 1, "{approvals:?}");
    assert_eq!(approvals[0].status, ApprovalStatus::Succeeded);
    // The step's observations hold both results, in call order.
    let step = &run.state.results[0];
    assert_eq!(step.observations[0]["result"]["ticket"], "T-PE-2");
    assert_eq!(step.observations[1]["result"]["refunded"], 40);
    assert_eq!(model_calls, 5);
}
