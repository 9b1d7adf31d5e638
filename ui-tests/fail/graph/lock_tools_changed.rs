// Version 1 is locked with `answer` listing `lookup`; it now lists `search` too, at the same
// version (lock: graphs/tools_changed/v1.lock).
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

#[graph(state = Ticket, start = triage, max_steps = 10, id = "tools_changed", version = 1)]
mod support {
    use super::*;

    #[node(goto = [answer, END])]
    async fn triage(t: &Ticket) -> Step<Ticket> {
        if t.text.is_empty() { goto!(END) } else { goto!(answer) }
    }

    #[node(goto = [END], tools = [lookup, search])]
    async fn answer(_t: &Ticket) -> Step<Ticket> {
        goto!(END)
    }
}

fn main() {
    let _ = support::graph();
}
