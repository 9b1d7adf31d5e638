//! An approval is bound to the exact action it was granted for: thread,
//! node, tool and canonical arguments. A model that answers, after the
//! pause, with another tool under the approved call's id and arguments gets
//! nothing run, and the approval it tried to borrow is not marked used.

use std::sync::{Arc, Mutex};

use agentflow::approval::{ApprovalStatus, Approver, RoleAuthorizer};
use agentflow::message::{Message, Role, ToolCall};
use agentflow::model::{ChatModel, ChatReply, ChatRequest, ScriptedModel};
use agentflow::prebuilt::plan_execute::{PlanExecuteDeps, PlanExecuteState};
use agentflow::prebuilt::react::{ReactDeps, ReactState};
use agentflow::prelude::*;
use agentflow::tool::{Code, Risk};
use agentflow::{PendingKind, Run};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

// ---------------------------------------------------------------- tools

/// Every irreversible call that actually ran: (tool, target).
static RAN: Mutex<Vec<(&'static str, String)>> = Mutex::new(Vec::new());

fn ran(target: &str) -> Vec<&'static str> {
    RAN.lock().unwrap().iter().filter(|(_, t)| t == target).map(|(tool, _)| *tool).collect()
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct Target {
    id: String,
}

/// Refunds the order `id` in full. Irreversible.
#[tool(risk = irreversible)]
async fn refund_order(args: Target) -> Result<Value, ToolError> {
    RAN.lock().unwrap().push(("refund_order", args.id.clone()));
    Ok(json!({ "refunded": args.id }))
}

/// Deletes the account `id`. Irreversible.
#[tool(risk = irreversible)]
async fn delete_account(args: Target) -> Result<Value, ToolError> {
    RAN.lock().unwrap().push(("delete_account", args.id.clone()));
    Ok(json!({ "deleted": args.id }))
}

// ---------------------------------------------------------------- helpers

const ROLE: &str = "approver";
const OWNER: &str = "agent:support-bot";

fn authorizer() -> RoleAuthorizer {
    RoleAuthorizer::new().role_for(Risk::Irreversible, ROLE)
}

fn alice() -> Approver {
    Approver::new("alice", [ROLE])
}

use crate::support::stores::store;

fn call(id: &str, tool: &str, target: &str) -> ChatReply {
    ChatReply { tool_calls: vec![ToolCall::new(id, tool, json!({ "id": target }))], ..ChatReply::default() }
}

fn waiting<S>(run: &Run<S>) -> (String, Value) {
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("not paused: {:?}", run.outcome) };
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(pending[0].kind, PendingKind::Approval);
    (pending[0].payload["approval"].as_str().unwrap().to_string(), pending[0].payload.clone())
}

// ---------------------------------------------------------------- a node calling model and tools

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Chat {
    #[reduce(append)]
    log: Vec<String>,
}

pub struct ChatDeps {
    model: Arc<dyn ChatModel>,
}

#[graph(state = Chat, deps = ChatDeps, start = agent)]
mod one_node {
    use super::*;

    /// Model turns and tool calls in one node, as a hand-written agent does.
    #[node(goto = [END], tools = [refund_order, delete_account])]
    async fn agent(_s: &Chat, cx: &Ctx<ChatDeps>) -> Result<Step<Chat>, NodeError> {
        let mut messages = vec![Message::human("refund order 7")];
        let mut log = Vec::new();
        for _ in 0..4 {
            let request = ChatRequest::new(messages.clone()).with_tools(cx.tool_specs());
            let reply = cx.chat(&*cx.deps().model, &request).await?;
            if reply.tool_calls.is_empty() {
                return Ok(goto!(END, Chat::update().log(log)));
            }
            let calls = reply.tool_calls.clone();
            messages.push(reply.into_message("ai"));
            for observation in cx.call_tools(&calls).await? {
                log.push(observation.body.to_string());
                messages.push(observation.into_message());
            }
        }
        Err(NodeError::fatal("too many turns"))
    }
}

#[tokio::test]
async fn a_model_swapping_the_approved_tool_in_one_node_runs_nothing_and_uses_no_approval() {
    let graph = one_node::graph().app().store(store());
    let desk = graph.approvals(authorizer()).unwrap();
    let model = ScriptedModel::new()
        .reply(call("c1", "refund_order", "acct-1"))
        // After the pause the node starts over and asks again: the model now
        // answers with another tool under the approved call's id and arguments.
        .reply(call("c1", "delete_account", "acct-1"))
        .reply_text("done");
    let deps = ChatDeps { model: Arc::new(model) };
    let run = graph.runner(&deps).thread("bind-1").owner(OWNER).run(Chat::default()).await.unwrap();
    let (refund, payload) = waiting(&run);
    assert_eq!(payload["tool"], "refund_order");
    desk.approve(&refund, &alice()).unwrap();

    let resumed = graph.runner(&deps).thread("bind-1").resume().await.unwrap();
    // `delete_account` needs an approval of its own: the run pauses for it.
    let (delete, payload) = waiting(&resumed);
    assert_ne!(delete, refund);
    assert_eq!(payload["tool"], "delete_account");
    assert!(ran("acct-1").is_empty(), "nothing ran: {:?}", ran("acct-1"));
    assert_eq!(desk.get(&refund).unwrap().unwrap().status, ApprovalStatus::Approved, "the refund approval is unused");
    assert_eq!(desk.get(&delete).unwrap().unwrap().tool, "delete_account");
}

// ---------------------------------------------------------------- Plan-and-Execute

agentflow::plan_execute_agent!(mod planner, tools = [refund_order, delete_account], max_steps = 12);

#[tokio::test]
async fn plan_and_execute_swapping_the_approved_tool_gets_no_approval_of_the_used_one() {
    let graph = planner::graph().app().store(store());
    let desk = graph.approvals(authorizer()).unwrap();
    let model = ScriptedModel::new()
        .reply_text(json!({ "steps": ["refund order acct-2", "tell the customer"] }).to_string())
        .reply(call("c1", "refund_order", "acct-2"))
        .reply(call("c1", "delete_account", "acct-2"))
        .reply_text("done");
    let deps = PlanExecuteDeps::new(Arc::new(model));
    let run = graph.runner(&deps).thread("bind-2").owner(OWNER).run(PlanExecuteState::task("refund")).await.unwrap();
    let (refund, _) = waiting(&run);
    desk.approve(&refund, &alice()).unwrap();

    // The model's reply was committed before its tools ran, so the resumed
    // tool turn runs the approved call as recorded; the model's next answer
    // (another tool under the same call id and arguments) is a new call that
    // needs an approval of its own and never borrows the used one.
    let resumed = graph.runner(&deps).thread("bind-2").resume().await.unwrap();
    let (delete, payload) = waiting(&resumed);
    assert_ne!(delete, refund);
    assert_eq!(payload["tool"], "delete_account");
    assert_eq!(ran("acct-2"), vec!["refund_order"], "only the approved refund ran, once");
    assert_eq!(desk.get(&refund).unwrap().unwrap().status, ApprovalStatus::Succeeded);
    assert_eq!(desk.get(&delete).unwrap().unwrap().status, ApprovalStatus::Pending);
}

// ---------------------------------------------------------------- ReAct

agentflow::react_agent!(mod react, tools = [refund_order, delete_account], max_steps = 8);

/// The model's last word: every observation it got, in order.
fn summary(req: &ChatRequest) -> Result<ChatReply, agentflow::model::ModelError> {
    let seen: Vec<&str> = req.messages.iter().filter(|m| m.role == Role::Tool).map(|m| m.content.as_str()).collect();
    Ok(ChatReply::text(seen.join("\n")))
}

#[tokio::test]
async fn react_a_second_tool_under_the_approved_call_id_never_borrows_the_approval() {
    let graph = react::graph().app().store(store());
    let desk = graph.approvals(authorizer()).unwrap();
    let both = ChatReply {
        tool_calls: vec![
            ToolCall::new("c1", "refund_order", json!({ "id": "acct-3" })),
            ToolCall::new("c1", "delete_account", json!({ "id": "acct-3" })),
        ],
        ..ChatReply::default()
    };
    let model = ScriptedModel::new().reply(both).respond_with(summary);
    let deps = ReactDeps::new(Arc::new(model));
    let run = graph.runner(&deps).thread("bind-3").owner(OWNER).run(ReactState::ask("refund")).await.unwrap();
    let (refund, _) = waiting(&run);
    desk.approve(&refund, &alice()).unwrap();

    let done = graph.runner(&deps).thread("bind-3").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed, "{:?}", done.outcome);
    assert_eq!(ran("acct-3"), ["refund_order"], "the refund ran once, the deletion never");
    // The duplicate is refused, never reported OK with the refund's result.
    let answer = done.state.answer.unwrap();
    assert!(answer.contains("INVALID_ARGUMENT"), "{answer}");
    assert!(!answer.contains("deleted"), "{answer}");
    assert_eq!(desk.get(&refund).unwrap().unwrap().status, ApprovalStatus::Succeeded);
}

// ---------------------------------------------------------------- the direct path shares the ids

#[graph(state = Chat, deps = (), start = direct)]
mod direct_then_model {
    use super::*;

    /// Calls the refund from its own code, then hands a "model" call that
    /// reuses the direct call's id to the gateway.
    #[node(goto = [END], tools = [refund_order, delete_account])]
    async fn direct(_s: &Chat, cx: &Ctx<()>) -> Result<Step<Chat>, NodeError> {
        let first = cx.run_tool(refund_order, json!({ "id": "acct-4" })).await?;
        let reused = ToolCall::new("direct-refund_order-1", "delete_account", json!({ "id": "acct-4" }));
        let second = cx.call_tool(&reused).await?;
        Ok(goto!(END, Chat::update().log(vec![first.body.to_string(), second.body.to_string()])))
    }
}

#[tokio::test]
async fn a_call_reusing_a_direct_call_id_is_refused_as_invalid() {
    let graph = direct_then_model::graph().app().store(store());
    let desk = graph.approvals(authorizer()).unwrap();
    let run = graph.runner(&()).thread("bind-4").owner(OWNER).run(Chat::default()).await.unwrap();
    let (refund, _) = waiting(&run);
    desk.approve(&refund, &alice()).unwrap();
    let done = graph.runner(&()).thread("bind-4").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed, "{:?}", done.outcome);
    assert_eq!(ran("acct-4"), ["refund_order"]);
    let second: Value = serde_json::from_str(&done.state.log[1]).unwrap();
    assert_eq!(second["code"], serde_json::to_value(Code::InvalidArgument).unwrap(), "{second}");
}

// ---------------------------------------------------------------- no owner, no approval request

#[tokio::test]
async fn a_run_without_an_owner_cannot_request_an_approval() {
    let graph = one_node::graph().app().store(store());
    let desk = graph.approvals(authorizer()).unwrap();
    let model = ScriptedModel::new().reply(call("c1", "refund_order", "acct-5"));
    let deps = ChatDeps { model: Arc::new(model) };
    // Without an owner the requester would be the thread id, and whoever
    // started the run could approve their own call.
    // The run is refused before it starts: its node lists a tool the policy gates.
    let err = graph.runner(&deps).thread("bind-5").run(Chat::default()).await.unwrap_err();
    let agentflow::RunError::OwnerRequired(refused) = &err else { panic!("not refused: {err:?}") };
    assert_eq!((refused.node, refused.tool), ("agent", "refund_order"));
    assert!(err.to_string().contains(".owner("), "{err}");
    assert!(desk.for_thread("bind-5").unwrap().is_empty(), "no approval was requested");
    assert!(ran("acct-5").is_empty());
}

// ---------------------------------------------------------------- map-worker instances

/// Pages a team. Irreversible.
#[tool(risk = irreversible)]
async fn page_team(args: Target) -> Result<Value, ToolError> {
    RAN.lock().unwrap().push(("page_team", args.id.clone()));
    Ok(json!({ "paged": args.id }))
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Incident {
    team: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Incidents {
    #[reduce(append)]
    paged: Vec<String>,
}

#[graph(state = Incidents, deps = (), start = fan)]
mod pagers {
    use super::*;

    #[node(goto = [page])]
    async fn fan(_s: &Incidents) -> Step<Incidents> {
        let incident = Incident { team: "acct-9".to_string() };
        goto!(each(page, vec![incident.clone(), incident]))
    }

    /// Each instance makes the same call: same tool, same call id, same arguments.
    #[node(goto = [END], tools = [page_team], parallel = 1)]
    async fn page(_s: &Incidents, #[payload] incident: &Incident, cx: &Ctx<()>) -> Result<Step<Incidents>, NodeError> {
        let observation = cx.run_tool(page_team, json!({ "id": incident.team })).await?;
        Ok(goto!(END, Incidents::update().paged(vec![observation.body.to_string()])))
    }
}

/// Two instances of a map worker making the same call each need an approval of their own: one
/// approval never lets the call run once per instance.
#[tokio::test]
async fn each_instance_of_a_map_worker_needs_its_own_approval_for_the_same_call() {
    let store = store();
    let graph = pagers::graph().app().store(Arc::clone(&store));
    let desk = graph.approvals(authorizer()).unwrap();
    let run = graph.runner(&()).thread("bind-map").owner(OWNER).run(Incidents::default()).await.unwrap();
    assert!(matches!(run.outcome, Outcome::Interrupted { .. }), "{:?}", run.outcome);
    let asked: Vec<String> = desk.for_thread("bind-map").unwrap().into_iter().map(|r| r.id).collect();
    assert_eq!(asked.len(), 2, "one approval per instance: {asked:?}");

    desk.approve(&asked[0], &alice()).unwrap();
    let resumed = graph.runner(&()).thread("bind-map").resume().await.unwrap();
    assert!(matches!(resumed.outcome, Outcome::Interrupted { .. }), "{:?}", resumed.outcome);
    assert_eq!(ran("acct-9"), ["page_team"], "one approval, one call");
    let statuses: Vec<ApprovalStatus> = asked.iter().map(|id| desk.get(id).unwrap().unwrap().status).collect();
    assert_eq!(statuses, [ApprovalStatus::Succeeded, ApprovalStatus::Pending]);

    desk.approve(&asked[1], &alice()).unwrap();
    let done = graph.runner(&()).thread("bind-map").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed, "{:?}", done.outcome);
    assert_eq!(ran("acct-9"), ["page_team", "page_team"], "each approved call ran once");
    assert_eq!(done.state.paged.len(), 2);
}
