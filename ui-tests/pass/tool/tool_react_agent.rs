// `react_agent!` expands to a `#[graph]` module, so its tool list is checked like any node's.
use std::sync::Arc;

use agentflow::model::ScriptedModel;
use agentflow::prebuilt::react::{ReactDeps, ReactState};
use agentflow::prelude::*;
use serde::Deserialize;
use serde_json::json;

#[derive(Deserialize, schemars::JsonSchema)]
struct Pair {
    a: f64,
    b: f64,
}

/// Adds two numbers.
#[tool(risk = read)]
async fn add(args: Pair) -> Result<f64, ToolError> {
    Ok(args.a + args.b)
}

agentflow::react_agent!(mod calculator, tools = [add], max_steps = 8);

fn main() {
    let model = ScriptedModel::new().reply_tool_call("add", json!({"a": 3, "b": 4})).reply_text("3 + 4 = 7");
    let deps = ReactDeps::new(Arc::new(model));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let run = rt.block_on(calculator::graph().run(ReactState::ask("what is 3 + 4?"), &deps)).unwrap();
    assert!(run.outcome.is_completed(), "{}", run.outcome);
    assert_eq!(run.state.answer.as_deref(), Some("3 + 4 = 7"));
}
