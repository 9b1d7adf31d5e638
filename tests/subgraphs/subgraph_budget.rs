//! Budgets across a pause: a child's tool calls count against the parent's
//! budget (subgraph docs). When the parent's node pauses after its child
//! completed, the re-run of the node on resume gets the child's state back
//! without running it; the calls the child made must still count.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use agentflow::prelude::*;
use agentflow::{Budget, Limits, Outcome, RedbStore, Store};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[derive(Default)]
pub struct Counts {
    searches: AtomicU32,
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct Query {
    q: String,
}

/// Searches; read-only.
#[tool(risk = read)]
async fn search(args: Query, deps: &Counts) -> Result<Value, ToolError> {
    deps.searches.fetch_add(1, Ordering::SeqCst);
    Ok(json!({ "hits": [args.q] }))
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Many {
    n: u32,
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

    /// Runs the child, then asks a human before going on.
    #[node(goto = [more], subgraphs = [searcher], interrupt)]
    async fn delegate(s: &Many, cx: &Ctx<Counts>) -> Result<Step<Many>, NodeError> {
        let child = cx.subgraph(searcher::graph(), Many { n: s.n, found: 0 }).await?;
        let _go_on: bool = cx.interrupt(json!({ "found": child.found }))?;
        Ok(goto!(more, Many::update().found(child.found)))
    }

    /// Two more calls of its own.
    #[node(goto = [END], tools = [search])]
    async fn more(_s: &Many, cx: &Ctx<Counts>) -> Result<Step<Many>, NodeError> {
        cx.run_tool(search, json!({ "q": "a" })).await?;
        cx.run_tool(search, json!({ "q": "b" })).await?;
        Ok(goto!(END))
    }
}

#[tokio::test]
async fn a_completed_childs_calls_still_count_after_the_parent_pauses_and_resumes() {
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = boss::graph().app().store(store);
    let counts = Counts::default();
    let run = app.runner(&counts).thread("b").limits(Limits::none().tool_calls(3));
    let run = run.run(Many { n: 2, found: 0 }).await.unwrap();
    assert!(matches!(run.outcome, Outcome::Interrupted { .. }), "{}", run.outcome);
    assert_eq!(run.usage.tool_calls, 2, "the child's calls count");

    // 2 calls by the child + 2 by `more` > 3: the second call of `more` is over budget.
    let run = app.runner(&counts).thread("b").resume_with(true).await.unwrap();
    assert_eq!(run.outcome, Outcome::BudgetExhausted { which: Budget::ToolCalls }, "usage {:?}", run.usage);
    assert_eq!(counts.searches.load(Ordering::SeqCst), 3);
    assert_eq!(run.usage.tool_calls, 3);
}

// ---------------------------------------------------------------- a child's model calls

/// The model a child asks (a scripted test double).
pub struct Asker {
    model: agentflow::model::ScriptedModel,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Asked {
    #[reduce(append)]
    answers: Vec<String>,
}

#[graph(state = Asked, deps = Asker, start = ask)]
pub mod asking_child {
    use super::*;

    /// Asks the model twice.
    #[node(goto = [END])]
    async fn ask(_s: &Asked, cx: &Ctx<Asker>) -> Result<Step<Asked>, NodeError> {
        let mut answers = Vec::new();
        for q in ["first?", "second?"] {
            let request = agentflow::model::ChatRequest::new(vec![agentflow::message::Message::human(q)]);
            answers.push(cx.chat(&cx.deps().model, &request).await?.text);
        }
        Ok(goto!(END, Asked::update().answers(answers)))
    }
}

#[graph(state = Asked, deps = Asker, start = delegate)]
pub mod asking_parent {
    use super::*;

    #[node(goto = [END], subgraphs = [asking_child])]
    async fn delegate(_s: &Asked, cx: &Ctx<Asker>) -> Result<Step<Asked>, NodeError> {
        let child = cx.subgraph(asking_child::graph(), Asked::default()).await?;
        Ok(goto!(END, Asked::update().answers(child.answers)))
    }
}

/// README: "the child's model and tool calls count against the parent's budgets": a parent
/// allowed one model call ends out of budget when its child asks twice, and the model is
/// asked once.
#[tokio::test]
async fn a_childs_model_calls_count_against_the_parents_budget() {
    let model = agentflow::model::ScriptedModel::new().reply_text("one").reply_text("two");
    let deps = Asker { model };
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = asking_parent::graph().app().store(store);
    let run =
        app.runner(&deps).thread("asker").limits(Limits::none().model_calls(1)).run(Asked::default()).await.unwrap();
    assert_eq!(run.outcome, Outcome::BudgetExhausted { which: Budget::ModelCalls }, "{:?}", run.outcome);
    assert_eq!(deps.model.calls(), 1, "the model was asked past the parent's budget");
    assert_eq!(run.usage.model_calls, 1);
}
