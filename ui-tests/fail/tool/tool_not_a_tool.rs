use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Calc {
    result: Option<f64>,
}

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

/// A plain function, not declared with `#[tool]`.
async fn x(args: Pair) -> Result<f64, ToolError> {
    Ok(args.a * args.b)
}

#[graph(state = Calc, start = llm_call)]
mod calculator {
    use super::*;

    #[node(goto = [END], tools = [add, x])]
    async fn llm_call(_s: &Calc, _cx: &Ctx<()>) -> Step<Calc> {
        goto!(END)
    }
}

fn main() {
    let _ = calculator::graph();
    let _ = x;
}
