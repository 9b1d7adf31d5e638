// Version 1 is locked without `escalate`; the graph gains it at the same version
// (lock: graphs/node_added/v1.lock).
use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Ticket {
    text: String,
    answer: Option<String>,
}

#[graph(state = Ticket, start = triage, max_steps = 10, id = "node_added", version = 1)]
mod support {
    use super::*;

    #[node(goto = [answer, escalate, END])]
    async fn triage(t: &Ticket) -> Step<Ticket> {
        if t.text.is_empty() { goto!(END) } else { goto!(answer) }
    }

    #[node(goto = [END])]
    async fn answer(_t: &Ticket) -> Step<Ticket> {
        goto!(END)
    }

    #[node(goto = [END])]
    async fn escalate(_t: &Ticket) -> Step<Ticket> {
        goto!(END)
    }
}

fn main() {
    let _ = support::graph();
}
