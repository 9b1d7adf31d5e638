// Version 1's `answer` listed the external tool `send_email` (lock: graphs/approval_pending/v1.lock), so
// an approval of it may be pending; version 2 lists no such tool and declares no migration for it.
use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Ticket {
    text: String,
    answer: Option<String>,
}

#[derive(Deserialize, Serialize, schemars::JsonSchema)]
struct Query {
    query: String,
}

/// Looks a ticket up.
#[tool(risk = read)]
async fn lookup(args: Query) -> Result<String, ToolError> {
    Ok(args.query)
}

/// Searches the knowledge base.
#[tool(risk = read)]
async fn search(args: Query) -> Result<String, ToolError> {
    Ok(args.query)
}

#[graph(state = Ticket, start = triage, max_steps = 10, id = "approval_pending", version = 2)]
mod support {
    use super::*;

    #[node(goto = [answer, END])]
    async fn triage(t: &Ticket) -> Step<Ticket> {
        if t.text.is_empty() { goto!(END) } else { goto!(answer) }
    }

    #[node(goto = [END], tools = [lookup])]
    async fn answer(_t: &Ticket) -> Step<Ticket> {
        goto!(END)
    }
}

fn main() {
    let _ = support::graph();
}
