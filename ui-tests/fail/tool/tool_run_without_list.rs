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

    #[node(goto = [END])]
    async fn compute(_s: &Calc, cx: &Ctx<()>) -> Result<Step<Calc>, NodeError> {
        let obs = cx.run_tool(add, Pair { a: 1.0, b: 2.0 }).await?;
        Ok(goto!(END, Calc::update().result(obs.result().and_then(|v| v.as_f64()))))
    }
}

fn main() {
    let _ = calculator::graph();
}
