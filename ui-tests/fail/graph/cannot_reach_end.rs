use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Ticket {
    text: String,
}

#[graph(state = Ticket, start = classify)]
mod support {
    use super::*;

    #[node(goto = [answer, archive])]
    async fn classify(t: &Ticket) -> Step<Ticket> {
        if t.text.is_empty() { goto!(answer) } else { goto!(archive) }
    }

    #[node(goto = [END])]
    async fn answer(_t: &Ticket) -> Step<Ticket> {
        goto!(END)
    }

    #[node(goto = [shred])]
    async fn archive(_t: &Ticket) -> Step<Ticket> {
        goto!(shred)
    }

    #[node(goto = [])]
    async fn shred(_t: &Ticket) -> Step<Ticket> {
        todo!()
    }
}

fn main() {
    let _ = support::graph();
}
