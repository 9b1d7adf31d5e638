//! What a thread's move to a newer version of its graph may not skip: the approver rules of a
//! tool whose risk class the new version changed (an approval carries over only to a call of the
//! same class), and the gate of a call the move found run (only a result the journal holds for
//! that very call, map instance included, is replayed).

use std::sync::{Arc, Mutex};

use agentflow::approval::{ApprovalStatus, Approver, RoleAuthorizer};
use agentflow::message::ToolCall;
use agentflow::model::ChatReply;
use agentflow::prelude::*;
use agentflow::tool::{Decision, Observation, Risk, RiskPolicy};
use agentflow::{PendingKind, Store};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::support::stores::store;

/// Every call a tool ran: (tool, recipient).
static RAN: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

/// The tools that ran for `to`, in order.
fn ran_for(to: &str) -> Vec<String> {
    RAN.lock().unwrap().iter().filter(|(_, t)| t == to).map(|(tool, _)| tool.clone()).collect()
}

fn ran(tool: &str, to: &str) -> Result<Value, ToolError> {
    RAN.lock().unwrap().push((tool.to_string(), to.to_string()));
    Ok(json!({ "done": tool }))
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct To {
    to: String,
}

/// Notifies someone (version 1: an external call).
#[tool(risk = external)]
pub async fn notify(args: To) -> Result<Value, ToolError> {
    ran("notify", &args.to)
}

/// Notifies someone at once (version 2: irreversible).
#[tool(risk = irreversible)]
pub async fn notify_now(args: To) -> Result<Value, ToolError> {
    ran("notify_now", &args.to)
}

/// Charges someone.
#[tool(risk = irreversible)]
pub async fn charge(args: To) -> Result<Value, ToolError> {
    ran("charge", &args.to)
}

/// Bills someone (version 2's name of `charge`).
#[tool(risk = irreversible)]
pub async fn bill(args: To) -> Result<Value, ToolError> {
    ran("bill", &args.to)
}

/// Looks someone up (a read the policy routes to a person).
#[tool(risk = read)]
pub async fn lookup(args: To) -> Result<Value, ToolError> {
    ran("lookup", &args.to)
}

/// Finds someone (version 2's name of `lookup`).
#[tool(risk = read)]
pub async fn find(args: To) -> Result<Value, ToolError> {
    ran("find", &args.to)
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Job {
    pub kind: String,
    pub to: String,
    #[reduce(append)]
    pub log: Vec<String>,
}

/// The model's reply in node `ask`: two look-ups (of `to` and of its office).
fn lookups(job: &Job) -> ChatReply {
    let mut reply = ChatReply::text("");
    reply.tool_calls = vec![
        ToolCall::new("call-1", "lookup", json!({ "to": job.to })),
        ToolCall::new("call-2", "lookup", json!({ "to": format!("office of {}", job.to) })),
    ];
    reply
}

/// The model's reply in a map instance: the same call, under the same id, in every instance.
fn charge_reply(to: &str) -> ChatReply {
    let mut reply = ChatReply::text("");
    reply.tool_calls = vec![ToolCall::new("call_0", "charge", json!({ "to": to }))];
    reply
}

fn observed(o: &Observation) -> String {
    match o.code() {
        Some(code) => format!("{}: {}: {}", o.tool, code.as_str(), o.body["detail"].as_str().unwrap_or_default()),
        None => format!("{}: {}", o.tool, o.body),
    }
}

mod v1 {
    use super::*;

    #[graph(state = Job, start = intake, max_steps = 10, id = "gates")]
    pub mod flow {
        use super::*;

        #[node(goto = [send, pay, ask, spread])]
        async fn intake(s: &Job) -> Step<Job> {
            match s.kind.as_str() {
                "send" => goto!(send),
                "pay" => goto!(pay),
                "ask" => goto!(ask),
                _ => goto!(spread),
            }
        }

        #[node(goto = [END], tools = [notify])]
        async fn send(s: &Job, cx: &Ctx<()>) -> Result<Step<Job>, NodeError> {
            let obs = cx.run_tool(notify, json!({ "to": s.to })).await?;
            Ok(goto!(END, Job::update().log(vec![observed(&obs)])))
        }

        #[node(goto = [END], tools = [charge])]
        async fn pay(s: &Job, cx: &Ctx<()>) -> Result<Step<Job>, NodeError> {
            let obs = cx.run_tool(charge, json!({ "to": s.to })).await?;
            Ok(goto!(END, Job::update().log(vec![observed(&obs)])))
        }

        #[node(goto = [END], tools = [lookup])]
        async fn ask(s: &Job, cx: &Ctx<()>) -> Result<Step<Job>, NodeError> {
            let reply = cx.effect("reply", |_| async { Ok::<_, NodeError>(lookups(s)) }).await?;
            let observations = cx.call_tools(&reply.tool_calls).await?;
            Ok(goto!(END, Job::update().log(observations.iter().map(observed).collect())))
        }

        #[node(goto = [fan])]
        async fn spread(s: &Job) -> Step<Job> {
            goto!(each(fan, vec![s.to.clone(), s.to.clone()]))
        }

        #[node(goto = [END], tools = [charge])]
        async fn fan(_s: &Job, #[payload] to: &str, cx: &Ctx<()>) -> Result<Step<Job>, NodeError> {
            let reply = cx.effect("reply", |_| async { Ok::<_, NodeError>(charge_reply(to)) }).await?;
            let observations = cx.call_tools(&reply.tool_calls).await?;
            Ok(goto!(END, Job::update().log(observations.iter().map(observed).collect())))
        }
    }
}

mod v2 {
    use super::*;

    #[graph(state = Job, start = intake, max_steps = 10, id = "gates", version = 2,
            migrate(from = 1, tools(notify -> notify_now, charge -> bill, lookup -> find)))]
    pub mod flow {
        use super::*;

        #[node(goto = [send, pay, ask, spread])]
        async fn intake(s: &Job) -> Step<Job> {
            match s.kind.as_str() {
                "send" => goto!(send),
                "pay" => goto!(pay),
                "ask" => goto!(ask),
                _ => goto!(spread),
            }
        }

        #[node(goto = [END], tools = [notify_now])]
        async fn send(s: &Job, cx: &Ctx<()>) -> Result<Step<Job>, NodeError> {
            let obs = cx.run_tool(notify_now, json!({ "to": s.to })).await?;
            Ok(goto!(END, Job::update().log(vec![observed(&obs)])))
        }

        #[node(goto = [END], tools = [bill])]
        async fn pay(s: &Job, cx: &Ctx<()>) -> Result<Step<Job>, NodeError> {
            let obs = cx.run_tool(bill, json!({ "to": s.to })).await?;
            Ok(goto!(END, Job::update().log(vec![observed(&obs)])))
        }

        #[node(goto = [END], tools = [find])]
        async fn ask(s: &Job, cx: &Ctx<()>) -> Result<Step<Job>, NodeError> {
            let reply = cx.effect("reply", |_| async { Ok::<_, NodeError>(lookups(s)) }).await?;
            let observations = cx.call_tools(&reply.tool_calls).await?;
            Ok(goto!(END, Job::update().log(observations.iter().map(observed).collect())))
        }

        #[node(goto = [fan])]
        async fn spread(s: &Job) -> Step<Job> {
            goto!(each(fan, vec![s.to.clone(), s.to.clone()]))
        }

        #[node(goto = [END], tools = [bill])]
        async fn fan(_s: &Job, #[payload] to: &str, cx: &Ctx<()>) -> Result<Step<Job>, NodeError> {
            let reply = cx.effect("reply", |_| async { Ok::<_, NodeError>(charge_reply(to)) }).await?;
            let observations = cx.call_tools(&reply.tool_calls).await?;
            Ok(goto!(END, Job::update().log(observations.iter().map(observed).collect())))
        }
    }
}

const OWNER: &str = "agent:gates";

/// Reads (`lookup`, `find`) go to a person; the other classes as by default.
fn policy() -> RiskPolicy {
    RiskPolicy::default().tool("lookup", Decision::NeedsApproval).tool("find", Decision::NeedsApproval)
}

fn old_app(store: &Arc<dyn Store>) -> App<Job> {
    v1::flow::graph().app().store(Arc::clone(store)).policy(policy())
}

fn new_app(store: &Arc<dyn Store>) -> App<Job> {
    v2::flow::graph().app().store(Arc::clone(store)).policy(policy())
}

/// Support decides external calls and reads; finance irreversible ones.
fn authorizer() -> RoleAuthorizer {
    RoleAuthorizer::new()
        .role_for(Risk::External, "support")
        .role_for(Risk::Read, "support")
        .role_for(Risk::Irreversible, "finance")
}

fn sam() -> Approver {
    Approver::new("sam", ["support"])
}

fn fin() -> Approver {
    Approver::new("fin", ["finance"])
}

fn job(kind: &str, to: &str) -> Job {
    Job { kind: kind.into(), to: to.into(), log: vec![] }
}

/// The approvals a paused run waits on: (approval id, payload, map instance).
fn approvals_awaited(run: &agentflow::Run<Job>) -> Vec<(String, Value, Option<u32>)> {
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("not paused: {:?}", run.outcome) };
    pending
        .iter()
        .map(|p| {
            assert_eq!(p.kind, PendingKind::Approval, "{pending:?}");
            (p.payload["approval"].as_str().expect("an approval id").to_string(), p.payload.clone(), p.instance)
        })
        .collect()
}

fn one_approval(run: &agentflow::Run<Job>) -> (String, Value) {
    let mut all = approvals_awaited(run);
    assert_eq!(all.len(), 1, "{all:?}");
    let (id, payload, _) = all.remove(0);
    (id, payload)
}

fn migrated_entries(app: &App<Job>, thread: &str) -> Vec<Value> {
    app.audit_log(thread).unwrap().into_iter().filter(|e| e.kind == "graph.migrated").map(|e| e.detail).collect()
}

/// Version 2 renames `notify` (external, decided by support) to `notify_now` (irreversible,
/// decided by finance). Support's approval on version 1 does not let the irreversible call run:
/// the move asks again, support may not decide it, finance may; the move audits why.
#[tokio::test]
async fn an_approval_does_not_carry_over_to_a_tool_of_another_risk_class() {
    let store = store();
    let old = old_app(&store);
    let paused = old.runner(&()).thread("risk-1").owner(OWNER).run(job("send", "risk-1")).await.unwrap();
    let (old_id, _) = one_approval(&paused);
    old.approvals(authorizer()).unwrap().approve(&old_id, &sam()).unwrap();
    let new = new_app(&store);
    let again = new.runner(&()).thread("risk-1").resume().await.unwrap();
    assert!(ran_for("risk-1").is_empty(), "ran under support's approval: {:?}", ran_for("risk-1"));
    let (moved, payload) = one_approval(&again);
    assert_eq!(payload["tool"], "notify_now");
    let entry = migrated_entries(&new, "risk-1").remove(0);
    let audited = &entry["approvals"][0];
    assert_eq!(audited["from"].as_str(), Some(old_id.as_str()), "{entry}");
    assert_eq!(audited["decision"], Value::Null, "{entry}");
    assert_eq!(audited["reason"], "risk changed from external to irreversible", "{entry}");
    let desk = new.approvals(authorizer()).unwrap();
    assert_eq!(desk.get(&moved).unwrap().unwrap().status, ApprovalStatus::Pending);
    assert!(desk.approve(&moved, &sam()).is_err(), "support may not decide an irreversible call");
    desk.approve(&moved, &fin()).unwrap();
    let done = new.runner(&()).thread("risk-1").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(ran_for("risk-1"), ["notify_now"]);
}

/// A rejection carries over whatever the risk class: it lets nothing run, so nobody is asked
/// again.
#[tokio::test]
async fn a_rejection_carries_over_to_a_tool_of_another_risk_class() {
    let store = store();
    let old = old_app(&store);
    let paused = old.runner(&()).thread("risk-2").owner(OWNER).run(job("send", "risk-2")).await.unwrap();
    let (old_id, _) = one_approval(&paused);
    old.approvals(authorizer()).unwrap().reject(&old_id, &sam(), "not now").unwrap();
    let new = new_app(&store);
    let done = new.runner(&()).thread("risk-2").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed, "not asked again");
    assert!(done.state.log[0].contains("rejected by sam: not now"), "{:?}", done.state.log);
    assert!(ran_for("risk-2").is_empty());
    let entry = migrated_entries(&new, "risk-2").remove(0);
    assert_eq!(entry["approvals"][0]["decision"], "REJECTED", "{entry}");
}

/// An approval carried over (the tool renamed, its risk class the same) is audited as carried:
/// the `approval.approved` entry of the new approval names its decider, and its note the
/// approval the decision was taken on and the versions of the move.
#[tokio::test]
async fn a_carried_approval_is_audited_as_carried_by_the_move() {
    let store = store();
    let old = old_app(&store);
    let paused = old.runner(&()).thread("carry-1").owner(OWNER).run(job("pay", "carry-1")).await.unwrap();
    let (old_id, _) = one_approval(&paused);
    old.approvals(authorizer()).unwrap().approve(&old_id, &fin()).unwrap();
    let new = new_app(&store);
    let done = new.runner(&()).thread("carry-1").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed, "not asked again");
    assert_eq!(ran_for("carry-1"), ["bill"]);
    let entry = migrated_entries(&new, "carry-1").remove(0);
    let moved = entry["approvals"][0]["to"].as_str().expect("the carried approval").to_string();
    let log = new.audit_log("carry-1").unwrap();
    let approved = log
        .iter()
        .find(|e| e.kind == "approval.approved" && e.detail["approval"] == json!(moved))
        .expect("the carried decision is audited");
    assert_eq!((approved.actor.as_str(), approved.detail["decided_by"].as_str()), ("fin", Some("fin")));
    let note = approved.detail["note"].as_str().unwrap_or_default();
    assert!(note.contains(&format!("carried_from: `{old_id}`")), "{note}");
    assert!(note.contains("from version 1 to version 2 of graph `gates`"), "{note}");
}

/// A read the policy routes to a person ran on version 1 under its approval; after the move
/// (`lookup` renamed `find`) its journaled result is replayed, not run again without one.
#[tokio::test]
async fn a_read_that_ran_under_an_approval_before_the_move_is_replayed() {
    let store = store();
    let old = old_app(&store);
    let desk = old.approvals(authorizer()).unwrap();
    let paused = old.runner(&()).thread("read-1").owner(OWNER).run(job("ask", "read-1")).await.unwrap();
    desk.approve(&one_approval(&paused).0, &sam()).unwrap();
    let second = old.runner(&()).thread("read-1").resume().await.unwrap();
    let (second_id, payload) = one_approval(&second);
    assert_eq!(payload["args"]["to"], "office of read-1");
    assert_eq!(ran_for("read-1"), ["lookup"]);
    let new = new_app(&store);
    let again = new.runner(&()).thread("read-1").resume().await.unwrap();
    assert_eq!(ran_for("read-1"), ["lookup"], "the read ran again, without an approval");
    let (moved, payload) = one_approval(&again);
    assert_ne!(moved, second_id);
    assert_eq!(payload["tool"], "find");
    new.approvals(authorizer()).unwrap().approve(&moved, &sam()).unwrap();
    let done = new.runner(&()).thread("read-1").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(ran_for("read-1"), ["lookup"]);
    assert_eq!(ran_for("office of read-1"), ["find"]);
    let said = [r#"find: {"ok":true,"result":{"done":"lookup"}}"#, r#"find: {"ok":true,"result":{"done":"find"}}"#];
    assert_eq!(done.state.log, said, "the first call's result as it ran on version 1");
}

/// Two map instances make the same call (same id, same arguments). Instance 0's ran on version
/// 1 under its approval; instance 1's waits for its own when the thread moves. After the move
/// instance 1's call does not count as run: it waits for its approval, and runs once given.
#[tokio::test]
async fn a_map_instance_does_not_run_under_another_instances_approval_after_the_move() {
    let store = store();
    let old = old_app(&store);
    let desk = old.approvals(authorizer()).unwrap();
    let paused = old.runner(&()).thread("map-1").owner(OWNER).run(job("spread", "map-1")).await.unwrap();
    let awaited = approvals_awaited(&paused);
    assert_eq!(awaited.len(), 2, "{awaited:?}");
    let first = awaited.iter().find(|(_, _, i)| *i == Some(0)).expect("instance 0 waits");
    desk.approve(&first.0, &fin()).unwrap();
    let second = old.runner(&()).thread("map-1").resume().await.unwrap();
    let (_, payload) = one_approval(&second);
    assert_eq!(payload["tool"], "charge");
    assert_eq!(ran_for("map-1"), ["charge"]);
    let new = new_app(&store);
    let again = new.runner(&()).thread("map-1").resume().await.unwrap();
    assert_eq!(ran_for("map-1"), ["charge"], "instance 1 ran without its approval");
    let (moved, payload) = one_approval(&again);
    assert_eq!(payload["tool"], "bill");
    new.approvals(authorizer()).unwrap().approve(&moved, &fin()).unwrap();
    let done = new.runner(&()).thread("map-1").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(ran_for("map-1"), ["charge", "bill"]);
}
