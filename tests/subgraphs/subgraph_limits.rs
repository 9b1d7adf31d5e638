//! Budgets of a child resumed under its parent. The child is created with
//! the limits its parent had left; when the parent later resumes it, the
//! child runs with what the parent has left on top of what it used. Two
//! ways that sum exceeds the child's stored limits: the child was cut off
//! by a crash (its usage never reached the parent), or an operator raised
//! the parent's limits after it ran out. Neither may fail the parent; the
//! child runs with what the parent allows.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use agentflow::prelude::*;
use agentflow::{Budget, Limits, Outcome};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[derive(Default)]
pub struct Gate {
    searches: AtomicU32,
    second: AtomicU32,
    release: tokio::sync::Notify,
    blocked: tokio::sync::Notify,
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct Query {
    q: String,
}

/// Searches; read-only.
#[tool(risk = read)]
async fn search(args: Query, deps: &Gate) -> Result<Value, ToolError> {
    deps.searches.fetch_add(1, Ordering::SeqCst);
    Ok(json!({ "hits": [args.q] }))
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Job {
    n: u32,
    #[reduce(append)]
    done: Vec<String>,
}

#[graph(state = Job, deps = Gate, start = one)]
pub mod child_job {
    use super::*;

    /// `n` searches.
    #[node(goto = [two], tools = [search])]
    async fn one(s: &Job, cx: &Ctx<Gate>) -> Result<Step<Job>, NodeError> {
        for i in 0..s.n {
            cx.run_tool(search, json!({ "q": format!("q{i}") })).await?;
        }
        Ok(goto!(two, Job::update().done(vec!["one".to_string()])))
    }

    /// Blocks the first time until released (where the test cuts the run off).
    #[node(goto = [END])]
    async fn two(_s: &Job, gate: &Gate) -> Step<Job> {
        if gate.second.fetch_add(1, Ordering::SeqCst) == 0 {
            gate.blocked.notify_one();
            gate.release.notified().await;
        }
        goto!(END, Job::update().done(vec!["two".to_string()]))
    }
}

#[graph(state = Job, deps = Gate, start = delegate)]
pub mod parent_job {
    use super::*;

    #[node(goto = [END], subgraphs = [child_job])]
    async fn delegate(s: &Job, cx: &Ctx<Gate>) -> Result<Step<Job>, NodeError> {
        let child = cx.subgraph(child_job::graph(), Job { n: s.n, done: vec![] }).await?;
        Ok(goto!(END, Job::update().done(child.done)))
    }
}

use crate::support::stores::store;

#[tokio::test]
async fn a_child_cut_off_after_using_part_of_the_budget_resumes_under_a_limited_parent() {
    let store = store();
    let app = parent_job::graph().app().store(Arc::clone(&store));
    let gate = Arc::new(Gate::default());
    let task = tokio::spawn({
        let (app, gate) = (app.clone(), Arc::clone(&gate));
        async move {
            let runner = app.runner(&*gate).thread("p").limits(Limits::none().tool_calls(5));
            runner.run(Job { n: 2, done: vec![] }).await
        }
    });
    gate.blocked.notified().await;
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());

    let done = app.runner(&*gate).thread("p").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(done.state.done, ["one", "two"]);
    assert_eq!(gate.searches.load(Ordering::SeqCst), 2, "the child's committed step ran again");
}

#[tokio::test]
async fn raising_the_parents_limits_lets_its_exhausted_child_go_on() {
    let store = store();
    let app = parent_job::graph().app().store(Arc::clone(&store));
    let gate = Gate::default();
    gate.second.store(1, Ordering::SeqCst); // `two` does not block here
    let runner = app.runner(&gate).thread("r").limits(Limits::none().tool_calls(2));
    let run = runner.run(Job { n: 3, done: vec![] }).await.unwrap();
    assert_eq!(run.outcome, Outcome::BudgetExhausted { which: Budget::ToolCalls });

    app.raise_limits("r", Limits::none().tool_calls(10), "ops").unwrap();
    let done = app.runner(&gate).thread("r").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed, "usage {:?}", done.usage);
    assert_eq!(done.state.done, ["one", "two"]);
}
