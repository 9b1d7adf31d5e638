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

/// Multiplies two numbers.
#[tool(risk = read)]
async fn multiply(args: Pair) -> Result<f64, ToolError> {
    Ok(args.a * args.b)
}

/// Divides `a` by `b`.
#[tool(risk = read)]
async fn divide(args: Pair) -> Result<f64, ToolError> {
    Ok(args.a / args.b)
}

#[graph(state = Calc, start = llm_call)]
mod calculator {
    use super::*;

    #[node(goto = [END], tools = [add, multiply])]
    async fn llm_call(_s: &Calc, cx: &Ctx<()>) -> Result<Step<Calc>, NodeError> {
        let obs = cx.run_tool(divide, Pair { a: 10.0, b: 2.0 }).await?;
        let result = obs.result().and_then(|v| v.as_f64());
        Ok(goto!(END, Calc::update().result(result)))
    }
}

fn main() {
    let _ = calculator::graph();
}
