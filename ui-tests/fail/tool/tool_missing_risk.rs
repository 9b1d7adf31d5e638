use agentflow::prelude::*;
use serde::Deserialize;

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

fn main() {
    let _ = add;
}
