// Version 2 sends threads of version 1 waiting in `review` and in `escalate` to one node: a
// thread waiting in both would have their kept writes and questions collide.
use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Ticket {
    text: String,
    answer: Option<String>,
}

#[graph(state = Ticket, start = triage, max_steps = 10,
        id = "merged_nodes", version = 2, migrate(from = 1, nodes(review -> desk, escalate -> desk)))]
mod support {
    use super::*;

    #[node(goto = [desk, END])]
    async fn triage(t: &Ticket) -> Step<Ticket> {
        if t.text.is_empty() { goto!(END) } else { goto!(desk) }
    }

    #[node(goto = [END])]
    async fn desk(_t: &Ticket) -> Step<Ticket> {
        goto!(END)
    }
}

fn main() {
    let _ = support::graph();
}
