//! Tools shared by the integration tests: arithmetic over `f64`.

use agentflow::prelude::*;
use serde::Deserialize;

/// Two operands.
#[derive(Deserialize, schemars::JsonSchema)]
pub struct Pair {
    a: f64,
    b: f64,
}

/// Adds two numbers.
#[tool(risk = read)]
pub async fn add(args: Pair) -> Result<f64, ToolError> {
    Ok(args.a + args.b)
}

/// Multiplies two numbers.
#[tool(risk = read)]
pub async fn multiply(args: Pair) -> Result<f64, ToolError> {
    Ok(args.a * args.b)
}

/// Divides `a` by `b`; `b` must not be zero.
#[tool(risk = read)]
pub async fn divide(args: Pair) -> Result<f64, ToolError> {
    if args.b == 0.0 {
        return Err(ToolError::Correctable("division by zero: `b` must not be 0".into()));
    }
    Ok(args.a / args.b)
}
