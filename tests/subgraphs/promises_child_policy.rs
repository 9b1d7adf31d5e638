//! Promise (`agentflow::subgraph` docs: "the parent's tool policy, approval
//! time to live, rejection rule and circuit breakers apply in the child";
//! `app.gateway.policy = ...` in `Ctx::subgraph`).
//!
//! - A parent App whose policy denies a tool that only the child graph lists:
//!   the child's call gets a `PERMISSION_DENIED` observation and the tool body
//!   never runs. If the child ran under its own (default) policy instead, the
//!   read-only tool would run: the counter would be 1 and the observation ok
//!   (the control run with the parent's default policy shows exactly that).
//! - A parent App with `OnReject::EndRun`: a rejection of the child's call ends
//!   the run as failed. Under the default rule (`Replan`) the child would get a
//!   `REJECTED` observation and the tree would complete.
//! - A parent App with a short approval TTL: the child's approval record expires
//!   after that TTL, not the default 24 h.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use agentflow::approval::{ApprovalStatus, Approver, RoleAuthorizer};
use agentflow::prelude::*;
use agentflow::tool::{Code, Decision, OnReject, Risk, RiskPolicy};
use agentflow::{Outcome, PendingKind};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[derive(Default)]
pub struct Ops {
    wipes: AtomicU32,
    publishes: AtomicU32,
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct Target {
    name: String,
}

/// Wipes a cache. Read-only as far as risk goes, so the default policy runs it.
#[tool(risk = read)]
async fn wipe(args: Target, deps: &Ops) -> Result<Value, ToolError> {
    deps.wipes.fetch_add(1, Ordering::SeqCst);
    Ok(json!({ "wiped": args.name }))
}

/// Publishes a post. Irreversible: needs a human's approval.
#[tool(risk = irreversible)]
async fn publish(args: Target, deps: &Ops) -> Result<Value, ToolError> {
    deps.publishes.fetch_add(1, Ordering::SeqCst);
    Ok(json!({ "published": args.name }))
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Job {
    /// The body of the child's observation.
    observation: Option<Value>,
}

#[graph(state = Job, deps = Ops, start = clean)]
pub mod cleaner {
    use super::*;

    #[node(goto = [END], tools = [wipe])]
    async fn clean(_s: &Job, cx: &Ctx<Ops>) -> Result<Step<Job>, NodeError> {
        let obs = cx.run_tool(wipe, json!({ "name": "cdn" })).await?;
        Ok(goto!(END, Job::update().observation(Some(obs.body))))
    }
}

#[graph(state = Job, deps = Ops, start = delegate)]
pub mod boss {
    use super::*;

    #[node(goto = [END], subgraphs = [cleaner])]
    async fn delegate(_s: &Job, cx: &Ctx<Ops>) -> Result<Step<Job>, NodeError> {
        let done = cx.subgraph(cleaner::graph(), Job::default()).await?;
        Ok(goto!(END, Job::update().observation(done.observation)))
    }
}

#[graph(state = Job, deps = Ops, start = post)]
pub mod poster {
    use super::*;

    #[node(goto = [END], tools = [publish])]
    async fn post(_s: &Job, cx: &Ctx<Ops>) -> Result<Step<Job>, NodeError> {
        let obs = cx.run_tool(publish, json!({ "name": "launch" })).await?;
        Ok(goto!(END, Job::update().observation(Some(obs.body))))
    }
}

#[graph(state = Job, deps = Ops, start = delegate)]
pub mod editor {
    use super::*;

    #[node(goto = [END], subgraphs = [poster])]
    async fn delegate(_s: &Job, cx: &Ctx<Ops>) -> Result<Step<Job>, NodeError> {
        let done = cx.subgraph(poster::graph(), Job::default()).await?;
        Ok(goto!(END, Job::update().observation(done.observation)))
    }
}

use crate::support::stores::store;

fn deny_wipe() -> RiskPolicy {
    RiskPolicy::default().tool("wipe", Decision::Deny)
}

fn code_of(obs: &Option<Value>) -> Option<Code> {
    obs.as_ref().and_then(|b| b.get("code")).and_then(|c| serde_json::from_value(c.clone()).ok())
}

#[tokio::test]
async fn the_parents_policy_denies_a_tool_only_the_child_lists_with_a_store() {
    let ops = Ops::default();
    // Control: under the default policy the child's read-only call runs.
    let open = boss::graph().app().store(store());
    let run = open.runner(&ops).thread("b-0").run(Job::default()).await.unwrap();
    assert_eq!(run.outcome, Outcome::Completed);
    assert_eq!(run.state.observation.as_ref().unwrap()["ok"], true);
    assert_eq!(ops.wipes.load(Ordering::SeqCst), 1);

    let app = boss::graph().app().store(store()).policy(deny_wipe());
    let run = app.runner(&ops).thread("b-1").run(Job::default()).await.unwrap();
    assert_eq!(run.outcome, Outcome::Completed, "{}", run.outcome);
    assert_eq!(code_of(&run.state.observation), Some(Code::PermissionDenied), "{:?}", run.state.observation);
    assert_eq!(ops.wipes.load(Ordering::SeqCst), 1, "the denied tool's body ran in the child");
}

#[tokio::test]
async fn the_parents_policy_denies_a_tool_only_the_child_lists_in_memory() {
    let ops = Ops::default();
    let run = boss::graph().app().policy(deny_wipe()).runner(&ops).run(Job::default()).await.unwrap();
    assert_eq!(run.outcome, Outcome::Completed, "{}", run.outcome);
    assert_eq!(code_of(&run.state.observation), Some(Code::PermissionDenied), "{:?}", run.state.observation);
    assert_eq!(ops.wipes.load(Ordering::SeqCst), 0, "the denied tool's body ran in the child");
}

/// A custom `Policy` (not `RiskPolicy`) set on the parent reaches the child too.
#[tokio::test]
async fn a_custom_parent_policy_is_asked_for_the_childs_call() {
    struct DenyAll(Arc<AtomicU32>);
    impl agentflow::tool::Policy for DenyAll {
        fn decide(&self, _tool: &str, _risk: Risk) -> Decision {
            self.0.fetch_add(1, Ordering::SeqCst);
            Decision::Deny
        }
    }
    let asked = Arc::new(AtomicU32::new(0));
    let ops = Ops::default();
    let app = boss::graph().app().store(store()).policy(DenyAll(Arc::clone(&asked)));
    let run = app.runner(&ops).thread("b-2").run(Job::default()).await.unwrap();
    assert_eq!(code_of(&run.state.observation), Some(Code::PermissionDenied), "{:?}", run.state.observation);
    assert!(asked.load(Ordering::SeqCst) >= 1, "the parent's policy was never asked");
    assert_eq!(ops.wipes.load(Ordering::SeqCst), 0);
}

const OWNER: &str = "agent:editor";

fn desk_for(app: &App<Job, Ops>) -> agentflow::approval::ApprovalDesk {
    app.approvals(RoleAuthorizer::new().role_for(Risk::Irreversible, "editor")).unwrap()
}

fn paused_on_approval(run: &agentflow::Run<Job>) -> String {
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("not paused: {}", run.outcome) };
    assert_eq!(pending[0].kind, PendingKind::Approval, "{pending:?}");
    assert_eq!(pending[0].payload["path"], "delegate/post");
    pending[0].payload["approval"].as_str().expect("an approval id").to_string()
}

#[tokio::test]
async fn the_parents_end_run_rejection_rule_applies_in_the_child() {
    let ops = Ops::default();
    let app = editor::graph().app().store(store()).on_reject(OnReject::EndRun);
    let desk = desk_for(&app);
    let run = app.runner(&ops).thread("e-1").owner(OWNER).run(Job::default()).await.unwrap();
    let id = paused_on_approval(&run);
    desk.reject(&id, &Approver::new("alice", ["editor"]), "off brand").unwrap();
    let done = app.runner(&ops).thread("e-1").resume().await.unwrap();
    // Under `Replan` the child would complete with a REJECTED observation, and so would the parent.
    let Outcome::Failed { node, error } = &done.outcome else {
        panic!("expected the rejection to end the run, got {} with {:?}", done.outcome, done.state.observation)
    };
    assert_eq!(node, "delegate");
    assert!(error.message.contains("off brand"), "{error}");
    assert_eq!(ops.publishes.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn the_default_replan_rule_lets_the_child_see_the_rejection() {
    // The contrast to the test above, with the parent's default rule.
    let ops = Ops::default();
    let app = editor::graph().app().store(store());
    let desk = desk_for(&app);
    let run = app.runner(&ops).thread("e-2").owner(OWNER).run(Job::default()).await.unwrap();
    let id = paused_on_approval(&run);
    desk.reject(&id, &Approver::new("alice", ["editor"]), "off brand").unwrap();
    let done = app.runner(&ops).thread("e-2").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed, "{}", done.outcome);
    assert_eq!(code_of(&done.state.observation), Some(Code::Rejected));
    assert_eq!(ops.publishes.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn the_parents_approval_ttl_applies_to_the_childs_request() {
    let ops = Ops::default();
    let ttl = Duration::from_secs(90);
    let app = editor::graph().app().store(store()).approval_ttl(ttl);
    let desk = desk_for(&app);
    let run = app.runner(&ops).thread("e-3").owner(OWNER).run(Job::default()).await.unwrap();
    let id = paused_on_approval(&run);
    let record = desk.get(&id).unwrap().unwrap();
    assert_eq!(record.status, ApprovalStatus::Pending);
    assert_eq!(record.thread, "e-3/delegate.0.0.poster", "asked in the child's thread");
    let lifetime = record.expires_at - record.created_at;
    assert_eq!(u128::from(lifetime), ttl.as_millis(), "the child's request lives for the parent's TTL");
}
