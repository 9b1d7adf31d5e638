// A tool that honours its idempotency key says so; every other tool is not.
use agentflow::prelude::*;
use agentflow::tool::{Risk, Tool};
use serde::Deserialize;

#[derive(Deserialize, schemars::JsonSchema)]
struct Ticket {
    title: String,
}

/// Opens a ticket; the tracker drops a second request with the same key.
#[tool(risk = external, idempotent)]
async fn open_ticket(args: Ticket, cx: &ToolCx) -> Result<String, ToolError> {
    Ok(format!("{}:{}", cx.idempotency_key(), args.title))
}

/// Posts a comment; a second request posts a second comment.
#[tool(risk = external)]
async fn comment(args: Ticket) -> Result<String, ToolError> {
    Ok(args.title)
}

fn main() {
    assert!(open_ticket.idempotent());
    assert_eq!(open_ticket.risk(), Risk::External);
    assert!(!comment.idempotent());
}
