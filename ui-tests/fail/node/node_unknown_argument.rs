use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Ticket {
    text: String,
}

#[graph(state = Ticket, start = classify)]
mod support {
    use super::*;

    #[node(goto = [END], retries = 3)]
    async fn classify(_t: &Ticket) -> Step<Ticket> {
        goto!(END)
    }
}

fn main() {
    let _ = support::graph();
}
