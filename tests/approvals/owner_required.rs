//! A persisted run that may ask a human to approve a call needs an owner to ask for: without
//! one it is refused before anything runs or is written (at run start, for a tool of a subgraph
//! child too, and when submitted to a worker), not at the gated call after earlier work, which
//! the saga would then undo.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use agentflow::prelude::*;
use agentflow::tool::{OwnerRequired, Risk, RiskPolicy};
use agentflow::{RunError, WorkerError};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::support::refund_subgraph;
use refund_subgraph::{Case, Counts};

#[derive(Deserialize, schemars::JsonSchema)]
pub struct Order {
    id: String,
}

static RESERVED: AtomicU32 = AtomicU32::new(0);

/// Reserves stock.
#[tool(risk = reversible)]
async fn reserve(args: Order) -> Result<Value, ToolError> {
    RESERVED.fetch_add(1, Ordering::SeqCst);
    Ok(json!({ "reserved": args.id }))
}

/// Charges the card. Irreversible: the default policy asks a human first.
#[tool(risk = irreversible)]
async fn charge(args: Order) -> Result<Value, ToolError> {
    Ok(json!({ "charged": args.id }))
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Checkout {
    #[reduce(append)]
    log: Vec<String>,
}

#[graph(state = Checkout, start = hold)]
mod checkout {
    use super::*;

    #[node(goto = [pay], tools = [reserve])]
    async fn hold(_s: &Checkout, cx: &Ctx<()>) -> Result<Step<Checkout>, NodeError> {
        let obs = cx.run_tool(reserve, json!({ "id": "o-1" })).await?;
        Ok(goto!(pay, Checkout::update().log(vec![obs.body.to_string()])))
    }

    #[node(goto = [END], tools = [charge])]
    async fn pay(_s: &Checkout, cx: &Ctx<()>) -> Result<Step<Checkout>, NodeError> {
        let obs = cx.run_tool(charge, json!({ "id": "o-1" })).await?;
        Ok(goto!(END, Checkout::update().log(vec![obs.body.to_string()])))
    }
}

use crate::support::stores::store;

#[tokio::test]
async fn a_run_without_an_owner_that_may_need_an_approval_is_refused_before_it_starts() {
    let store = store();
    let app = checkout::graph().app().store(Arc::clone(&store));
    let reserved = RESERVED.load(Ordering::SeqCst);
    let err = app.runner(&()).thread("no-owner").run(Checkout::default()).await.unwrap_err();
    let RunError::OwnerRequired(OwnerRequired { graph, node, tool, risk, .. }) = &err else {
        panic!("expected OwnerRequired, got {err:?}");
    };
    assert_eq!((*graph, *node, *tool, *risk), ("checkout", "pay", "charge", Risk::Irreversible));
    assert!(err.to_string().contains(".owner("), "{err}");
    assert_eq!(RESERVED.load(Ordering::SeqCst), reserved, "the first node ran");
    assert!(store.thread("no-owner").unwrap().is_none(), "the thread was created");

    // With an owner it runs up to the approval.
    let run = app.runner(&()).thread("owned").owner("agent").run(Checkout::default()).await.unwrap();
    assert!(matches!(run.outcome, Outcome::Interrupted { .. }), "{:?}", run.outcome);
    // A policy that never gates the tool needs no owner; nor does a run without a store.
    let open = checkout::graph().app().store(store).policy(RiskPolicy::allow_all());
    let run = open.runner(&()).thread("allowed").run(Checkout::default()).await.unwrap();
    assert_eq!(run.outcome, Outcome::Completed);
    let run = checkout::graph().app().run(Checkout::default(), &()).await.unwrap();
    assert_eq!(run.outcome, Outcome::Completed);
}

#[tokio::test]
async fn a_subgraph_childs_gated_tool_needs_the_owner_at_the_parents_start() {
    let store = store();
    let app = refund_subgraph::support::graph().app().store(Arc::clone(&store));
    let counts = Counts::default();
    let err = app.runner(&counts).thread("case-1").run(Case { amount: 40, outcome: None }).await.unwrap_err();
    let RunError::OwnerRequired(refused) = &err else { panic!("expected OwnerRequired, got {err:?}") };
    assert_eq!((refused.graph, refused.node, refused.tool), ("payer", "pay", "refund"));
    assert!(store.list_threads().unwrap().is_empty(), "a thread was created");

    let run = app.runner(&counts).thread("case-2").owner("agent").run(Case { amount: 40, outcome: None }).await;
    assert!(matches!(run.unwrap().outcome, Outcome::Interrupted { .. }));
    assert_eq!(counts.refunds.load(Ordering::SeqCst), 0);
}

#[test]
fn a_run_submitted_to_a_worker_without_an_owner_is_refused_and_not_queued() {
    let store = store();
    let app = checkout::graph().app().store(Arc::clone(&store));
    let err = app.submit("queued", &Checkout::default()).unwrap_err();
    let WorkerError::OwnerRequired(refused) = &err else { panic!("expected OwnerRequired, got {err:?}") };
    assert_eq!((refused.node, refused.tool), ("pay", "charge"));
    assert!(store.list_runs().unwrap().is_empty(), "the run was queued");
    assert!(store.thread("queued").unwrap().is_none());
    // A subgraph child's tool counts too.
    let support = refund_subgraph::support::graph().app().store(Arc::clone(&store));
    assert!(matches!(support.submit("case", &Case::default()), Err(WorkerError::OwnerRequired(_))));

    app.submit_as("queued", &Checkout::default(), "agent").unwrap();
    assert_eq!(store.list_runs().unwrap().len(), 1);
}
