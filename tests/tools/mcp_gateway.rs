//! MCP tools inside durable runs, on the reference server: a call goes through the gateway
//! (approval, journal, audit), and a call whose server is killed mid-call is settled like a call
//! cut off by a crash: a non-read call waits for a person and is never sent again on its own; a
//! read runs again on a server that answers.

use std::sync::Arc;
use std::time::Duration;

use agentflow::approval::{ApprovalStatus, Approver, RoleAuthorizer, Settlement};
use agentflow::prelude::*;
use agentflow::tool::{Risk, RiskPolicy};
use agentflow::{App, PendingKind};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::support::mcp::{alive, everything_stdio, kill};
use crate::support::stores::open_redb;
use crate::support::temp::temp_dir;

agentflow::mcp_tools! {
    /// The reference server, with its long-running operation classed as a call that acts.
    pub mod everything from "../../mcp/everything.json" {
        echo: read,
        get_annotated_message: read,
        get_env: read,
        get_resource_links: read,
        get_resource_reference: read,
        get_structured_content: read,
        get_sum: read,
        get_tiny_image: read,
        gzip_file_as_resource: external,
        toggle_simulated_logging: external,
        toggle_subscriber_updates: external,
        trigger_long_running_operation: external,
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
pub struct Job {
    seconds: f64,
    result: Option<Value>,
}

#[graph(state = Job, start = work)]
pub mod long_job {
    use super::*;

    #[node(goto = [END], tools = [everything::trigger_long_running_operation], retry(attempts = 3, base = 1ms, jitter = false))]
    async fn work(s: &Job, cx: &Ctx<()>) -> Result<Step<Job>, NodeError> {
        let args = everything::TriggerLongRunningOperationArgs { duration: Some(s.seconds), steps: Some(2.0) };
        let obs = cx.run_tool(everything::trigger_long_running_operation, args).await?;
        Ok(goto!(END, Job::update().result(Some(obs.body))))
    }
}

const OWNER: &str = "agent:mcp";

fn authorizer() -> RoleAuthorizer {
    RoleAuthorizer::new().role_for(Risk::External, "ops")
}

async fn app(path: &std::path::Path) -> Option<App<Job>> {
    let client = everything::connect(everything_stdio()?).await.expect("connect");
    let store = open_redb(path).expect("store");
    Some(long_job::graph().app().store(Arc::new(store)).policy(RiskPolicy::allow_all()).mcp(client))
}

#[tokio::test]
async fn a_call_whose_server_dies_mid_call_waits_for_a_person_and_is_not_sent_again() {
    let dir = temp_dir("mcp-gateway-dies");
    let path = dir.join("runs.redb");
    let Some(app) = app(&path).await else { return };
    let pid = app.mcp_servers().get("everything").and_then(|c| c.child_pid()).expect("a child process");
    let run = {
        let app = app.clone();
        tokio::spawn(async move {
            app.runner(&()).owner(OWNER).thread("job-1").run(Job { seconds: 5.0, result: None }).await
        })
    };
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(!run.is_finished(), "the operation runs for 5 s");
    kill(pid);
    let run = tokio::time::timeout(Duration::from_secs(20), run).await.expect("the run ends").unwrap().unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{:?}", run.outcome) };
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(pending[0].kind, PendingKind::OutcomeUnknown, "the node's retries did not send it again");
    let id = pending[0].payload["approval"].as_str().expect("a record").to_string();
    assert!(!alive(pid));

    // A new server: resuming before anyone decided sends nothing and waits again.
    drop(app);
    let Some(app) = self::app(&path).await else { return };
    let again = app.runner(&()).thread("job-1").resume().await.unwrap();
    let Outcome::Interrupted { pending, .. } = &again.outcome else { panic!("{:?}", again.outcome) };
    assert_eq!(pending[0].kind, PendingKind::OutcomeUnknown);

    // The operator settles it as failed: the node sees that, and the call is not sent.
    let desk = app.approvals(authorizer()).unwrap();
    let settled =
        desk.settle(&id, &Approver::new("olga", ["ops"]), Settlement::Failed("the server was restarted".into()));
    assert_eq!(settled.unwrap().status, ApprovalStatus::Failed);
    let done = app.runner(&()).thread("job-1").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed, "{:?}", done.outcome);
    let result = done.state.result.expect("an observation");
    assert_eq!(result["ok"], false, "{result}");
    assert!(result.to_string().contains("the server was restarted"), "{result}");
}

#[tokio::test]
async fn a_call_through_an_app_runs_once_and_is_audited_under_its_approval() {
    let dir = temp_dir("mcp-gateway-approved");
    let Some(client) = everything_stdio() else { return };
    let client = everything::connect(client).await.expect("connect");
    let app = long_job::graph().app().store(Arc::new(open_redb(dir.join("runs.redb")).unwrap())).mcp(client);
    let run = app.runner(&()).owner(OWNER).thread("job-2").run(Job { seconds: 1.0, result: None }).await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{:?}", run.outcome) };
    assert_eq!(pending[0].kind, PendingKind::Approval);
    assert_eq!(pending[0].payload["tool"], "trigger-long-running-operation");
    assert_eq!(pending[0].payload["args"]["duration"], 1.0, "the typed arguments, as sent");
    let id = pending[0].payload["approval"].as_str().unwrap().to_string();
    app.approvals(authorizer()).unwrap().approve(&id, &Approver::new("olga", ["ops"])).unwrap();
    let done = app.runner(&()).thread("job-2").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed, "{:?}", done.outcome);
    let result = done.state.result.expect("an observation");
    assert_eq!(result["ok"], true, "{result}");
    assert!(result["result"].as_str().is_some_and(|t| t.contains("Long running operation completed")), "{result}");
    let kinds: Vec<String> = app.audit_log("job-2").unwrap().into_iter().map(|e| e.kind).collect();
    assert_eq!(kinds, ["approval.requested", "approval.approved", "approval.executing", "approval.succeeded"]);
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
pub struct Sum {
    answer: Option<String>,
}

#[graph(state = Sum, start = add)]
pub mod adder {
    use super::*;

    #[node(goto = [END], tools = [everything::get_sum])]
    async fn add(_s: &Sum, cx: &Ctx<()>) -> Result<Step<Sum>, NodeError> {
        let obs = cx.run_tool(everything::get_sum, everything::GetSumArgs { a: 20.0, b: 22.0 }).await?;
        Ok(goto!(END, Sum::update().answer(obs.result().and_then(Value::as_str).map(str::to_string))))
    }
}

#[graph(state = Sum, start = delegate)]
pub mod parent {
    use super::*;

    #[node(goto = [END], subgraphs = [adder])]
    async fn delegate(_s: &Sum, cx: &Ctx<()>) -> Result<Step<Sum>, NodeError> {
        let done = cx.subgraph(adder::graph(), Sum::default()).await?;
        Ok(goto!(END, Sum::update().answer(done.answer)))
    }
}

/// A subgraph's node calls the MCP server its parent App was given.
#[tokio::test]
async fn a_subgraph_calls_the_mcp_server_of_its_parents_app() {
    let Some(transport) = everything_stdio() else { return };
    let client = everything::connect(transport).await.expect("connect");
    let dir = temp_dir("mcp-gateway-subgraph");
    let app = parent::graph().app().store(Arc::new(open_redb(dir.join("runs.redb")).unwrap())).mcp(client);
    let run = app.runner(&()).thread("sum-1").run(Sum::default()).await.unwrap();
    assert_eq!(run.outcome, Outcome::Completed, "{:?}", run.outcome);
    assert_eq!(run.state.answer.as_deref(), Some("The sum of 20 and 22 is 42."));
}
