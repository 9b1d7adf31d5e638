// Every risk class a tool may declare, and a node offering several tools to a model.
use agentflow::prelude::*;
use agentflow::tool::{Risk, Tool};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Desk {
    offered: Vec<String>,
}

#[derive(Deserialize, schemars::JsonSchema)]
struct Order {
    id: String,
}

/// Looks an order up.
#[tool(risk = read)]
async fn lookup(args: Order) -> Result<String, ToolError> {
    Ok(args.id)
}

/// Drafts a reply (a draft can be discarded).
#[tool(risk = reversible)]
async fn draft(args: Order) -> Result<String, ToolError> {
    Ok(args.id)
}

/// Emails the customer.
#[tool(risk = external)]
async fn email(args: Order) -> Result<String, ToolError> {
    Ok(args.id)
}

/// Refunds the order; money cannot be taken back.
#[tool(risk = irreversible)]
async fn refund(args: Order) -> Result<String, ToolError> {
    Ok(args.id)
}

#[graph(state = Desk, start = agent)]
mod desk {
    use super::*;

    #[node(goto = [END], tools = [lookup, draft, email, refund])]
    async fn agent(_s: &Desk, cx: &Ctx<()>) -> Step<Desk> {
        let offered = cx.tool_specs().into_iter().map(|t| t.name).collect();
        goto!(END, Desk::update().offered(offered))
    }
}

fn main() {
    assert_eq!(
        [lookup.risk(), draft.risk(), email.risk(), refund.risk()],
        [Risk::Read, Risk::Reversible, Risk::External, Risk::Irreversible]
    );
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let run = rt.block_on(desk::graph().run(Desk::default(), &())).unwrap();
    assert!(run.outcome.is_completed(), "{}", run.outcome);
    assert_eq!(run.state.offered, ["lookup", "draft", "email", "refund"]);
}
