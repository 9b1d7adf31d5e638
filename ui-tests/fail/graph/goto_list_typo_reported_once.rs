use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Ticket {
    text: String,
}

#[graph(state = Ticket, start = classify)]
mod support {
    use super::*;

    // The list has a typo; the body names the node correctly.
    #[node(goto = [retreive, END])]
    async fn classify(t: &Ticket) -> Step<Ticket> {
        if t.text.is_empty() { goto!(END) } else { goto!(retrieve) }
    }

    #[node(goto = [END])]
    async fn retrieve(_t: &Ticket) -> Step<Ticket> {
        goto!(END)
    }
}

fn main() {
    let _ = support::graph();
}
