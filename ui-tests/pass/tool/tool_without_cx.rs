// A tool taking only its argument struct, called directly from a node that lists it.
use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Calc {
    result: Option<f64>,
}

#[derive(Deserialize, Serialize, schemars::JsonSchema)]
struct Pair {
    a: f64,
    b: f64,
}

/// Adds two numbers.
#[tool(risk = read)]
async fn add(args: Pair) -> Result<f64, ToolError> {
    Ok(args.a + args.b)
}

#[graph(state = Calc, start = compute)]
mod calculator {
    use super::*;

    #[node(goto = [END], tools = [add])]
    async fn compute(_s: &Calc, cx: &Ctx<()>) -> Result<Step<Calc>, NodeError> {
        let obs = cx.run_tool(add, Pair { a: 3.0, b: 4.0 }).await?;
        Ok(goto!(END, Calc::update().result(obs.result().and_then(|v| v.as_f64()))))
    }
}

fn main() {
    use agentflow::tool::{Risk, Tool};
    assert_eq!(add.name(), "add");
    assert_eq!(add.description(), "Adds two numbers.");
    assert_eq!(add.risk(), Risk::Read);
    assert_eq!(add.parameters()["properties"]["a"]["type"], "number");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let run = rt.block_on(calculator::graph().run(Calc::default(), &())).unwrap();
    assert!(run.outcome.is_completed(), "{}", run.outcome);
    assert_eq!(run.state.result, Some(7.0));
    assert_eq!(run.usage.tool_calls, 1);
}
