//! A tool that keeps its name while a newer version of the graph changes its risk class: the
//! approval a thread parked on the older version waits on has the same id after the move, but
//! neither its decision nor the approvers of the old class authorize the call. The move asks
//! again under a new id, for the new class, audited with both classes; the old record is
//! withdrawn, and the new one is used once.

use std::sync::{Arc, Mutex};

use agentflow::approval::{ApprovalStatus, Approver, RoleAuthorizer};
use agentflow::prelude::*;
use agentflow::tool::Risk;
use agentflow::{PendingKind, Store};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::support::stores::store;

/// Every call `warn` ran: (risk class it ran as, recipient).
static RAN: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

fn ran_for(to: &str) -> Vec<String> {
    RAN.lock().unwrap().iter().filter(|(_, t)| t == to).map(|(risk, _)| risk.clone()).collect()
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct To {
    to: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Job {
    pub to: String,
    #[reduce(append)]
    pub log: Vec<String>,
}

mod v1 {
    use super::*;

    /// Warns someone (version 1: an external call, support decides it).
    #[tool(risk = external)]
    pub async fn warn(args: To) -> Result<Value, ToolError> {
        RAN.lock().unwrap().push(("external".into(), args.to));
        Ok(json!({ "warned": true }))
    }

    #[graph(state = Job, start = send, id = "risks")]
    pub mod flow {
        use super::*;

        #[node(goto = [END], tools = [warn])]
        async fn send(s: &Job, cx: &Ctx<()>) -> Result<Step<Job>, NodeError> {
            let obs = cx.run_tool(warn, json!({ "to": s.to })).await?;
            Ok(goto!(END, Job::update().log(vec![obs.body.to_string()])))
        }
    }
}

mod v2 {
    use super::*;

    /// Warns someone (version 2: the same name, now irreversible: finance decides it).
    #[tool(risk = irreversible)]
    pub async fn warn(args: To) -> Result<Value, ToolError> {
        RAN.lock().unwrap().push(("irreversible".into(), args.to));
        Ok(json!({ "warned": true }))
    }

    #[graph(state = Job, start = send, id = "risks", version = 2)]
    pub mod flow {
        use super::*;

        #[node(goto = [END], tools = [warn])]
        async fn send(s: &Job, cx: &Ctx<()>) -> Result<Step<Job>, NodeError> {
            let obs = cx.run_tool(warn, json!({ "to": s.to })).await?;
            Ok(goto!(END, Job::update().log(vec![obs.body.to_string()])))
        }
    }
}

const OWNER: &str = "agent:risks";

fn authorizer() -> RoleAuthorizer {
    RoleAuthorizer::new().role_for(Risk::External, "support").role_for(Risk::Irreversible, "finance")
}

fn sam() -> Approver {
    Approver::new("sam", ["support"])
}

fn fin() -> Approver {
    Approver::new("fin", ["finance"])
}

fn job(to: &str) -> Job {
    Job { to: to.into(), log: vec![] }
}

/// The one approval a paused run waits on: (id, payload).
fn one_approval(run: &agentflow::Run<Job>) -> (String, Value) {
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("not paused: {:?}", run.outcome) };
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(pending[0].kind, PendingKind::Approval, "{pending:?}");
    (pending[0].payload["approval"].as_str().expect("an approval id").to_string(), pending[0].payload.clone())
}

/// Parks thread `to` on version 1, waiting for the approval of `warn`; returns its id.
async fn parked(store: &Arc<dyn Store>, to: &str) -> String {
    let old = v1::flow::graph().app().store(Arc::clone(store));
    let paused = old.runner(&()).thread(to).owner(OWNER).run(job(to)).await.unwrap();
    one_approval(&paused).0
}

/// Resumes `to` on version 2: it waits on a new approval of `warn`, for the irreversible class,
/// and the move audits why; returns the new approval's id.
async fn moved(new: &App<Job>, old_id: &str, to: &str) -> String {
    let again = new.runner(&()).thread(to).resume().await.unwrap();
    assert!(ran_for(to).is_empty(), "ran under a decision for the external class: {:?}", ran_for(to));
    let (id, payload) = one_approval(&again);
    assert_ne!(id, old_id, "asked again under a new id");
    assert_eq!((payload["tool"].as_str(), payload["risk"].as_str()), (Some("warn"), Some("irreversible")));
    let moves: Vec<Value> =
        new.audit_log(to).unwrap().into_iter().filter(|e| e.kind == "graph.migrated").map(|e| e.detail).collect();
    assert_eq!(moves.len(), 1, "{moves:?}");
    let audited = &moves[0]["approvals"][0];
    assert_eq!((audited["from"].as_str(), audited["to"].as_str()), (Some(old_id), Some(id.as_str())), "{audited}");
    assert_eq!(audited["reason"], "risk changed from external to irreversible", "{audited}");
    assert_eq!(audited["decision"], Value::Null, "{audited}");
    let desk = new.approvals(authorizer()).unwrap();
    let old = desk.get(old_id).unwrap().unwrap();
    assert_eq!(old.status, ApprovalStatus::Cancelled);
    let note = old.decision_note.unwrap_or_default();
    assert!(note.contains("risk changed from external to irreversible"), "{note}");
    id
}

/// Finance decides the new approval; the call runs once, as the irreversible tool, and a
/// resume of the finished thread runs nothing again.
async fn finance_lets_it_run(new: &App<Job>, id: &str, to: &str) {
    let desk = new.approvals(authorizer()).unwrap();
    assert_eq!(desk.get(id).unwrap().unwrap().status, ApprovalStatus::Pending);
    assert!(desk.approve(id, &sam()).is_err(), "support may not decide an irreversible call");
    desk.approve(id, &fin()).unwrap();
    let done = new.runner(&()).thread(to).resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(ran_for(to), ["irreversible"]);
    assert_eq!(desk.get(id).unwrap().unwrap().status, ApprovalStatus::Succeeded, "used once");
}

#[tokio::test]
async fn a_decision_for_the_old_risk_class_does_not_run_the_call_after_the_move() {
    let store = store();
    let old_id = parked(&store, "decided").await;
    let old = v1::flow::graph().app().store(Arc::clone(&store));
    old.approvals(authorizer()).unwrap().approve(&old_id, &sam()).unwrap();
    let new = v2::flow::graph().app().store(Arc::clone(&store));
    let id = moved(&new, &old_id, "decided").await;
    finance_lets_it_run(&new, &id, "decided").await;
}

#[tokio::test]
async fn a_pending_approval_is_decided_by_the_new_risk_class_after_the_move() {
    let store = store();
    let old_id = parked(&store, "pending").await;
    let new = v2::flow::graph().app().store(Arc::clone(&store));
    let id = moved(&new, &old_id, "pending").await;
    let desk = new.approvals(authorizer()).unwrap();
    assert!(desk.approve(&old_id, &sam()).is_err(), "the old request is withdrawn");
    finance_lets_it_run(&new, &id, "pending").await;
}

/// Without a move (a thread whose approval an earlier build moved as it was): the executor
/// itself refuses a decision taken for another class and asks for the tool's class.
#[tokio::test]
async fn the_executor_asks_again_for_a_decision_of_another_risk_class() {
    let store = store();
    let old_id = parked(&store, "unmoved").await;
    let old = v1::flow::graph().app().store(Arc::clone(&store));
    old.approvals(authorizer()).unwrap().approve(&old_id, &sam()).unwrap();
    // The thread on version 2 as if moved without a look at its approval.
    let new = v2::flow::graph().app().store(Arc::clone(&store));
    let mut record = store.thread("unmoved").unwrap().unwrap();
    record.graph_fingerprint = new.graph().fingerprint().to_string();
    store.commit_step(agentflow_store::StepCommit::new(record)).unwrap();
    let again = new.runner(&()).thread("unmoved").resume().await.unwrap();
    assert!(ran_for("unmoved").is_empty(), "ran under support's decision: {:?}", ran_for("unmoved"));
    let (id, payload) = one_approval(&again);
    assert_ne!(id, old_id);
    assert_eq!(payload["risk"], "irreversible");
    finance_lets_it_run(&new, &id, "unmoved").await;
}
