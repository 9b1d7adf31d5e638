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
#[tool]
async fn add(args: Pair) -> Result<f64, ToolError> {
    Ok(args.a + args.b)
}

#[graph(state = Calc, start = one)]
mod calculator {
    use super::*;

    #[node(goto = [two], tools = [add])]
    async fn one(_s: &Calc) -> Step<Calc> {
        goto!(two)
    }

    #[node(goto = [three], tools = [add])]
    async fn two(_s: &Calc) -> Step<Calc> {
        goto!(three)
    }

    #[node(goto = [four], tools = [add])]
    async fn three(_s: &Calc) -> Step<Calc> {
        goto!(four)
    }

    #[node(goto = [five], tools = [add])]
    async fn four(_s: &Calc) -> Step<Calc> {
        goto!(five)
    }

    #[node(goto = [END], tools = [add])]
    async fn five(_s: &Calc) -> Step<Calc> {
        goto!(END)
    }
}

fn main() {
    let _ = calculator::graph();
}
