//! Subgraphs: a graph run as the child of a node, durably, under the
//! parent's thread. A three-level tree (supervisor -> research -> review)
//! pauses for a human in its deepest graph, and the value given to the
//! supervisor reaches it; an approval inside a child pauses the tree and the
//! approved call runs once; the children's tool calls count against the
//! supervisor's budget; a completed child is not run again when its parent
//! node re-runs; a subgraph the node does not list is refused.

use crate::subgraph_tree::*;
use crate::support::refund_subgraph;
use crate::support::stores::store;
use agentflow::approval::{Approver, RoleAuthorizer};
use agentflow::persist::ThreadStatus;
use agentflow::prelude::*;
use agentflow::tool::Risk;
use agentflow::{Budget, Limits, Outcome, PendingKind};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::Ordering;

#[test]
fn each_graph_knows_how_deep_it_delegates() {
    assert_eq!(review::DELEGATION_DEPTH, 1);
    assert_eq!(research::DELEGATION_DEPTH, 2);
    assert_eq!(supervisor::DELEGATION_DEPTH, 3);
}

#[tokio::test]
async fn an_interrupt_two_levels_down_pauses_the_tree_and_the_value_reaches_it() {
    let store = store();
    let app = supervisor::graph().app().store(Arc::clone(&store));
    let counts = Counts::default();
    let run = app.runner(&counts).thread("t").run(desk("tides")).await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{}", run.outcome) };
    assert_eq!(pending.len(), 1);
    let p = &pending[0];
    assert_eq!((p.node.as_str(), p.kind), ("write", PendingKind::Interrupt));
    assert_eq!(p.payload["path"], "write/gather/ask");
    assert_eq!(p.payload["question"], "publish?");
    assert_eq!(p.payload["draft"], "about tides");
    // The thread and graph that wait: the deepest.
    assert_eq!(p.payload["thread"], "t/write.0.0.research/gather.0.0.review");
    assert_eq!(p.payload["subgraph"], "review");
    // The children are threads of their own, under the parent's id.
    let mut ids: Vec<String> = store.list_threads().unwrap().into_iter().map(|t| t.id).collect();
    ids.sort();
    assert_eq!(ids, ["t", "t/write.0.0.research", "t/write.0.0.research/gather.0.0.review"]);
    assert_eq!(app.pending("t").unwrap(), pending.clone());

    // A resume without the value is refused, as for any interrupt.
    assert!(app.runner(&counts).thread("t").resume().await.is_err());
    let done = app.runner(&counts).thread("t").resume_with("yes").await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(done.state.report, "about tides (yes)");
    for id in ["t", "t/write.0.0.research", "t/write.0.0.research/gather.0.0.review"] {
        assert_eq!(store.thread(id).unwrap().unwrap().status, ThreadStatus::Completed, "{id}");
    }
    // The middle graph's node ran again on the way down to the review, so its
    // read-only search ran again too (read tools are not journaled).
    assert_eq!(counts.searches.load(Ordering::SeqCst), 2);
    // The review ran twice (asked, then answered); the supervisor's node twice.
    assert_eq!(counts.reviews.load(Ordering::SeqCst), 2);
    assert_eq!(counts.drafts.load(Ordering::SeqCst), 2);
}

/// A question asked two levels down is answered through the root thread that waits on it: an
/// answer given to a child thread directly is refused (its parent's resume would never give it),
/// and the root's answer reaches the child.
#[tokio::test]
async fn an_answer_to_a_subgraph_thread_is_refused_and_points_at_the_thread_that_waits() {
    use agentflow::approval::{AnswerError, ApprovalDesk};
    let store = store();
    let app = supervisor::graph().app().store(Arc::clone(&store));
    let counts = Counts::default();
    let run = app.runner(&counts).thread("t").run(desk("tides")).await.unwrap();
    assert!(matches!(run.outcome, Outcome::Interrupted { .. }), "{}", run.outcome);
    let approvals = ApprovalDesk::for_store(Arc::clone(&store), RoleAuthorizer::new());
    let ops = Approver::new("ops", ["x"]);
    for child in ["t/write.0.0.research", "t/write.0.0.research/gather.0.0.review"] {
        assert_eq!(approvals.parent_waiting_on(child).unwrap().as_deref(), Some("t"), "{child}");
        let (seq, _) = approvals.waiting_interrupt(child).unwrap();
        let refused = approvals.answer_interrupt(child, seq, json!("yes"), &ops).unwrap_err();
        assert!(matches!(&refused, AnswerError::AnswerTheParent { parent, .. } if parent == "t"), "{refused}");
        assert!(store.list_audit(child).unwrap().is_empty(), "nothing recorded for {child}");
    }
    assert_eq!(approvals.parent_waiting_on("t").unwrap(), None);

    // A thread id with a `/` of its own: its subgraphs' ids extend it.
    let run = app.runner(&counts).thread("acme/7").run(desk("tides")).await.unwrap();
    assert!(matches!(run.outcome, Outcome::Interrupted { .. }), "{}", run.outcome);
    for child in ["acme/7/write.0.0.research", "acme/7/write.0.0.research/gather.0.0.review"] {
        assert_eq!(approvals.parent_waiting_on(child).unwrap().as_deref(), Some("acme/7"), "{child}");
    }
    assert_eq!(approvals.parent_waiting_on("acme/7").unwrap(), None);

    let (seq, _) = approvals.waiting_interrupt("t").unwrap();
    approvals.answer_interrupt("t", seq, json!("yes"), &ops).unwrap();
    let done = app.runner(&counts).thread("t").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(done.state.report, "about tides (yes)");
}

#[tokio::test]
async fn without_a_store_a_child_runs_in_memory_and_a_pause_fails_the_node() {
    let counts = Counts::default();
    let run = research::graph().app().runner(&counts).run(Research { topic: "x".into(), ..Default::default() });
    let run = run.await.unwrap();
    let Outcome::Failed { node, error } = &run.outcome else { panic!("{}", run.outcome) };
    assert_eq!(node, "gather");
    assert!(error.message.contains("no store to pause in"), "{}", error.message);
}

// ------------------------------------------------ approvals inside a child

#[tokio::test]
async fn an_approval_inside_a_child_pauses_the_parent_and_the_approved_call_runs_once() {
    let store = store();
    let app = refund_subgraph::support::graph().app().store(Arc::clone(&store));
    let desk = app.approvals(RoleAuthorizer::new().role_for(Risk::Irreversible, "approver")).unwrap();
    let counts = refund_subgraph::Counts::default();
    let run = app
        .runner(&counts)
        .thread("c")
        .owner("agent")
        .run(refund_subgraph::Case { amount: 40, outcome: None })
        .await
        .unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{}", run.outcome) };
    assert_eq!(pending[0].kind, PendingKind::Approval);
    assert_eq!(pending[0].payload["path"], "settle/pay");
    let id = pending[0].payload["approval"].as_str().unwrap().to_string();
    // The request is the child's, made for the parent's owner.
    let record = store.approval(&id).unwrap().unwrap();
    assert_eq!((record.thread.as_str(), record.requester.as_str()), ("c/settle.0.0.payer", "agent"));
    assert_eq!(counts.refunds.load(Ordering::SeqCst), 0);

    desk.approve(&id, &Approver::new("alice", ["approver"])).unwrap();
    let done = app.runner(&counts).thread("c").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(done.state.outcome.unwrap()["result"]["refunded"], 40);
    assert_eq!(counts.refunds.load(Ordering::SeqCst), 1);
    // Resuming the finished tree runs nothing more.
    assert!(app.runner(&counts).thread("c").resume().await.is_err());
    assert_eq!(counts.refunds.load(Ordering::SeqCst), 1);
}

// ------------------------------------------------ budgets

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Many {
    n: u32,
    #[reduce(add)]
    found: u32,
}

#[graph(state = Many, deps = Counts, start = look)]
pub mod searcher {
    use super::*;

    #[node(goto = [END], tools = [search])]
    async fn look(s: &Many, cx: &Ctx<Counts>) -> Result<Step<Many>, NodeError> {
        for i in 0..s.n {
            cx.run_tool(search, json!({ "q": format!("q{i}") })).await?;
        }
        Ok(goto!(END, Many::update().found(s.n)))
    }
}

#[graph(state = Many, deps = Counts, start = delegate)]
pub mod boss {
    use super::*;

    #[node(goto = [END], tools = [search], subgraphs = [searcher])]
    async fn delegate(s: &Many, cx: &Ctx<Counts>) -> Result<Step<Many>, NodeError> {
        cx.run_tool(search, json!({ "q": "own" })).await?;
        let child = cx.subgraph(searcher::graph(), Many { n: s.n, found: 0 }).await?;
        Ok(goto!(END, Many::update().found(child.found)))
    }
}

#[tokio::test]
async fn the_childs_tool_calls_count_against_the_parents_budget() {
    let counts = Counts::default();
    let app = boss::graph().app().store(store());
    // 1 call of its own + 2 of the child's: within 3.
    let run = app.runner(&counts).thread("ok").limits(Limits::none().tool_calls(3));
    let run = run.run(Many { n: 2, found: 0 }).await.unwrap();
    assert_eq!(run.outcome, Outcome::Completed);
    assert_eq!(run.usage.tool_calls, 3);

    // 1 + 3 > 3: the child runs with the 2 calls left and stops at the third.
    let before = counts.searches.load(Ordering::SeqCst);
    let run = app.runner(&counts).thread("over").limits(Limits::none().tool_calls(3));
    let run = run.run(Many { n: 3, found: 0 }).await.unwrap();
    assert_eq!(run.outcome, Outcome::BudgetExhausted { which: Budget::ToolCalls });
    assert_eq!(counts.searches.load(Ordering::SeqCst) - before, 3);
    assert_eq!(run.usage.tool_calls, 3);
}

// ------------------------------------------------ a child is run once

#[graph(state = Desk, deps = Counts, start = write)]
pub mod approve_after {
    use super::*;

    /// Runs the research child, then asks a human; on resume the node runs
    /// again and must get the child's result back without running it again.
    #[node(goto = [END], subgraphs = [searcher], interrupt)]
    async fn write(s: &Desk, cx: &Ctx<Counts>) -> Result<Step<Desk>, NodeError> {
        let child = cx.subgraph(searcher::graph(), Many { n: 2, found: 0 }).await?;
        let ok: bool = cx.interrupt(json!({ "found": child.found }))?;
        Ok(goto!(END, Desk::update().report(format!("{} {}", s.topic, if ok { child.found } else { 0 }))))
    }
}

#[tokio::test]
async fn a_completed_child_is_not_run_again_when_its_parent_node_reruns() {
    let counts = Counts::default();
    let app = approve_after::graph().app().store(store());
    let run = app.runner(&counts).thread("p").run(desk("x")).await.unwrap();
    assert!(matches!(run.outcome, Outcome::Interrupted { .. }), "{}", run.outcome);
    assert_eq!(counts.searches.load(Ordering::SeqCst), 2);
    let done = app.runner(&counts).thread("p").resume_with(true).await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(done.state.report, "x 2");
    assert_eq!(counts.searches.load(Ordering::SeqCst), 2, "the child ran again");
}

// ------------------------------------------------ a call the macro cannot see

/// Runs the review graph for any node handed its context: the macro sees no
/// `cx.subgraph` in the node itself.
async fn review_for(cx: &Ctx<'_, Counts>, draft: &str) -> Result<Review, NodeError> {
    cx.subgraph(review::graph(), Review { draft: draft.into(), verdict: String::new() }).await
}

#[graph(state = Desk, deps = Counts, start = sneak)]
pub mod sneaky {
    use super::*;

    #[node(goto = [END])]
    async fn sneak(s: &Desk, cx: &Ctx<Counts>) -> Result<Step<Desk>, NodeError> {
        let reviewed = review_for(cx, &s.topic).await?;
        Ok(goto!(END, Desk::update().report(reviewed.verdict)))
    }
}

#[tokio::test]
async fn a_subgraph_the_node_does_not_list_is_refused_at_run_time_too() {
    let counts = Counts::default();
    let run = sneaky::graph().app().store(store()).runner(&counts).thread("x").run(desk("d")).await.unwrap();
    let Outcome::Failed { node, error } = &run.outcome else { panic!("{}", run.outcome) };
    assert_eq!(node, "sneak");
    assert!(error.message.contains("ran subgraph `review`, which is not in its `subgraphs` list"), "{}", error.message);
    assert_eq!(counts.reviews.load(Ordering::SeqCst), 0);
}
