//! A call that was sent and got no answer (`ToolError::OutcomeUnknown`: the process serving it
//! died mid-call, the connection dropped) is treated like a call cut off by a crash: a read or
//! an idempotent call runs again, any other call waits for a human, who settles it as
//! succeeded, failed or "run again"; it never runs again on its own.

use crate::support::stores::open_redb;
use crate::uncertain_world::{OWNER, alice, authorizer, calls, db, pending_of};
use agentflow::approval::{ApprovalStatus, Settlement};
use agentflow::prelude::*;
use agentflow::{App, PendingKind};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::sync::Arc;

#[derive(Deserialize, Serialize, schemars::JsonSchema)]
pub struct Order {
    pub order_id: String,
}

/// Records the call; the first call for an order gets no answer.
fn sent(order: &str, key: &str) -> Result<(), ToolError> {
    let first = calls(order).is_empty();
    crate::uncertain_world::LEDGER.lock().unwrap().push((order.to_string(), key.to_string()));
    if first { Err(ToolError::OutcomeUnknown("the connection closed before the answer".into())) } else { Ok(()) }
}

/// Texts the customer; the gateway does not deduplicate.
#[tool(risk = external)]
pub async fn send_sms(args: Order, cx: &ToolCx) -> Result<Value, ToolError> {
    sent(&args.order_id, cx.idempotency_key())?;
    Ok(json!({ "sent": args.order_id }))
}

/// Looks an order up.
#[tool(risk = read)]
pub async fn look_up(args: Order, cx: &ToolCx) -> Result<Value, ToolError> {
    sent(&args.order_id, cx.idempotency_key())?;
    Ok(json!({ "found": args.order_id }))
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Job {
    pub order: String,
    pub receipt: Option<Value>,
}

#[graph(state = Job, deps = (), start = notify)]
pub mod sms_flow {
    use super::*;

    #[node(goto = [END], tools = [send_sms], retry(attempts = 3, base = 1ms, jitter = false))]
    async fn notify(s: &Job, cx: &Ctx<()>) -> Result<Step<Job>, NodeError> {
        let obs = cx.run_tool(send_sms, Order { order_id: s.order.clone() }).await?;
        Ok(goto!(END, Job::update().receipt(Some(obs.body))))
    }
}

#[graph(state = Job, deps = (), start = find)]
pub mod lookup_flow {
    use super::*;

    #[node(goto = [END], tools = [look_up], retry(attempts = 3, base = 1ms, jitter = false))]
    async fn find(s: &Job, cx: &Ctx<()>) -> Result<Step<Job>, NodeError> {
        let obs = cx.run_tool(look_up, Order { order_id: s.order.clone() }).await?;
        Ok(goto!(END, Job::update().receipt(Some(obs.body))))
    }
}

fn app(thread: &str) -> App<Job> {
    let store = open_redb(db(thread)).unwrap();
    // Texts run without an approval: the call itself is what gets no answer.
    sms_flow::graph().app().store(Arc::new(store)).policy(agentflow::tool::RiskPolicy::allow_all())
}

fn job(order: &str) -> Job {
    Job { order: order.into(), receipt: None }
}

#[tokio::test]
async fn a_call_that_got_no_answer_waits_for_a_human_and_is_not_sent_again() {
    let thread = "NA-settled";
    let app = app(thread);
    let run = app.runner(&()).owner(OWNER).thread(thread).run(job(thread)).await.unwrap();
    let (kind, id) = pending_of(&run);
    assert_eq!(kind, PendingKind::OutcomeUnknown);
    // The node's retries did not send it again.
    assert_eq!(calls(thread).len(), 1);
    let desk = app.approvals(authorizer()).unwrap();
    let record = desk.get(&id).unwrap().unwrap();
    assert_eq!(record.status, ApprovalStatus::OutcomeUnknown);
    assert_eq!(record.tool, "send_sms");
    // A resume before anyone decided pauses again, sending nothing.
    let again = app.runner(&()).owner(OWNER).thread(thread).resume().await.unwrap();
    assert_eq!(pending_of(&again).0, PendingKind::OutcomeUnknown);
    assert_eq!(calls(thread).len(), 1);
    // The provider's log shows the text went out.
    desk.settle(&id, &alice(), Settlement::Succeeded(json!({ "sent": thread, "by": "log" }))).unwrap();
    let done = app.runner(&()).owner(OWNER).thread(thread).resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed, "{:?}", done.outcome);
    assert_eq!(done.state.receipt.unwrap()["result"]["by"], "log", "the settled result reaches the node");
    assert_eq!(calls(thread).len(), 1, "sent once");
}

#[tokio::test]
async fn run_again_sends_it_once_more_with_the_same_key() {
    let thread = "NA-again";
    let app = app(thread);
    let run = app.runner(&()).owner(OWNER).thread(thread).run(job(thread)).await.unwrap();
    let (_, id) = pending_of(&run);
    let desk = app.approvals(authorizer()).unwrap();
    desk.settle(&id, &alice(), Settlement::RunAgain).unwrap();
    let done = app.runner(&()).owner(OWNER).thread(thread).resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed, "{:?}", done.outcome);
    let keys = calls(thread);
    assert_eq!(keys.len(), 2, "{keys:?}");
    assert_eq!(keys[0], keys[1], "the same idempotency key");
}

#[tokio::test]
async fn a_read_that_got_no_answer_runs_again() {
    let thread = "NA-read";
    let app = lookup_flow::graph().app().store(Arc::new(open_redb(db(thread)).unwrap()));
    let done = app.runner(&()).owner(OWNER).thread(thread).run(job(thread)).await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed, "{:?}", done.outcome);
    assert_eq!(done.state.receipt.as_ref().unwrap()["result"]["found"], thread, "{:?}", done.state);
    assert_eq!(calls(thread).len(), 2);
}

#[tokio::test]
async fn without_a_store_no_human_can_be_asked_and_the_run_fails() {
    let thread = "NA-memory";
    let app = sms_flow::graph().app().policy(agentflow::tool::RiskPolicy::allow_all());
    let run = app.runner(&()).owner(OWNER).run(job(thread)).await.unwrap();
    let Outcome::Failed { error, .. } = &run.outcome else { panic!("{:?} {:?}", run.outcome, run.state) };
    assert!(error.to_string().contains("cannot ask a human"), "{error}");
    assert_eq!(calls(thread).len(), 1, "not sent again by the node's retries");
}
