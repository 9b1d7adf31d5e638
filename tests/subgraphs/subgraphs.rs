//! Subgraphs: a graph run as the child of a node, durably, under the
//! parent's thread. A three-level tree (supervisor -> research -> review)
//! pauses for a human in its deepest graph, and the value given to the
//! supervisor reaches it; an approval inside a child pauses the tree and the
//! approved call runs once; the children's tool calls count against the
//! supervisor's budget; a completed child is not run again when its parent
//! node re-runs; a child cut off mid-run resumes from its own checkpoint;
//! cancelling the parent cancels the child.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use agentflow::approval::{Approver, RoleAuthorizer};
use agentflow::persist::ThreadStatus;
use agentflow::prelude::*;
use agentflow::tool::Risk;
use agentflow::{Budget, CancellationToken, Limits, Outcome, PendingKind, Run, Store};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// What ran, counted across the tree.
#[derive(Default)]
pub struct Counts {
    searches: AtomicU32,
    reviews: AtomicU32,
    refunds: AtomicU32,
    drafts: AtomicU32,
    /// `flaky_after_review` fails after its child while this is set.
    fail: AtomicBool,
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct Query {
    q: String,
}

/// Searches; read-only.
#[tool(risk = read)]
async fn search(args: Query, deps: &Counts) -> Result<Value, ToolError> {
    deps.searches.fetch_add(1, Ordering::SeqCst);
    Ok(json!({ "hits": [format!("about {}", args.q)] }))
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct Refund {
    amount: u32,
}

/// Refunds. Irreversible: every call needs a human's approval.
#[tool(risk = irreversible)]
async fn refund(args: Refund, deps: &Counts) -> Result<Value, ToolError> {
    deps.refunds.fetch_add(1, Ordering::SeqCst);
    Ok(json!({ "refunded": args.amount }))
}

// ------------------------------------------------ review: the deepest graph

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Review {
    draft: String,
    verdict: String,
}

#[graph(state = Review, deps = Counts, start = ask)]
pub mod review {
    use super::*;

    #[node(goto = [END], interrupt)]
    async fn ask(s: &Review, cx: &Ctx<Counts>) -> Result<Step<Review>, NodeError> {
        cx.deps().reviews.fetch_add(1, Ordering::SeqCst);
        let verdict: String = cx.interrupt(json!({ "question": "publish?", "draft": s.draft }))?;
        Ok(goto!(END, Review::update().verdict(verdict)))
    }
}

// ------------------------------------------------ research: the middle

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Research {
    topic: String,
    hits: Vec<String>,
    verdict: String,
}

#[graph(state = Research, deps = Counts, start = gather)]
pub mod research {
    use super::*;

    #[node(goto = [END], tools = [search], subgraphs = [review])]
    async fn gather(s: &Research, cx: &Ctx<Counts>) -> Result<Step<Research>, NodeError> {
        let found = cx.run_tool(search, json!({ "q": s.topic })).await?;
        let hits: Vec<String> = serde_json::from_value(found.body["result"]["hits"].clone()).unwrap_or_default();
        let reviewed = cx.subgraph(review::graph(), Review { draft: hits.join("; "), verdict: String::new() }).await?;
        Ok(goto!(END, Research::update().hits(hits).verdict(reviewed.verdict)))
    }
}

// ------------------------------------------------ supervisor: the root

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Desk {
    topic: String,
    report: String,
}

#[graph(state = Desk, deps = Counts, start = write)]
pub mod supervisor {
    use super::*;

    #[node(goto = [END], subgraphs = [research])]
    async fn write(s: &Desk, cx: &Ctx<Counts>) -> Result<Step<Desk>, NodeError> {
        cx.deps().drafts.fetch_add(1, Ordering::SeqCst);
        let input = Research { topic: s.topic.clone(), ..Research::default() };
        let done = cx.subgraph(research::graph(), input).await?;
        Ok(goto!(END, Desk::update().report(format!("{} ({})", done.hits.join(", "), done.verdict))))
    }
}

use crate::support::stores::store;

/// A worker running `graph` on a fresh store (polling every 10 ms), with `thread` submitted; the
/// approval desk answers its questions as the inbox does.
#[allow(clippy::type_complexity)]
fn worker_running(
    graph: CompiledGraph<Desk, Counts>,
    thread: &str,
    input: &Desk,
) -> (
    App<Desk, Counts>,
    agentflow::approval::ApprovalDesk,
    CancellationToken,
    tokio::task::JoinHandle<Result<agentflow::WorkerReport, agentflow::WorkerError>>,
) {
    let store = store();
    let app = graph.app().store(Arc::clone(&store));
    let approvals = agentflow::approval::ApprovalDesk::for_store(store, RoleAuthorizer::new());
    app.submit(thread, input).unwrap();
    let stop = CancellationToken::new();
    let worker = agentflow::Worker::new(app.clone(), Arc::new(Counts::default()))
        .poll_interval(std::time::Duration::from_millis(10));
    let handle = tokio::spawn(worker.run(stop.clone()));
    (app, approvals, stop, handle)
}

fn desk(topic: &str) -> Desk {
    Desk { topic: topic.into(), report: String::new() }
}

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

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Pay {
    amount: u32,
    receipt: Option<Value>,
}

#[graph(state = Pay, deps = Counts, start = pay)]
pub mod payer {
    use super::*;

    #[node(goto = [END], tools = [refund])]
    async fn pay(s: &Pay, cx: &Ctx<Counts>) -> Result<Step<Pay>, NodeError> {
        let obs = cx.run_tool(refund, json!({ "amount": s.amount })).await?;
        Ok(goto!(END, Pay::update().receipt(Some(obs.body))))
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Case {
    amount: u32,
    outcome: Option<Value>,
}

#[graph(state = Case, deps = Counts, start = settle)]
pub mod support {
    use super::*;

    #[node(goto = [END], subgraphs = [payer])]
    async fn settle(s: &Case, cx: &Ctx<Counts>) -> Result<Step<Case>, NodeError> {
        let paid = cx.subgraph(payer::graph(), Pay { amount: s.amount, receipt: None }).await?;
        Ok(goto!(END, Case::update().outcome(paid.receipt)))
    }
}

#[tokio::test]
async fn an_approval_inside_a_child_pauses_the_parent_and_the_approved_call_runs_once() {
    let store = store();
    let app = support::graph().app().store(Arc::clone(&store));
    let desk = app.approvals(RoleAuthorizer::new().role_for(Risk::Irreversible, "approver")).unwrap();
    let counts = Counts::default();
    let run = app.runner(&counts).thread("c").owner("agent").run(Case { amount: 40, outcome: None }).await.unwrap();
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

// ------------------------------------------------ cut off mid-child

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Slow {
    #[reduce(append)]
    done: Vec<String>,
}

/// Steps of `slow` run so far; the second blocks until released.
#[derive(Default)]
pub struct Gate {
    first: AtomicU32,
    second: AtomicU32,
    release: tokio::sync::Notify,
    blocked: tokio::sync::Notify,
}

#[graph(state = Slow, deps = Gate, start = one)]
pub mod slow {
    use super::*;

    #[node(goto = [two])]
    async fn one(_s: &Slow, gate: &Gate) -> Step<Slow> {
        gate.first.fetch_add(1, Ordering::SeqCst);
        goto!(two, Slow::update().done(vec!["one".to_string()]))
    }

    #[node(goto = [END])]
    async fn two(_s: &Slow, gate: &Gate) -> Step<Slow> {
        if gate.second.fetch_add(1, Ordering::SeqCst) == 0 {
            gate.blocked.notify_one();
            gate.release.notified().await;
        }
        goto!(END, Slow::update().done(vec!["two".to_string()]))
    }
}

#[graph(state = Slow, deps = Gate, start = run_it)]
pub mod slow_parent {
    use super::*;

    #[node(goto = [END], subgraphs = [slow])]
    async fn run_it(_s: &Slow, cx: &Ctx<Gate>) -> Result<Step<Slow>, NodeError> {
        let child = cx.subgraph(slow::graph(), Slow::default()).await?;
        Ok(goto!(END, Slow::update().done(child.done)))
    }
}

#[tokio::test]
async fn a_child_cut_off_mid_run_resumes_from_its_last_checkpoint() {
    let store = store();
    let app = slow_parent::graph().app().store(Arc::clone(&store));
    let gate = Arc::new(Gate::default());
    // The run is dropped while the child waits in its second step, as if the
    // process had died there: its first step is committed, its second not.
    let task = tokio::spawn({
        let (app, gate) = (app.clone(), Arc::clone(&gate));
        async move { app.runner(&*gate).thread("s").run(Slow::default()).await }
    });
    gate.blocked.notified().await;
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    assert_eq!(store.thread("s/run_it.0.0.slow").unwrap().unwrap().status, ThreadStatus::Running);

    let done = app.runner(&*gate).thread("s").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(done.state.done, ["one", "two"]);
    assert_eq!(gate.first.load(Ordering::SeqCst), 1, "the child's committed step ran again");
    assert_eq!(gate.second.load(Ordering::SeqCst), 2);
}

/// The child's thread names its parent; a thread of its own that merely has the id a child
/// would get is neither taken for the child (its state is not the child's result) nor run as it.
#[tokio::test]
async fn a_thread_of_its_own_with_a_childs_id_is_not_taken_for_the_child() {
    let store = store();
    let gate = Gate::default();
    gate.second.store(1, Ordering::SeqCst);
    // Run by hand, on the id `p`'s node would give its child.
    let own = slow::graph().app().store(Arc::clone(&store));
    assert_eq!(
        own.runner(&gate).thread("p/run_it.0.0.slow").run(Slow::default()).await.unwrap().outcome,
        Outcome::Completed
    );
    assert_eq!(store.thread("p/run_it.0.0.slow").unwrap().unwrap().parent, None);

    let app = slow_parent::graph().app().store(Arc::clone(&store));
    let run = app.runner(&gate).thread("p").run(Slow::default()).await.unwrap();
    let Outcome::Failed { node, error } = &run.outcome else { panic!("{}", run.outcome) };
    assert_eq!(node, "run_it");
    let error = error.to_string();
    assert!(error.contains("thread `p/run_it.0.0.slow`") && error.contains("is not a child of thread `p`"), "{error}");
    assert!(run.state.done.is_empty(), "the other thread's state was not taken: {:?}", run.state.done);
    assert_eq!(gate.first.load(Ordering::SeqCst), 1, "nothing ran as the child");

    // A real child names its parent.
    let run = app.runner(&gate).thread("q").run(Slow::default()).await.unwrap();
    assert_eq!(run.outcome, Outcome::Completed);
    assert_eq!(store.thread("q/run_it.0.0.slow").unwrap().unwrap().parent.as_deref(), Some("q"));
}

/// `slow` with a step after the one that waits: a cancel that comes while it waits has a step
/// boundary to stop at.
#[graph(state = Slow, deps = Gate, start = one)]
pub mod slower {
    use super::*;

    #[node(goto = [two])]
    async fn one(_s: &Slow, gate: &Gate) -> Step<Slow> {
        gate.first.fetch_add(1, Ordering::SeqCst);
        goto!(two, Slow::update().done(vec!["one".to_string()]))
    }

    #[node(goto = [three])]
    async fn two(_s: &Slow, gate: &Gate) -> Step<Slow> {
        if gate.second.fetch_add(1, Ordering::SeqCst) == 0 {
            gate.blocked.notify_one();
            gate.release.notified().await;
        }
        goto!(three, Slow::update().done(vec!["two".to_string()]))
    }

    #[node(goto = [END])]
    async fn three(_s: &Slow) -> Step<Slow> {
        goto!(END, Slow::update().done(vec!["three".to_string()]))
    }
}

#[graph(state = Slow, deps = Gate, start = run_it)]
pub mod slower_parent {
    use super::*;

    #[node(goto = [END], subgraphs = [slower])]
    async fn run_it(_s: &Slow, cx: &Ctx<Gate>) -> Result<Step<Slow>, NodeError> {
        let child = cx.subgraph(slower::graph(), Slow::default()).await?;
        Ok(goto!(END, Slow::update().done(child.done)))
    }
}

#[tokio::test]
async fn cancelling_the_parent_cancels_the_child() {
    let store = store();
    let app = slower_parent::graph().app().store(Arc::clone(&store));
    let gate = Arc::new(Gate::default());
    let token = CancellationToken::new();
    let task = tokio::spawn({
        let (app, gate, token) = (app.clone(), Arc::clone(&gate), token.clone());
        async move { app.runner(&*gate).thread("k").cancel_token(token).run(Slow::default()).await }
    });
    gate.blocked.notified().await;
    token.cancel();
    gate.release.notify_one();
    let run = task.await.unwrap().unwrap();
    assert_eq!(run.outcome, Outcome::Cancelled);
    let child = store.thread("k/run_it.0.0.slower").unwrap().unwrap();
    assert_eq!(child.status, ThreadStatus::Cancelled);
    assert_eq!(store.thread("k").unwrap().unwrap().status, ThreadStatus::Cancelled);
}

/// A cancel that comes during the child's last step, which is the parent's last step too, is too
/// late for both: the child's step commits it `completed`, and the parent's does the same.
#[tokio::test]
async fn a_cancel_during_the_last_step_of_child_and_parent_is_too_late_for_both() {
    let store = store();
    let app = slow_parent::graph().app().store(Arc::clone(&store));
    let gate = Arc::new(Gate::default());
    let token = CancellationToken::new();
    let task = tokio::spawn({
        let (app, gate, token) = (app.clone(), Arc::clone(&gate), token.clone());
        async move { app.runner(&*gate).thread("late").cancel_token(token).run(Slow::default()).await }
    });
    gate.blocked.notified().await;
    token.cancel();
    gate.release.notify_one();
    let run = task.await.unwrap().unwrap();
    assert_eq!(run.outcome, Outcome::Completed);
    assert_eq!(run.state.done, ["one", "two"]);
    assert_eq!(store.thread("late/run_it.0.0.slow").unwrap().unwrap().status, ThreadStatus::Completed);
    assert_eq!(store.thread("late").unwrap().unwrap().status, ThreadStatus::Completed);
}

// ------------------------------------------------ one resume value per node run

#[graph(state = Desk, deps = Counts, start = check)]
pub mod double_check {
    use super::*;

    /// The review child asks first; then the node asks on its own.
    #[node(goto = [END], subgraphs = [review], interrupt)]
    async fn check(s: &Desk, cx: &Ctx<Counts>) -> Result<Step<Desk>, NodeError> {
        let reviewed = cx.subgraph(review::graph(), Review { draft: s.topic.clone(), verdict: String::new() }).await?;
        let publish: bool = cx.interrupt(json!({ "verdict": reviewed.verdict }))?;
        Ok(goto!(END, Desk::update().report(format!("{} {publish}", reviewed.verdict))))
    }
}

#[tokio::test]
async fn a_resume_value_goes_to_the_child_that_waits_and_the_nodes_own_question_waits_for_the_next() {
    let counts = Counts::default();
    let app = double_check::graph().app().store(store());
    let run = app.runner(&counts).thread("d").run(desk("draft")).await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{}", run.outcome) };
    assert_eq!(pending[0].payload["path"], "check/ask");

    // The value answers the child; the node's own question then pauses the run.
    let run = app.runner(&counts).thread("d").resume_with("fine").await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{}", run.outcome) };
    assert_eq!(pending[0].payload, json!({ "verdict": "fine" }));

    let done = app.runner(&counts).thread("d").resume_with(true).await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(done.state.report, "fine true");
    assert_eq!(counts.reviews.load(Ordering::SeqCst), 2, "the completed review ran again");
}

/// The same node run by a worker, its questions answered from elsewhere (as the inbox answers):
/// the first answer wakes the parked run and goes to the child; the node's own question then
/// parks the run again at the same checkpoint, and the used answer neither wakes it nor answers
/// that question. The second answer does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_gives_an_answer_once_and_the_next_question_at_the_same_checkpoint_waits_for_its_own() {
    use agentflow_store::RunWait;
    use std::time::{Duration, Instant};
    let (app, approvals, stop, handle) = worker_running(double_check::graph(), "w", &desk("draft"));
    let parked = |claims: u32| {
        let app = app.clone();
        async move {
            let began = Instant::now();
            loop {
                let runs = app.live_runs().unwrap();
                if runs.iter().any(|r| r.wait == RunWait::Answer && r.claims == claims && r.lease.is_none()) {
                    return;
                }
                assert!(began.elapsed() < Duration::from_secs(60), "timed out waiting for claim {claims} to park");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };
    let answer = |value: Value| {
        let (seq, asks) = approvals.waiting_interrupt("w").unwrap();
        approvals.answer_interrupt("w", seq, value, &Approver::new("ops", ["x"])).unwrap();
        (seq, asks)
    };

    parked(1).await;
    let (first_seq, asks) = answer(json!("fine"));
    assert_eq!(asks.payload["path"], "check/ask");
    parked(2).await;
    // The node asks its own question where the child's was answered; nothing wakes the run.
    let (seq, asks) = approvals.waiting_interrupt("w").unwrap();
    assert_eq!((seq, &asks.payload), (first_seq, &json!({ "verdict": "fine" })));
    assert_eq!(approvals.recorded_answer("w").unwrap(), None, "the first answer is used");
    // And the log says so, once, naming the checkpoint whose answer it was.
    let used: Vec<_> = app.audit_log("w").unwrap().into_iter().filter(|e| e.kind == "interrupt.answer_used").collect();
    assert_eq!(used.len(), 1, "{used:?}");
    assert_eq!(used[0].detail["checkpoint"], first_seq, "{:?}", used[0].detail);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(app.live_runs().unwrap()[0].claims, 2, "parked, not claimed again");

    answer(json!(true));
    let began = Instant::now();
    while !app.live_runs().unwrap().is_empty() {
        assert!(began.elapsed() < Duration::from_secs(60), "timed out waiting for the run to complete");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop.cancel();
    let report = handle.await.unwrap().unwrap();
    assert_eq!((report.claimed, report.completed, report.failed), (3, 1, 0), "{report:?}");
    assert_eq!(app.state("w").unwrap().unwrap().state.report, "fine true");
}

/// An answer recorded from elsewhere, then overtaken by an explicit `resume_with`: when the run
/// asks again at the same checkpoint, the recorded answer answers neither that question nor the
/// next plain resume.
#[tokio::test]
async fn an_answer_overtaken_by_resume_with_does_not_answer_the_next_question() {
    use agentflow::approval::ApprovalDesk;
    let store = store();
    let counts = Counts::default();
    let app = double_check::graph().app().store(Arc::clone(&store));
    let approvals = ApprovalDesk::for_store(Arc::clone(&store), RoleAuthorizer::new());
    let run = app.runner(&counts).thread("o").run(desk("draft")).await.unwrap();
    assert!(matches!(run.outcome, Outcome::Interrupted { .. }), "{}", run.outcome);
    let (seq, _) = approvals.waiting_interrupt("o").unwrap();
    approvals.answer_interrupt("o", seq, json!("recorded"), &Approver::new("ops", ["x"])).unwrap();

    // The explicit value wins; the node's own question then waits at the same checkpoint.
    let run = app.runner(&counts).thread("o").resume_with("given").await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{}", run.outcome) };
    assert_eq!(pending[0].payload, json!({ "verdict": "given" }));
    assert_eq!(approvals.waiting_interrupt("o").unwrap().0, seq);
    assert_eq!(approvals.recorded_answer("o").unwrap(), None, "the recorded answer is used");
    let refused = app.runner(&counts).thread("o").resume().await;
    assert!(matches!(refused, Err(agentflow::RunError::ValueRequired { .. })), "{refused:?}");
    let done = app.runner(&counts).thread("o").resume_with(true).await.unwrap();
    assert_eq!(done.state.report, "given true");
}

/// An answer to the child's question that was never marked used (the process died right after
/// the child took it and asked its next question at the same checkpoint) names the question it
/// answers, so it does not answer the next one.
#[tokio::test]
async fn an_answer_left_unmarked_does_not_answer_the_next_question_at_its_checkpoint() {
    use agentflow::approval::{ANSWER_KIND, ApprovalDesk};
    use agentflow_store::NewAuditEntry;
    let store = store();
    let counts = Counts::default();
    let app = double_check::graph().app().store(Arc::clone(&store));
    let approvals = ApprovalDesk::for_store(Arc::clone(&store), RoleAuthorizer::new());
    let run = app.runner(&counts).thread("k").run(desk("draft")).await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{}", run.outcome) };
    let first_question = pending[0].payload.clone();
    let (seq, _) = approvals.waiting_interrupt("k").unwrap();
    let run = app.runner(&counts).thread("k").resume_with("fine").await.unwrap();
    assert!(matches!(run.outcome, Outcome::Interrupted { .. }), "{}", run.outcome);
    assert_eq!(approvals.waiting_interrupt("k").unwrap().0, seq, "the next question waits at the same checkpoint");

    // The answer to the first question, as recorded, with no mark after it.
    let detail = json!({
        "checkpoint": seq, "node": "check", "value": "stale",
        "asks": agentflow::tool::args_hash(&first_question),
    });
    store.append_audit("k", NewAuditEntry::new(1, "ops", ANSWER_KIND, detail)).unwrap();
    assert_eq!(approvals.recorded_answer("k").unwrap(), None, "it answers another question");
    let refused = app.runner(&counts).thread("k").resume().await;
    assert!(matches!(refused, Err(agentflow::RunError::ValueRequired { .. })), "{refused:?}");
    // The question asked now takes its own answer.
    approvals.answer_interrupt("k", seq, json!(true), &Approver::new("ops", ["x"])).unwrap();
    let done = app.runner(&counts).thread("k").resume().await.unwrap();
    assert_eq!(done.state.report, "fine true");
}

/// An answer typed for the question a person read is not recorded for the next question the
/// thread asked at the same checkpoint meanwhile (as the inbox answers: `answer_question`).
#[tokio::test]
async fn an_answer_to_a_question_the_thread_no_longer_asks_is_refused() {
    use agentflow::approval::{AnswerError, ApprovalDesk};
    let store = store();
    let counts = Counts::default();
    let app = double_check::graph().app().store(Arc::clone(&store));
    let approvals = ApprovalDesk::for_store(Arc::clone(&store), RoleAuthorizer::new());
    app.runner(&counts).thread("n").run(desk("draft")).await.unwrap();
    // A person reads the child's question ...
    let (seq, read) = approvals.waiting_interrupt("n").unwrap();
    assert_eq!(read.payload["path"], "check/ask");
    // ... while the app answers it and the node asks its own question at the same checkpoint.
    app.runner(&counts).thread("n").resume_with("fine").await.unwrap();
    let (now_seq, asks) = approvals.waiting_interrupt("n").unwrap();
    assert_eq!(now_seq, seq);
    let ops = Approver::new("ops", ["x"]);
    let refused = approvals.answer_question("n", seq, &read.question_id(), json!("meant for the child"), &ops);
    assert!(matches!(refused, Err(AnswerError::QuestionChanged { .. })), "{refused:?}");
    assert_eq!(approvals.recorded_answer("n").unwrap(), None, "nothing was recorded");
    approvals.answer_question("n", seq, &asks.question_id(), json!(true), &ops).unwrap();
    let done = app.runner(&counts).thread("n").resume().await.unwrap();
    assert_eq!(done.state.report, "fine true");
}

#[graph(state = Desk, deps = Counts, start = brief)]
pub mod ask_then_review {
    use super::*;

    /// The node asks first; then its review child asks.
    #[node(goto = [END], subgraphs = [review], interrupt)]
    async fn brief(s: &Desk, cx: &Ctx<Counts>) -> Result<Step<Desk>, NodeError> {
        let angle: String = cx.interrupt(json!({ "angle for": s.topic }))?;
        let draft = format!("{} from {angle}", s.topic);
        let reviewed = cx.subgraph(review::graph(), Review { draft, verdict: String::new() }).await?;
        Ok(goto!(END, Desk::update().report(format!("{angle}: {}", reviewed.verdict))))
    }
}

/// A node that asks, then runs a subgraph that asks too: its own answer is kept when the child's
/// question pauses the step, so the next value answers the child instead of the node again.
#[tokio::test]
async fn a_nodes_own_answer_is_kept_when_its_subgraph_then_asks_and_the_next_value_goes_to_the_child() {
    let counts = Counts::default();
    let app = ask_then_review::graph().app().store(store());
    let run = app.runner(&counts).thread("b").run(desk("rates")).await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{}", run.outcome) };
    assert_eq!(pending[0].payload, json!({ "angle for": "rates" }));

    let run = app.runner(&counts).thread("b").resume_with("savers").await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{}", run.outcome) };
    assert_eq!(pending[0].payload["path"], "brief/ask", "{pending:?}");
    assert_eq!(pending[0].payload["draft"], "rates from savers");

    // Before the answer was kept, this value went to the node's own question again and the
    // child asked once more, for ever.
    let done = app.runner(&counts).thread("b").resume_with("publish").await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(done.state.report, "savers: publish");
    assert_eq!(counts.reviews.load(Ordering::SeqCst), 2, "the child asked once and ran once more");
}

/// After a manual update of the paused parent, its node asks its own question anew, and the
/// value given for the child's question shown before is not taken as the node's answer.
#[tokio::test]
async fn after_update_state_the_node_asks_anew_and_takes_no_value_meant_for_its_child() {
    let counts = Counts::default();
    let app = ask_then_review::graph().app().store(store());
    app.runner(&counts).thread("u").run(desk("rates")).await.unwrap();
    let run = app.runner(&counts).thread("u").resume_with("savers").await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{}", run.outcome) };
    assert_eq!(pending[0].payload["path"], "brief/ask");

    app.update_state("u", Desk::update().topic("mortgages".into()), "ops").unwrap();
    let run = app.runner(&counts).thread("u").resume_with("publish").await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{}", run.outcome) };
    assert_eq!(pending[0].payload, json!({ "angle for": "mortgages" }), "the node asks anew");

    let run = app.runner(&counts).thread("u").resume_with("borrowers").await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{}", run.outcome) };
    // The child is the same thread (the update keeps the step's children), still asking.
    assert_eq!(
        (&pending[0].payload["path"], &pending[0].payload["draft"]),
        (&json!("brief/ask"), &json!("rates from savers"))
    );
    let done = app.runner(&counts).thread("u").resume_with("publish").await.unwrap();
    assert_eq!(done.state.report, "borrowers: publish");
}

/// The same answered from elsewhere (as the inbox answers) and run by a worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_continues_a_node_that_asked_before_its_subgraph_asked() {
    use agentflow_store::RunWait;
    use std::time::{Duration, Instant};
    let (app, approvals, stop, handle) = worker_running(ask_then_review::graph(), "bw", &desk("rates"));
    // Asked, and the run parked for the answer (until then, the worker holds the thread).
    let asked = |what: &'static str| {
        let (approvals, app) = (&approvals, &app);
        async move {
            let began = Instant::now();
            loop {
                let parked = app.live_runs().unwrap().iter().any(|r| r.wait == RunWait::Answer && r.lease.is_none());
                if let Ok((seq, asks)) = approvals.waiting_interrupt("bw")
                    && asks.payload.to_string().contains(what)
                    && parked
                {
                    return seq;
                }
                assert!(began.elapsed() < Duration::from_secs(60), "timed out waiting for {what:?} to be asked");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };
    let ops = Approver::new("ops", ["x"]);
    let seq = asked("angle for").await;
    approvals.answer_interrupt("bw", seq, json!("savers"), &ops).unwrap();
    let seq = asked("rates from savers").await;
    approvals.answer_interrupt("bw", seq, json!("publish"), &ops).unwrap();
    let began = Instant::now();
    while !app.live_runs().unwrap().is_empty() {
        assert!(began.elapsed() < Duration::from_secs(60), "timed out waiting for the run to complete");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop.cancel();
    let report = handle.await.unwrap().unwrap();
    assert_eq!((report.completed, report.failed), (1, 0), "{report:?}");
    assert_eq!(app.state("bw").unwrap().unwrap().state.report, "savers: publish");
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

// ------------------------------------------------ a child's items in the parent's stream

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Talk {
    said: String,
}

#[graph(state = Talk, deps = Counts, start = say)]
pub mod inner_talk {
    use super::*;

    #[node(goto = [END])]
    async fn say(_s: &Talk, cx: &Ctx<Counts>) -> Result<Step<Talk>, NodeError> {
        cx.emit(json!("from the grandchild")).await?;
        Ok(goto!(END, Talk::update().said("inner".to_string())))
    }
}

#[graph(state = Talk, deps = Counts, start = relay)]
pub mod middle_talk {
    use super::*;

    #[node(goto = [END], subgraphs = [inner_talk])]
    async fn relay(_s: &Talk, cx: &Ctx<Counts>) -> Result<Step<Talk>, NodeError> {
        cx.emit(json!("from the child")).await?;
        let inner = cx.subgraph(inner_talk::graph(), Talk::default()).await?;
        Ok(goto!(END, Talk::update().said(inner.said)))
    }
}

#[graph(state = Talk, deps = Counts, start = host)]
pub mod outer_talk {
    use super::*;

    #[node(goto = [END], subgraphs = [middle_talk])]
    async fn host(_s: &Talk, cx: &Ctx<Counts>) -> Result<Step<Talk>, NodeError> {
        cx.emit(json!("before")).await?;
        let child = cx.subgraph(middle_talk::graph(), Talk::default()).await?;
        cx.emit(json!("after")).await?;
        Ok(goto!(END, Talk::update().said(child.said)))
    }
}

#[tokio::test]
async fn a_childs_custom_values_reach_the_parents_stream_under_its_namespace() {
    use agentflow::{StreamMode, StreamPart};
    let counts = Counts::default();
    let app = outer_talk::graph().app().store(store());
    let mut stream = app.runner(&counts).thread("talk").stream_modes([StreamMode::Custom]).stream(Talk::default());
    let mut seen = Vec::new();
    let mut result = None;
    while let Some(item) = stream.next().await {
        match item.part {
            StreamPart::Custom { node, value, .. } => seen.push((item.namespace, node, value)),
            StreamPart::Done(r) => result = Some(r),
            other => panic!("only custom items were asked for: {other:?}"),
        }
    }
    assert_eq!(result.unwrap().unwrap().state.said, "inner");
    let child = "host.0.0.middle_talk".to_string();
    let grandchild = "relay.0.0.inner_talk".to_string();
    assert_eq!(
        seen,
        vec![
            (vec![], "host", json!("before")),
            (vec![child.clone()], "relay", json!("from the child")),
            (vec![child, grandchild], "say", json!("from the grandchild")),
            (vec![], "host", json!("after")),
        ]
    );
}

// ------------------------------------------------ pausing the parent pauses the child

#[graph(state = Slow, deps = Gate, start = one)]
pub mod waits_for_stop {
    use super::*;

    #[node(goto = [two])]
    async fn one(_s: &Slow, gate: &Gate) -> Step<Slow> {
        gate.first.fetch_add(1, Ordering::SeqCst);
        goto!(two, Slow::update().done(vec!["one".to_string()]))
    }

    /// Works until the run is told to stop (the first time), then finishes its step.
    #[node(goto = [three])]
    async fn two(_s: &Slow, cx: &Ctx<Gate>) -> Step<Slow> {
        if cx.deps().second.fetch_add(1, Ordering::SeqCst) == 0 {
            cx.deps().blocked.notify_one();
            cx.cancelled().await;
        }
        goto!(three, Slow::update().done(vec!["two".to_string()]))
    }

    #[node(goto = [END])]
    async fn three(_s: &Slow) -> Step<Slow> {
        goto!(END, Slow::update().done(vec!["three".to_string()]))
    }
}

#[graph(state = Slow, deps = Gate, start = run_it)]
pub mod pausable_parent {
    use super::*;

    #[node(goto = [END], subgraphs = [waits_for_stop])]
    async fn run_it(_s: &Slow, cx: &Ctx<Gate>) -> Result<Step<Slow>, NodeError> {
        let child = cx.subgraph(waits_for_stop::graph(), Slow::default()).await?;
        Ok(goto!(END, Slow::update().done(child.done)))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pausing_a_parent_from_outside_pauses_its_child_and_a_resume_finishes_both() {
    use agentflow::Worker;
    let store = store();
    let app = pausable_parent::graph().app().store(Arc::clone(&store));
    let gate = Arc::new(Gate::default());
    app.submit("w", &Slow::default()).unwrap();
    let stop = CancellationToken::new();
    let worker = Worker::new(app.clone(), Arc::clone(&gate)).poll_interval(std::time::Duration::from_millis(10));
    let handle = tokio::spawn(worker.run(stop.clone()));
    // The child works in its second step; the parent is paused meanwhile.
    tokio::time::timeout(std::time::Duration::from_secs(10), gate.blocked.notified()).await.unwrap();
    assert!(app.pause_run("w").unwrap());
    let status = |id: &str| store.thread(id).unwrap().map(|t| t.status);
    for _ in 0..1000 {
        if status("w") == Some(ThreadStatus::Paused) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(status("w"), Some(ThreadStatus::Paused));
    // Paused, not cancelled: nothing would be compensated.
    assert_eq!(status("w/run_it.0.0.waits_for_stop"), Some(ThreadStatus::Paused));
    // The worker takes the paused run out of the queue just after writing the status.
    for _ in 0..1000 {
        if app.live_runs().unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }

    app.submit_resume("w").unwrap();
    for _ in 0..1000 {
        if status("w") == Some(ThreadStatus::Completed) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(status("w"), Some(ThreadStatus::Completed));
    assert_eq!(app.state("w").unwrap().unwrap().state.done, ["one", "two", "three"]);
    assert_eq!((gate.first.load(Ordering::SeqCst), gate.second.load(Ordering::SeqCst)), (1, 1), "a step ran twice");
    stop.cancel();
    handle.await.unwrap().unwrap();
}

// ------------------------------------------------ a child that sleeps

#[graph(state = Talk, deps = Counts, start = nap)]
pub mod napper {
    use super::*;

    #[node(goto = [END], sleep)]
    async fn nap(_s: &Talk, cx: &Ctx<Counts>) -> Result<Step<Talk>, NodeError> {
        cx.sleep(std::time::Duration::from_millis(30)).await?;
        Ok(goto!(END, Talk::update().said("rested".to_string())))
    }
}

#[graph(state = Talk, deps = Counts, start = wait)]
pub mod nap_parent {
    use super::*;

    #[node(goto = [END], subgraphs = [napper])]
    async fn wait(_s: &Talk, cx: &Ctx<Counts>) -> Result<Step<Talk>, NodeError> {
        let child = cx.subgraph(napper::graph(), Talk::default()).await?;
        Ok(goto!(END, Talk::update().said(child.said)))
    }
}

#[tokio::test]
async fn a_sleeping_child_makes_the_parent_sleep_and_the_parents_scheduler_wakes_the_tree() {
    let store = store();
    let app = nap_parent::graph().app().store(Arc::clone(&store));
    let run = app.runner(&Counts::default()).thread("n").run(Talk::default()).await.unwrap();
    let Outcome::Sleeping { until, .. } = run.outcome else { panic!("{}", run.outcome) };
    let child = "n/wait.0.0.napper";
    assert_eq!(store.thread(child).unwrap().unwrap().status, ThreadStatus::Sleeping);
    assert_eq!(store.thread_timer(child).unwrap(), Some(until), "the parent sleeps until the child wakes");
    // The child's own timer is not the parent graph's to wake: nothing happens, no error.
    while agentflow::timer::now_ms() < until {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert!(app.wake(child, &Counts::default()).await.unwrap().is_none());

    let scheduler = app.scheduler(Arc::new(Counts::default()));
    let woken = scheduler.subscribe().wait_for("n").await.expect("the scheduler runs");
    assert_eq!(woken.result, Ok(Outcome::Completed));
    assert_eq!(app.state("n").unwrap().unwrap().state.said, "rested");
    assert_eq!(store.thread(child).unwrap().unwrap().status, ThreadStatus::Completed);
    scheduler.shutdown().await;
}

#[tokio::test]
async fn a_childs_values_updates_and_events_reach_the_parents_stream_as_json() {
    use agentflow::{StreamMode, StreamPart};
    let counts = Counts::default();
    let app = outer_talk::graph().app().store(store());
    let modes = [StreamMode::Values, StreamMode::Updates, StreamMode::Events];
    let mut stream = app.runner(&counts).thread("talk2").stream_modes(modes).stream(Talk::default());
    let (mut root_values, mut child_items) = (Vec::new(), Vec::new());
    while let Some(item) = stream.next().await {
        match item.part {
            StreamPart::Values { state, .. } => root_values.push(state.said),
            StreamPart::Child { mode, value } => child_items.push((item.namespace, mode, value)),
            _ => {}
        }
    }
    assert_eq!(root_values, ["inner"]);
    let child = vec!["host.0.0.middle_talk".to_string()];
    let grandchild = vec!["host.0.0.middle_talk".to_string(), "relay.0.0.inner_talk".to_string()];
    let of = |ns: &Vec<String>, mode| child_items.iter().filter(|(n, m, _)| n == ns && *m == mode).count();
    // One super-step each: one value, one update, and their events.
    for ns in [&child, &grandchild] {
        assert_eq!(of(ns, StreamMode::Values), 1, "{ns:?}: {child_items:?}");
        assert_eq!(of(ns, StreamMode::Updates), 1, "{ns:?}");
        assert!(of(ns, StreamMode::Events) >= 3, "{ns:?}: step started, node started, node finished, finished");
    }
    let value = |ns: &Vec<String>, mode| child_items.iter().find(|(n, m, _)| n == ns && *m == mode).unwrap().2.clone();
    assert_eq!(value(&grandchild, StreamMode::Values), json!({ "step": 1, "state": { "said": "inner" } }));
    let update = value(&child, StreamMode::Updates);
    assert_eq!((update["node"].clone(), update["update"]["said"].clone()), (json!("relay"), json!("inner")));
    assert!(value(&child, StreamMode::Events)["event"].is_string());
}

// ------------------------------------------------ a child that moves on in a step that fails

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Two {
    #[reduce(append)]
    answers: Vec<String>,
}

#[graph(state = Two, deps = Counts, start = first)]
pub mod two_questions {
    use super::*;

    #[node(goto = [second], interrupt)]
    async fn first(_s: &Two, cx: &Ctx<Counts>) -> Result<Step<Two>, NodeError> {
        let a: String = cx.interrupt(json!({ "q": 1 }))?;
        Ok(goto!(second, Two::update().answers(vec![a])))
    }

    #[node(goto = [END], interrupt)]
    async fn second(_s: &Two, cx: &Ctx<Counts>) -> Result<Step<Two>, NodeError> {
        let a: String = cx.interrupt(json!({ "q": 2 }))?;
        Ok(goto!(END, Two::update().answers(vec![a])))
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Pair {
    child: Vec<String>,
    vetted: String,
}

#[graph(state = Pair, deps = Counts, start = split)]
pub mod beside_a_vet {
    use super::*;

    #[node(goto = [delegate, vet])]
    async fn split(_s: &Pair) -> Step<Pair> {
        goto!([delegate, vet], Pair::update())
    }

    #[node(goto = [END], subgraphs = [two_questions], writes = [child])]
    async fn delegate(_s: &Pair, cx: &Ctx<Counts>) -> Result<Step<Pair>, NodeError> {
        let done = cx.subgraph(two_questions::graph(), Two::default()).await?;
        Ok(goto!(END, Pair::update().child(done.answers)))
    }

    /// Asks, and refuses a bad value.
    #[node(goto = [END], interrupt, writes = [vetted])]
    async fn vet(_s: &Pair, cx: &Ctx<Counts>) -> Result<Step<Pair>, NodeError> {
        let v: String = cx.interrupt(json!({ "vet": "?" }))?;
        if v == "bad" {
            return Err(NodeError::fatal("bad value"));
        }
        Ok(goto!(END, Pair::update().vetted(v)))
    }
}

/// Answers each question thread `thread` waits on with `value`, one at a time by its id; the
/// run that the last answer continued.
async fn answer_each<S: State>(app: &App<S, Counts>, counts: &Counts, thread: &str, value: &str) -> Run<S> {
    let asked = app.pending(thread).unwrap();
    let mut last = None;
    for p in asked.iter().filter(|p| p.kind == PendingKind::Interrupt) {
        last = Some(app.runner(counts).thread(thread).resume_answering(&p.question_id(), value).await.unwrap());
    }
    last.expect("the thread asks something")
}

/// What thread `thread` waits for at its latest checkpoint, as stored (what the inbox, the
/// `agentflow` tool and an answer given from elsewhere read; `App::pending` shows it while the
/// thread is paused, and the questions of a failed thread).
fn stored_waits(store: &Arc<dyn Store>, thread: &str) -> Vec<Value> {
    let seq = store.latest_checkpoint(thread).unwrap().unwrap().seq;
    let writes = store.pending_writes(thread, seq).unwrap();
    let w = writes.iter().find(|w| w.node == "__interrupts__").expect("what the thread waits for");
    serde_json::from_slice(&w.value).unwrap()
}

/// The child's first question and the sibling are each answered with a value the sibling refuses:
/// the step fails, but the child moved on to its second question, durably. What the thread waits
/// for says so (an answer given from elsewhere is read against it), and the next answer to it
/// answers that one.
#[tokio::test]
async fn a_child_that_moved_on_in_a_step_that_failed_is_shown_waiting_at_its_new_question() {
    let counts = Counts::default();
    let store = store();
    let app = beside_a_vet::graph().app().store(Arc::clone(&store));
    let run = app.runner(&counts).thread("v").run(Pair::default()).await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{}", run.outcome) };
    assert_eq!(pending.len(), 2, "{pending:?}");
    let run = answer_each(&app, &counts, "v", "bad").await;
    assert!(matches!(run.outcome, Outcome::Failed { .. }), "{}", run.outcome);

    let waits = stored_waits(&store, "v");
    let child = waits.iter().find(|p| p["node"] == "delegate").expect("the child still waits");
    assert_eq!(child["payload"]["path"], "delegate/second", "{waits:?}");
    assert!(waits.iter().any(|p| p["node"] == "vet"), "{waits:?}");

    let done = answer_each(&app, &counts, "v", "good").await;
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!((done.state.child, done.state.vetted.as_str()), (vec!["bad".to_string(), "good".to_string()], "good"));
}

#[graph(state = Desk, deps = Counts, start = publish)]
pub mod flaky_after_review {
    use super::*;

    /// The review child asks once; then the node calls a service that may be down.
    #[node(goto = [END], subgraphs = [review])]
    async fn publish(s: &Desk, cx: &Ctx<Counts>) -> Result<Step<Desk>, NodeError> {
        let reviewed = cx.subgraph(review::graph(), Review { draft: s.topic.clone(), verdict: String::new() }).await?;
        if cx.deps().fail.load(Ordering::SeqCst) {
            return Err(NodeError::fatal("the publishing service is down"));
        }
        Ok(goto!(END, Desk::update().report(reviewed.verdict)))
    }
}

/// The child takes the value and completes, durably; then the node fails. Nothing waits for a
/// value any more: a plain resume (once the service is back) completes, with the child's answer.
#[tokio::test]
async fn a_node_that_fails_after_its_child_took_the_value_does_not_ask_for_another() {
    let counts = Counts::default();
    let store = store();
    let app = flaky_after_review::graph().app().store(Arc::clone(&store));
    let run = app.runner(&counts).thread("p").run(desk("draft")).await.unwrap();
    assert!(matches!(run.outcome, Outcome::Interrupted { .. }), "{}", run.outcome);
    counts.fail.store(true, Ordering::SeqCst);
    let run = app.runner(&counts).thread("p").resume_with("ship it").await.unwrap();
    assert!(matches!(run.outcome, Outcome::Failed { .. }), "{}", run.outcome);
    assert!(stored_waits(&store, "p").is_empty(), "{:?}", stored_waits(&store, "p"));

    counts.fail.store(false, Ordering::SeqCst);
    let done = app.runner(&counts).thread("p").resume().await.unwrap();
    assert_eq!((done.outcome, done.state.report.as_str()), (Outcome::Completed, "ship it"));
    assert_eq!(counts.reviews.load(Ordering::SeqCst), 2, "the review asked, then took the value; no third run");
}

#[graph(state = Pair, deps = Counts, start = wrap)]
pub mod around_a_vet {
    use super::*;

    #[node(goto = [END], subgraphs = [beside_a_vet])]
    async fn wrap(_s: &Pair, cx: &Ctx<Counts>) -> Result<Step<Pair>, NodeError> {
        let done = cx.subgraph(beside_a_vet::graph(), Pair::default()).await?;
        Ok(goto!(END, Pair::update().child(done.child).vetted(done.vetted)))
    }
}

/// One level further down, the child's step fails while one of its nodes still waits for a value.
/// The child is `failed`, yet it waits: resuming the parent shows its question again (instead of
/// failing with "a value is required" on every resume), and the next value reaches it. The
/// child's step asks two questions; its parent asks them one after the other, each answer going
/// to its own question, and the child goes on once both have theirs.
#[tokio::test]
async fn a_child_whose_step_failed_while_it_waited_gets_the_next_value() {
    let counts = Counts::default();
    let app = around_a_vet::graph().app().store(store());
    let run = app.runner(&counts).thread("w").run(Pair::default()).await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{}", run.outcome) };
    assert_eq!(pending[0].payload["path"], "wrap/delegate/first", "{pending:?}");
    // The child's first question answered, its second (the vet's) is asked next.
    let run = app.runner(&counts).thread("w").resume_with("bad").await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{}", run.outcome) };
    assert_eq!(pending[0].payload["path"], "wrap/vet", "{pending:?}");
    let run = app.runner(&counts).thread("w").resume_with("bad").await.unwrap();
    assert!(matches!(run.outcome, Outcome::Failed { .. }), "{}", run.outcome);
    let run = app.runner(&counts).thread("w").resume().await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{}", run.outcome) };
    assert_eq!(pending[0].node, "wrap", "{pending:?}");
    let run = app.runner(&counts).thread("w").resume_with("good").await.unwrap();
    assert!(matches!(run.outcome, Outcome::Interrupted { .. }), "{}", run.outcome);
    let done = app.runner(&counts).thread("w").resume_with("good").await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!((done.state.child, done.state.vetted.as_str()), (vec!["bad".to_string(), "good".to_string()], "good"));
}

// ---------------------------------------------------------------- a parent's timeout and a child's effect

/// Runs of the child's effect begun and ended.
#[derive(Default)]
pub struct Mailer {
    began: AtomicU32,
    ended: AtomicU32,
    /// Set: the child's node goes on working after its effect, past the parent's timeout.
    linger: AtomicBool,
}

#[graph(state = Slow, deps = Mailer, start = send)]
pub mod mailing {
    use super::*;

    #[node(goto = [END])]
    async fn send(_s: &Slow, cx: &Ctx<Mailer>) -> Result<Step<Slow>, NodeError> {
        let sent = cx
            .effect("send-mail", |_key| async {
                cx.deps().began.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
                cx.deps().ended.fetch_add(1, Ordering::SeqCst);
                Ok::<_, NodeError>("sent".to_string())
            })
            .await?;
        if cx.deps().linger.swap(false, Ordering::SeqCst) {
            // Without this the node could end in the same poll as its effect, and work that ends
            // while an effect holds the deadline off is kept: the run would complete.
            tokio::time::sleep(std::time::Duration::from_secs(5)).await;
        }
        Ok(goto!(END, Slow::update().done(vec![sent])))
    }
}

#[graph(state = Slow, deps = Mailer, start = notify)]
pub mod mailing_parent {
    use super::*;

    // Long enough that the child's effect has begun when it falls, even on a loaded machine.
    #[node(goto = [END], subgraphs = [mailing], timeout = 1s)]
    async fn notify(_s: &Slow, cx: &Ctx<Mailer>) -> Result<Step<Slow>, NodeError> {
        let child = cx.subgraph(mailing::graph(), Slow::default()).await?;
        Ok(goto!(END, Slow::update().done(child.done)))
    }
}

/// A parent node's timeout that falls while its child's effect is in flight lets the effect
/// finish and be journaled, as it does for the node's own effects: the effect is never cut off
/// mid-call, and a resume replays it instead of asking about an unknown outcome.
#[tokio::test]
async fn a_parent_timeout_lets_its_childs_effect_in_flight_finish() {
    let store = store();
    let app = mailing_parent::graph().app().store(Arc::clone(&store));
    let mailer = Mailer { linger: AtomicBool::new(true), ..Mailer::default() };
    let run = app.runner(&mailer).thread("mail").run(Slow::default()).await.unwrap();
    assert_eq!(mailer.ended.load(Ordering::SeqCst), 1, "the child's effect was cut off mid-call");
    let Outcome::Failed { error, .. } = &run.outcome else { panic!("{:?}", run.outcome) };
    assert!(error.message.contains("timed out"), "{error}");

    let again = app.runner(&mailer).thread("mail").resume().await.unwrap();
    assert_eq!(mailer.began.load(Ordering::SeqCst), 1, "the effect ran again");
    assert_eq!(again.outcome, Outcome::Completed, "a resume replays the journaled effect");
    assert_eq!(again.state.done, vec!["sent".to_string()]);
}

// ---------------------------------------------------------------- a child's own step bound

#[graph(state = Slow, deps = Gate, start = spin, max_steps = 3)]
pub mod spinner {
    use super::*;

    #[node(goto = [spin, END])]
    async fn spin(_s: &Slow) -> Step<Slow> {
        goto!(spin, Slow::update().done(vec!["spin".to_string()]))
    }
}

#[graph(state = Slow, deps = Gate, start = try_it)]
pub mod tolerant_parent {
    use super::*;

    /// Runs a child that never finishes, and carries on without it.
    #[node(goto = [END], subgraphs = [spinner])]
    async fn try_it(_s: &Slow, cx: &Ctx<Gate>) -> Result<Step<Slow>, NodeError> {
        let note = match cx.subgraph(spinner::graph(), Slow::default()).await {
            Ok(_) => "finished".to_string(),
            Err(e) => format!("gave up: {}", e.message),
        };
        Ok(goto!(END, Slow::update().done(vec![note])))
    }
}

/// A child's step bound is its own: the parent's node gets a plain error it may handle, and the
/// parent's run is not out of a budget (it would stay so on every resume).
#[tokio::test]
async fn a_child_that_reaches_its_own_step_bound_fails_the_call_not_the_parents_budget() {
    let app = tolerant_parent::graph().app().store(store());
    let run = app.runner(&Gate::default()).thread("spin").run(Slow::default()).await.unwrap();
    assert_eq!(run.outcome, Outcome::Completed, "{:?}", run.outcome);
    assert!(run.state.done[0].contains("step bound"), "{:?}", run.state.done);
}
