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
