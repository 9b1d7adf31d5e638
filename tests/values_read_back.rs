//! Whatever a run writes to the store reads back as it was written, or the
//! write is refused with an error naming the value:
//!
//! - computed floats survive a pause and a resume bit for bit, so an approved
//!   refund of `total * 0.15` runs with the approved amount (serde_json reads
//!   floats exactly: its `float_roundtrip` feature);
//! - NaN and infinities are refused at commit, naming the field, instead of
//!   being stored as `null` and read back changed;
//! - JSON nested deeper than the store reads back is refused at write: tool
//!   arguments, approval conditions, audit details, states.

use std::sync::{Arc, Mutex};

use agentflow::approval::{ApprovalStatus, Approver, RoleAuthorizer};
use agentflow::message::Role;
use agentflow::model::{ChatReply, ChatRequest, ScriptedModel};
use agentflow::prebuilt::{ReactDeps, ReactState};
use agentflow::prelude::*;
use agentflow::tool::Risk;
use agentflow::{PendingKind, RedbStore, Run, Store};
use serde::Deserialize;
use serde_json::{Value, json};

// ---------------------------------------------------------------- computed floats through an approval

/// Every refund that ran: (order, amount).
static REFUNDS: Mutex<Vec<(String, f64)>> = Mutex::new(Vec::new());

#[derive(Deserialize, schemars::JsonSchema)]
pub struct FloatRefund {
    order_id: String,
    amount: f64,
}

/// Refunds a computed amount. Irreversible.
#[tool(risk = irreversible)]
async fn refund_share(args: FloatRefund) -> Result<Value, ToolError> {
    REFUNDS.lock().unwrap().push((args.order_id.clone(), args.amount));
    Ok(json!({ "refunded": args.amount }))
}

agentflow::react_agent!(mod share_refunds, tools = [refund_share], max_steps = 8);

const ROLE: &str = "refund-approver";

fn alice() -> Approver {
    Approver::new("alice", [ROLE])
}

fn authorizer() -> RoleAuthorizer {
    RoleAuthorizer::new().role_for(Risk::Irreversible, ROLE)
}

fn done(_req: &ChatRequest) -> Result<ChatReply, agentflow::model::ModelError> {
    Ok(ChatReply::text("done"))
}

fn approval_of<S>(run: &Run<S>) -> String {
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("not paused: {:?}", run.outcome) };
    assert_eq!(pending[0].kind, PendingKind::Approval);
    pending[0].payload["approval"].as_str().expect("an approval id").to_string()
}

fn last_observation(state: &ReactState) -> Value {
    let m = state.messages.iter().rev().find(|m| m.role == Role::Tool).expect("a tool result");
    serde_json::from_str(&m.content).unwrap()
}

/// Prices in cents from 1.00 to 100.00 whose 15% share has no short decimal
/// form (`1.50 * 0.15 == 0.22499999999999998`): before the fix, a fifth of
/// them read back rounded and their approval was refused as tampered.
fn awkward_shares() -> Vec<f64> {
    let mut shares = vec![1.5 * 0.15];
    shares.extend(
        (100..=10_000u32)
            .map(|cents| f64::from(cents) / 100.0 * 0.15)
            .filter(|share| share.to_string().len() > 12)
            .step_by(37),
    );
    shares
}

#[tokio::test]
async fn computed_refund_amounts_run_exactly_as_approved() {
    let shares = awkward_shares();
    assert!(shares.len() >= 40, "{} cases", shares.len());
    assert!(shares.contains(&0.224_999_999_999_999_98), "the reported case is among them");
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let graph = share_refunds::graph().with_store(store);
    let desk = graph.approvals(authorizer()).unwrap();
    for (i, &share) in shares.iter().enumerate() {
        let order = format!("F-{i}");
        let model = ScriptedModel::new()
            .reply_tool_call("refund_share", json!({ "order_id": order, "amount": share }))
            .respond_with(done);
        let deps = ReactDeps::new(Arc::new(model));
        let run = graph.runner(&deps).thread(&order).owner("bot").run(ReactState::ask("refund")).await.unwrap();
        let id = approval_of(&run);
        desk.approve(&id, &alice()).unwrap();
        let resumed = graph.runner(&deps).thread(&order).resume().await.unwrap();
        assert_eq!(resumed.outcome, Outcome::Completed, "{order}: share {share:?}");
        let observation = last_observation(&resumed.state);
        assert_eq!(observation["ok"], json!(true), "{order}: share {share:?}: {observation}");
        let ran: Vec<f64> = REFUNDS.lock().unwrap().iter().filter(|(o, _)| *o == order).map(|(_, a)| *a).collect();
        assert_eq!(ran.len(), 1, "{order}");
        assert_eq!(ran[0].to_bits(), share.to_bits(), "{order}: approved {share:?}, refunded {:?}", ran[0]);
        assert_eq!(desk.get(&id).unwrap().unwrap().status, ApprovalStatus::Succeeded, "{order}");
    }
}

#[test]
fn floats_read_back_bit_for_bit() {
    for text in ["0.22499999999999998", "2.9999999999999996", "1e-7", "123456.78901234567"] {
        let x: f64 = serde_json::from_str(text).unwrap();
        assert_eq!(serde_json::to_string(&x).unwrap(), text, "{text}");
    }
}
