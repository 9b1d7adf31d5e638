//! Tools shared by the integration tests: arithmetic over `f64`, counting
//! how often `add` and `divide` ran on the current thread.
// Each area binary includes this module and uses a part of it.
#![allow(dead_code)]

use std::cell::Cell;

use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

thread_local! {
    // Tests run on their own thread with a current-thread runtime, so the
    // tools they run count on that thread only.
    static ADD_RUNS: Cell<u32> = const { Cell::new(0) };
    static DIVIDE_RUNS: Cell<u32> = const { Cell::new(0) };
}

/// How often `add` ran on this thread.
pub fn add_runs() -> u32 {
    ADD_RUNS.with(Cell::get)
}

/// How often `divide` ran on this thread.
pub fn divide_runs() -> u32 {
    DIVIDE_RUNS.with(Cell::get)
}

/// Two operands; unknown fields are refused.
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Pair {
    pub a: f64,
    pub b: f64,
}

/// Refuses a non-finite result (an overflow) as a correctable tool error.
fn finite(value: f64) -> Result<f64, ToolError> {
    if value.is_finite() {
        Ok(value)
    } else {
        Err(ToolError::Correctable(format!("the result ({value}) is not a finite number")))
    }
}

/// Adds two numbers.
#[tool(risk = read)]
pub async fn add(args: Pair) -> Result<f64, ToolError> {
    ADD_RUNS.with(|n| n.set(n.get() + 1));
    finite(args.a + args.b)
}

/// Multiplies two numbers.
#[tool(risk = read)]
pub async fn multiply(args: Pair) -> Result<f64, ToolError> {
    finite(args.a * args.b)
}

/// Divides `a` by `b`; `b` must not be zero.
#[tool(risk = read)]
pub async fn divide(args: Pair) -> Result<f64, ToolError> {
    DIVIDE_RUNS.with(|n| n.set(n.get() + 1));
    if args.b == 0.0 {
        return Err(ToolError::Correctable("division by zero: `b` must not be 0".into()));
    }
    finite(args.a / args.b)
}
