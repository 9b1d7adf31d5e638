// Threads of version 1 waiting in `review` (lock: graphs/unknown_node/v1.lock) are sent to a
// node version 2 does not have: a typo of `human_review`.
use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Ticket {
    text: String,
    answer: Option<String>,
}

#[graph(state = Ticket, start = triage, max_steps = 10,
        id = "unknown_node", version = 2, migrate(from = 1, nodes(review -> human_reveiw)))]
mod support {
    use super::*;

    #[node(goto = [human_review, END])]
    async fn triage(t: &Ticket) -> Step<Ticket> {
        if t.text.is_empty() { goto!(END) } else { goto!(human_review) }
    }

    #[node(goto = [END])]
    async fn human_review(_t: &Ticket) -> Step<Ticket> {
        goto!(END)
    }
}

fn main() {
    let _ = support::graph();
}
