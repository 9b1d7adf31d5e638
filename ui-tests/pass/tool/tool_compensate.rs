// A reversible (or external) tool names the tool that undoes it; the
// compensation's arguments are built from the forward call's arguments and
// result, and a node lists only the forward tool.
use agentflow::prelude::*;
use agentflow::saga::Compensates;
use agentflow::tool::Tool;
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

/// Charges a card; a refund undoes it.
#[tool(risk = external, idempotent, compensate = cancel_order)]
async fn charge(args: OrderRef, cx: &ToolCx) -> Result<u64, ToolError> {
    let _ = cx.idempotency_key();
    Ok(args.id)
}

/// Cancels an order.
#[tool(risk = reversible, idempotent)]
async fn cancel_order(args: OrderRef) -> Result<(), ToolError> {
    let _ = args.id;
    Ok(())
}

impl Compensates<create_order> for OrderRef {
    fn from_call(_args: NewOrder, order: Order) -> Self {
        OrderRef { id: order.id }
    }
}

impl Compensates<charge> for OrderRef {
    fn from_call(args: OrderRef, _charged: u64) -> Self {
        args
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct S {
    n: u64,
}

#[graph(state = S, start = order)]
mod shop {
    use super::*;

    #[node(goto = [END], tools = [create_order, charge])]
    async fn order(_s: &S, cx: &Ctx<()>) -> Result<Step<S>, NodeError> {
        cx.run_tool(create_order, serde_json::json!({ "item": "lamp" })).await?;
        Err(cx.compensate("out of stock"))
    }
}

fn main() {
    let _ = shop::graph();
    let comp = create_order.compensation().unwrap();
    assert_eq!(comp.tool().name(), "cancel_order");
}
