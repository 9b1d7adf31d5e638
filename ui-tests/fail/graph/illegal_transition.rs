use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Ticket {
    text: String,
}

#[graph(state = Ticket, start = classify)]
mod support {
    use super::*;

    #[node(goto = [answer, escalate])]
    async fn classify(t: &Ticket) -> Step<Ticket> {
        if t.text.is_empty() {
            goto!(answer)
        } else if t.text.len() > 100 {
            goto!(escalate)
        } else {
            goto!(send)
        }
    }

    #[node(goto = [END])]
    async fn answer(_t: &Ticket) -> Step<Ticket> {
        goto!(END)
    }

    #[node(goto = [END])]
    async fn escalate(_t: &Ticket) -> Step<Ticket> {
        goto!(END)
    }

    #[node(goto = [END])]
    async fn send(_t: &Ticket) -> Step<Ticket> {
        goto!(END)
    }
}

fn main() {
    let _ = support::graph();
}
