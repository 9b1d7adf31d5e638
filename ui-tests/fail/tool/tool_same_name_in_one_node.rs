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

mod exact {
    use super::*;

    /// Adds two numbers.
    #[tool(risk = read)]
    pub async fn add(args: Pair) -> Result<f64, ToolError> {
        Ok(args.a + args.b)
    }
}

mod rounded {
    use super::*;

    /// Adds two numbers, rounded.
    #[tool(risk = read)]
    pub async fn add(args: Pair) -> Result<f64, ToolError> {
        Ok((args.a + args.b).round())
    }
}

#[graph(state = Calc, start = llm_call)]
mod calculator {
    use super::*;

    #[node(goto = [END], tools = [exact::add, rounded::add])]
    async fn llm_call(_s: &Calc, _cx: &Ctx<()>) -> Step<Calc> {
        goto!(END)
    }
}

fn main() {
    let _ = calculator::graph();
}
