use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Ticket {
    text: String,
}

#[node(goto = [END])]
async fn classify(_t: &Ticket) -> Step<Ticket> {
    goto!(END)
}

fn main() {
    let _ = classify;
}
