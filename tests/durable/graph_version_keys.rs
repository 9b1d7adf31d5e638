//! What a thread's move to a newer version of its graph does to the keys its step journaled
//! under: a key the node chose itself stays as it was (the node asks it again as it was), a
//! direct call (`cx.run_tool`) of a renamed tool that ran before the move is replayed under the
//! new name (or, when its arguments are mapped and not kept, the move is refused), a state
//! update after the move keeps the step's move, and a move that would give two of the thread's
//! nodes one name is refused.

use std::sync::Mutex;
use std::sync::atomic::Ordering;

use agentflow::__private::with_release;
use agentflow::persist::ResumeError;
use agentflow::prelude::*;
use agentflow::release::{ArgsMigration, GraphMigration, Release, ToolMigration};
use agentflow::{RunError, Store};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::orders_versions::{self as orders, OWNER, migrated_entries, new_app, new_app_with, old_app, order};
use crate::support::stores::store;

/// Every charge and notice made: (what, customer).
static DONE: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

fn done_for(customer: &str) -> Vec<String> {
    DONE.lock().unwrap().iter().filter(|(_, c)| c == customer).map(|(what, _)| what.clone()).collect()
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Bill {
    pub customer: String,
    #[reduce(append)]
    pub log: Vec<String>,
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct To {
    to: String,
}

/// Tells the customer (version 1's name).
#[tool(risk = reversible)]
pub async fn notify(args: To) -> Result<Value, ToolError> {
    DONE.lock().unwrap().push(("notify".into(), args.to));
    Ok(json!({ "told": true }))
}

/// Tells the customer (version 2's name).
#[tool(risk = reversible)]
pub async fn inform(args: To) -> Result<Value, ToolError> {
    DONE.lock().unwrap().push(("inform".into(), args.to));
    Ok(json!({ "told": true }))
}

fn charge(customer: &str) -> Result<String, NodeError> {
    DONE.lock().unwrap().push(("charge".into(), customer.to_string()));
    Ok("charged".into())
}

/// What the renamed node's subgraph child asks a human; its start is recorded as `child`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Ask {
    pub answer: String,
}

#[graph(state = Ask, start = start)]
pub mod asker {
    use super::*;

    #[node(goto = [wait])]
    async fn start(s: &Ask) -> Step<Ask> {
        DONE.lock().unwrap().push(("child".into(), s.answer.clone()));
        goto!(wait)
    }

    #[node(goto = [END], interrupt)]
    async fn wait(s: &Ask, cx: &Ctx<()>) -> Result<Step<Ask>, NodeError> {
        let answer: String = cx.interrupt(json!({ "bill": s.answer }))?;
        Ok(goto!(END, Ask::update().answer(answer)))
    }
}

pub mod v1 {
    use super::*;

    #[graph(state = Bill, start = review, id = "keys")]
    pub mod flow {
        use super::*;

        /// Charges under a key that names the node, tells the customer, then asks a human in a child.
        #[node(goto = [END], tools = [notify], subgraphs = [asker])]
        async fn review(s: &Bill, cx: &Ctx<()>) -> Result<Step<Bill>, NodeError> {
            let customer = s.customer.clone();
            let charged = cx.effect("charge:review-1", |_| async move { charge(&customer) }).await?;
            cx.run_tool(notify, json!({ "to": s.customer })).await?;
            let asked = cx.subgraph(asker::graph(), Ask { answer: s.customer.clone() }).await?;
            Ok(goto!(END, Bill::update().log(vec![format!("{charged}, {}", asked.answer)])))
        }
    }
}

pub mod v2 {
    use super::*;

    #[graph(state = Bill, start = human_review, id = "keys", version = 2,
            migrate(from = 1, nodes(review -> human_review), tools(notify -> inform)))]
    pub mod flow {
        use super::*;

        #[node(goto = [END], tools = [inform], subgraphs = [asker])]
        async fn human_review(s: &Bill, cx: &Ctx<()>) -> Result<Step<Bill>, NodeError> {
            let customer = s.customer.clone();
            let charged = cx.effect("charge:review-1", |_| async move { charge(&customer) }).await?;
            cx.run_tool(inform, json!({ "to": s.customer })).await?;
            let asked = cx.subgraph(asker::graph(), Ask { answer: s.customer.clone() }).await?;
            Ok(goto!(END, Bill::update().log(vec![format!("{charged}, {}", asked.answer)])))
        }
    }
}

fn same(args: Value) -> Result<Value, String> {
    Ok(args)
}

/// Version 2 with `args(inform = same)` declared too.
static ARGS_MAPPED: [GraphMigration; 1] = [GraphMigration::new(
    1,
    &[("review", "human_review")],
    &[("notify", ToolMigration::Rename("inform"))],
    &[("inform", ArgsMigration::Map(same))],
)];

/// Parks `customer`'s thread in `review` on version 1, charged and told once.
async fn parked(store: &std::sync::Arc<dyn Store>, customer: &str) {
    let old = v1::flow::graph().app().store(std::sync::Arc::clone(store));
    let run = old.runner(&()).thread(customer).owner(OWNER).run(Bill { customer: customer.into(), log: vec![] });
    let paused = run.await.unwrap();
    assert!(matches!(paused.outcome, Outcome::Interrupted { .. }), "{:?}", paused.outcome);
    assert_eq!(done_for(customer), ["charge", "notify", "child"]);
}

/// The node's own key `charge:review-1` names the node's old name; version 2 asks the same key
/// in the renamed node and finds the charge made on version 1.
#[tokio::test]
async fn a_key_the_node_chose_is_not_renamed_with_the_node() {
    let store = store();
    parked(&store, "own-key").await;
    let new = v2::flow::graph().app().store(std::sync::Arc::clone(&store));
    let done = new.runner(&()).thread("own-key").resume_with("fine").await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(done.state.log, ["charged, fine"]);
    assert_eq!(done_for("own-key").iter().filter(|w| *w == "charge").count(), 1, "charged once");
}

/// The direct call of `notify` ran on version 1; version 2 renamed the tool to `inform`: the
/// call is replayed from its journaled result, not made again under the new name.
#[tokio::test]
async fn a_direct_call_of_a_renamed_tool_that_ran_is_not_run_again() {
    let store = store();
    parked(&store, "direct").await;
    let new = v2::flow::graph().app().store(std::sync::Arc::clone(&store));
    let done = new.runner(&()).thread("direct").resume_with("fine").await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(done_for("direct"), ["charge", "notify", "child"], "told once, on version 1");
}

/// With its arguments mapped by `args(..)`, the call that ran cannot be found under its new
/// arguments (the journal keeps only their hash): the move is refused, and the thread stays on
/// version 1, where it finishes.
#[tokio::test]
async fn a_direct_call_whose_arguments_are_mapped_refuses_the_move() {
    let store = store();
    parked(&store, "mapped").await;
    let release = Release::new("keys", 2, &ARGS_MAPPED, "{}", "");
    let new = with_release(v2::flow::graph(), release).app().store(std::sync::Arc::clone(&store));
    let err = new.runner(&()).thread("mapped").resume_with("fine").await.unwrap_err();
    let RunError::Resume(ResumeError::DirectCallArgsUnknown { tool, node, .. }) = &err else { panic!("{err}") };
    assert_eq!((tool.as_str(), node.as_str()), ("notify", "review"));
    assert!(err.to_string().contains("resume the thread on version 1"), "{err}");
    assert!(migrated_entries(&new, "mapped").is_empty());
    let old = v1::flow::graph().app().store(std::sync::Arc::clone(&store));
    let done = old.runner(&()).thread("mapped").resume_with("fine").await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(done_for("mapped"), ["charge", "notify", "child"]);
}

/// A state update of the moved thread, before it resumes, keeps the step's move: the renamed
/// node continues the subgraph child it parked in, under the name its attempt started with.
#[tokio::test]
async fn a_state_update_after_the_move_keeps_the_subgraph_child() {
    let store = store();
    parked(&store, "update").await;
    let new = v2::flow::graph().app().store(std::sync::Arc::clone(&store));
    // Moved; the child still waits for its answer.
    let err = new.runner(&()).thread("update").resume().await.unwrap_err();
    assert!(matches!(err, RunError::ValueRequired { .. }), "{err}");
    assert_eq!(migrated_entries(&new, "update").len(), 1);
    new.update_state("update", Bill::update().log(vec!["noted".into()]), "ops").unwrap();
    let done = new.runner(&()).thread("update").resume_with("bob").await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(done.state.log, ["noted", "charged, bob"]);
    assert_eq!(done_for("update"), ["charge", "notify", "child"], "the child did not start again");
}

/// `pack -> flaky` with `flaky` kept: the thread stands at both, with `pack`'s write kept; the
/// move would merge them, and is refused. The thread stays, and moves as version 2 declares.
#[tokio::test]
async fn a_move_that_merges_two_nodes_the_thread_stands_at_is_refused() {
    static MERGED: [GraphMigration; 1] = [GraphMigration::new(1, &[("pack", "flaky")], &[], &[])];
    let (store, deps) = (store(), orders::Deps::default());
    let _ = old_app(&store).runner(&deps).thread("merge").owner(OWNER).run(order("crash", "merge")).await;
    let err = new_app_with(&store, &MERGED).runner(&deps).thread("merge").resume().await.unwrap_err();
    let RunError::Resume(ResumeError::NodesMerged { first, second, node, .. }) = &err else { panic!("{err}") };
    assert_eq!((first.as_str(), second.as_str(), node.as_str()), ("pack", "flaky", "flaky"));
    assert!(migrated_entries(&old_app(&store), "merge").is_empty());
    let done = new_app(&store).runner(&deps).thread("merge").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(done.state.log, ["packed", "flaky ran"]);
    assert_eq!(deps.packs.load(Ordering::SeqCst), 1, "`pack` ran once, on version 1: its kept write was not lost");
}
