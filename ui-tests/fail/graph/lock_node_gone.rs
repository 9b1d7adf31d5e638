// Version 1 had a node `review` (lock: graphs/node_gone/v1.lock) where threads may be waiting;
// version 2 drops it and says nothing of where they go.
use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Ticket {
    text: String,
    answer: Option<String>,
}

#[graph(state = Ticket, start = triage, max_steps = 10, id = "node_gone", version = 2)]
mod support {
    use super::*;

    #[node(goto = [answer, END])]
    async fn triage(t: &Ticket) -> Step<Ticket> {
        if t.text.is_empty() { goto!(END) } else { goto!(answer) }
    }

    #[node(goto = [END])]
    async fn answer(_t: &Ticket) -> Step<Ticket> {
        goto!(END)
    }
}

fn main() {
    let _ = support::graph();
}
