use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Ticket {
    text: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Email {
    body: String,
}

#[graph(state = Ticket, start = classify)]
mod support {
    use super::*;

    #[node(goto = [END])]
    async fn classify(_t: &Ticket) -> Step<Email> {
        goto!(END)
    }
}

fn main() {
    let _ = support::graph();
}
