use agentflow::prelude::*;
use serde::Deserialize;

// Deserialize, but no `schemars::JsonSchema`: the model would get no schema.
#[derive(Deserialize)]
struct Pair {
    a: f64,
    b: f64,
}

/// Adds two numbers.
#[tool(risk = read)]
async fn add(args: Pair) -> Result<f64, ToolError> {
    Ok(args.a + args.b)
}

fn main() {
    let _ = add;
}
