use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Deserialize, Serialize, schemars::JsonSchema)]
struct NewOrder {
    item: String,
}

#[derive(Deserialize, Serialize)]
struct Order {
    id: u64,
}

#[derive(Deserialize, Serialize, schemars::JsonSchema)]
struct OrderRef {
    id: u64,
}

/// Creates an order.
#[tool(risk = reversible, compensate = cancel_order)]
async fn create_order(args: NewOrder) -> Result<Order, ToolError> {
    let _ = args.item;
    Ok(Order { id: 1 })
}

/// Cancels an order. Nothing says how to build an `OrderRef` from a
/// `create_order` call (`impl Compensates<create_order> for OrderRef`).
#[tool(risk = reversible)]
async fn cancel_order(args: OrderRef) -> Result<(), ToolError> {
    let _ = args.id;
    Ok(())
}

fn main() {
    let _ = create_order;
}
