//! Running an approved call: the gateway that cannot be bypassed, failures while executing,
//! and a read tool the policy asks a human about.

use crate::approval_refunds::*;
use crate::support::stores::store;
use agentflow::approval::ApprovalStatus;
use agentflow::message::ToolCall;
use agentflow::prelude::*;
use agentflow::tool::{Code, Decision, Risk, RiskPolicy};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

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
