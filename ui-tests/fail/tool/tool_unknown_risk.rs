use agentflow::prelude::*;
use serde::Deserialize;

#[derive(Deserialize, schemars::JsonSchema)]
struct Refund {
    order: String,
    cents: u64,
}

/// Refunds an order.
#[tool(risk = irreversable)]
async fn refund(args: Refund) -> Result<String, ToolError> {
    Ok(format!("refunded {} cents on {}", args.cents, args.order))
}

fn main() {
    let _ = refund;
}
