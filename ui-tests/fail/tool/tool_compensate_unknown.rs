use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Deserialize, Serialize, schemars::JsonSchema)]
struct Order {
    id: u64,
}

/// Creates an order.
#[tool(risk = reversible, compensate = cancel_ordr)]
async fn create_order(args: Order) -> Result<Order, ToolError> {
    Ok(args)
}

/// Cancels an order.
#[tool(risk = reversible)]
async fn cancel_order(args: Order) -> Result<(), ToolError> {
    let _ = args.id;
    Ok(())
}

fn main() {
    let _ = create_order;
}
