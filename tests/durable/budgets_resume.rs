//! Budgets of a persisted thread count across resumes and processes: a
//! thread stopped by a limit stays stopped until the limit is raised, by an
//! explicit and audited call.

use std::path::PathBuf;
use std::sync::Arc;

use crate::support::stores::open_redb;
use agentflow::model::ScriptedModel;
use agentflow::prebuilt::react::{ReactDeps, ReactState};
use agentflow::prelude::*;
use agentflow::{Budget, Limits, RedbStore, RunError, Store};
use serde_json::json;

use crate::support::calculator::{add, add_runs, divide, multiply};

agentflow::react_agent!(mod calculator, tools = [add, multiply, divide], max_steps = 40);

/// A model that asks for `add` forever.
fn endless_adder() -> Arc<ScriptedModel> {
    let mut model = ScriptedModel::new();
    for i in 0..30 {
        model = model.reply_tool_call("add", json!({ "a": i, "b": 1 }));
    }
    Arc::new(model)
}

fn graph_on(store: Arc<dyn Store>) -> App<ReactState, ReactDeps> {
    calculator::graph().app().store(store)
}

fn in_memory() -> Arc<dyn Store> {
    Arc::new(RedbStore::in_memory().unwrap())
}

fn exhausted(which: Budget) -> Outcome {
    Outcome::BudgetExhausted { which }
}

#[tokio::test]
async fn a_thread_out_of_model_calls_stays_out_on_resume() {
    let graph = graph_on(in_memory());
    let model = endless_adder();
    let deps = ReactDeps::new(model.clone());
    let limits = Limits::none().model_calls(3);
    let first = graph.runner(&deps).thread("m").limits(limits).run(ReactState::ask("count")).await.unwrap();
    assert_eq!(first.outcome, exhausted(Budget::ModelCalls));
    assert_eq!(model.calls(), 3);
    assert_eq!(first.usage.model_calls, 3);

    // Resumed with the runner's defaults or the same limits: no further call.
    for runner in [graph.runner(&deps).thread("m"), graph.runner(&deps).thread("m").limits(limits)] {
        let again = runner.resume().await.unwrap();
        assert_eq!(again.outcome, exhausted(Budget::ModelCalls));
        assert_eq!(model.calls(), 3, "a resume made another model call");
        assert_eq!(again.usage.model_calls, 3);
        assert_eq!(again.usage_this_run.model_calls, 0);
    }
}

#[tokio::test]
async fn raising_a_thread_limit_takes_an_audited_call() {
    let graph = graph_on(in_memory());
    let model = endless_adder();
    let deps = ReactDeps::new(model.clone());
    let run = graph.runner(&deps).thread("r").limits(Limits::none().model_calls(3)).run(ReactState::ask("count"));
    assert_eq!(run.await.unwrap().outcome, exhausted(Budget::ModelCalls));

    // A runner cannot raise it by itself.
    let err = graph.runner(&deps).thread("r").limits(Limits::none().model_calls(5)).resume().await.unwrap_err();
    assert!(matches!(err, RunError::LimitRaised { which: Budget::ModelCalls, stored: 3, asked: 5, .. }), "{err}");
    assert_eq!(model.calls(), 3);

    let before = graph.raise_limits("r", Limits::none().model_calls(5), "ops:carol").unwrap();
    assert_eq!(before.model_calls, Some(3));
    let audit: Vec<_> = graph.audit_log("r").unwrap().into_iter().filter(|e| e.kind == "limits.raised").collect();
    assert_eq!(audit.len(), 1);
    assert_eq!(audit[0].actor, "ops:carol");
    assert_eq!(audit[0].detail["from"]["model_calls"], 3);
    assert_eq!(audit[0].detail["to"]["model_calls"], 5);
    assert_eq!(audit[0].detail["usage"]["model_calls"], 3);

    let more = graph.runner(&deps).thread("r").resume().await.unwrap();
    assert_eq!(more.outcome, exhausted(Budget::ModelCalls));
    assert_eq!(model.calls(), 5, "exactly two more calls");
    assert_eq!(more.usage.model_calls, 5);
    assert_eq!(more.usage_this_run.model_calls, 2);
}

#[tokio::test]
async fn a_resume_may_tighten_the_thread_limit_for_itself() {
    let graph = graph_on(in_memory());
    let model = endless_adder();
    let deps = ReactDeps::new(model.clone());
    let first = graph.runner(&deps).thread("t").limits(Limits::none().model_calls(10)).max_steps(2);
    assert_eq!(first.run(ReactState::ask("count")).await.unwrap().outcome, exhausted(Budget::Steps));
    assert_eq!(model.calls(), 1);
    let tighter = graph.runner(&deps).thread("t").limits(Limits::none().model_calls(2)).resume().await.unwrap();
    assert_eq!(tighter.outcome, exhausted(Budget::ModelCalls));
    assert_eq!(model.calls(), 2);
}

#[tokio::test]
async fn a_thread_out_of_tool_calls_runs_no_tool_on_resume() {
    let graph = graph_on(in_memory());
    let model = endless_adder();
    let deps = ReactDeps::new(model.clone());
    let run = graph.runner(&deps).thread("tc").limits(Limits::none().tool_calls(2)).run(ReactState::ask("count"));
    let first = run.await.unwrap();
    assert_eq!(first.outcome, exhausted(Budget::ToolCalls));
    assert_eq!(add_runs(), 2);
    let (calls, usage) = (model.calls(), first.usage);
    assert_eq!(usage.tool_calls, 2);

    let again = graph.runner(&deps).thread("tc").resume().await.unwrap();
    assert_eq!(again.outcome, exhausted(Budget::ToolCalls));
    assert_eq!(add_runs(), 2, "a resume ran another tool");
    assert_eq!(model.calls(), calls, "a resume made another model call");
    assert_eq!(again.usage, usage);
    assert_eq!(again.usage_this_run, Default::default());
}

#[tokio::test]
async fn a_thread_out_of_tokens_makes_no_model_call_on_resume() {
    let graph = graph_on(in_memory());
    let model = endless_adder();
    let deps = ReactDeps { max_output_tokens: Some(10), ..ReactDeps::new(model.clone()) };
    let run = graph.runner(&deps).thread("tk").limits(Limits::none().tokens(120)).run(ReactState::ask("count"));
    let first = run.await.unwrap();
    assert_eq!(first.outcome, exhausted(Budget::Tokens));
    let (calls, tokens) = (model.calls(), first.usage.tokens);
    assert!(calls > 0 && tokens > 0, "{calls} calls, {tokens} tokens");

    let again = graph.runner(&deps).thread("tk").resume().await.unwrap();
    assert_eq!(again.outcome, exhausted(Budget::Tokens));
    assert_eq!(model.calls(), calls, "a resume made another model call");
    assert_eq!(again.usage.tokens, tokens);
}

fn temp_file(name: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let dir = std::env::temp_dir().join(format!("agentflow-budgets-{name}-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("threads.redb")
}

#[tokio::test]
async fn usage_survives_reopening_the_store() {
    let path = temp_file("reopen");
    let model = endless_adder();
    let deps = ReactDeps::new(model.clone());
    {
        let graph = graph_on(Arc::new(open_redb(&path).unwrap()));
        let run = graph.runner(&deps).thread("p").limits(Limits::none().model_calls(3)).run(ReactState::ask("n"));
        assert_eq!(run.await.unwrap().outcome, exhausted(Budget::ModelCalls));
    }
    // As a new process would: a fresh store on the same file.
    let graph = graph_on(Arc::new(open_redb(&path).unwrap()));
    let again = graph.runner(&deps).thread("p").resume().await.unwrap();
    assert_eq!(again.outcome, exhausted(Budget::ModelCalls));
    assert_eq!(model.calls(), 3);
    assert_eq!(again.usage.model_calls, 3);
    drop(graph);
    let _ = std::fs::remove_dir_all(path.parent().unwrap());
}

#[tokio::test]
async fn usage_counts_across_a_pause_and_a_fork() {
    let graph = graph_on(in_memory());
    let model = endless_adder();
    let deps = ReactDeps::new(model.clone());
    let run = graph.runner(&deps).thread("f").limits(Limits::none().model_calls(4)).max_steps(4);
    assert_eq!(run.run(ReactState::ask("n")).await.unwrap().outcome, exhausted(Budget::Steps));
    let spent = model.calls();
    assert_eq!(spent, 2);
    // Branching back to the start does not refund the calls already made.
    graph.fork("f", 0, "operator").unwrap();
    let branch = graph.runner(&deps).thread("f").resume().await.unwrap();
    assert_eq!(branch.outcome, exhausted(Budget::ModelCalls));
    assert_eq!(model.calls(), 4);
    assert_eq!(branch.usage.model_calls, 4);
}

// A node that catches the budget's refusal and goes on to END.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize, State)]
pub struct Tally {
    #[reduce(append)]
    notes: Vec<String>,
}

#[graph(state = Tally, deps = (), start = work)]
mod swallower {
    use super::*;

    #[node(goto = [END], tools = [add])]
    async fn work(_s: &Tally, cx: &Ctx<()>) -> Result<Step<Tally>, NodeError> {
        let mut notes = Vec::new();
        for i in 0..3 {
            // The refusal of the call past the limit is caught and noted, not returned.
            match cx.run_tool(add, json!({ "a": i, "b": 1 })).await {
                Ok(obs) => notes.push(obs.body.to_string()),
                Err(e) => notes.push(format!("refused: {e}")),
            }
        }
        Ok(goto!(END, Tally::update().notes(notes)))
    }
}

#[tokio::test]
async fn a_node_that_catches_the_budget_refusal_does_not_complete_the_run() {
    // Without a store, and on a stored thread: the run ends as out of budget, the node's step unapplied.
    let limits = Limits::none().tool_calls(1);
    let plain = swallower::graph().app().runner(&()).limits(limits).run(Tally::default()).await.unwrap();
    assert_eq!(plain.outcome, exhausted(Budget::ToolCalls));
    assert!(plain.state.notes.is_empty(), "{:?}", plain.state.notes);

    let app = swallower::graph().app().store(in_memory());
    let stored = app.runner(&()).thread("swallow").limits(limits).run(Tally::default()).await.unwrap();
    assert_eq!(stored.outcome, exhausted(Budget::ToolCalls));
    assert_eq!(app.thread("swallow").unwrap().unwrap().status, agentflow::persist::ThreadStatus::BudgetExhausted);
}
