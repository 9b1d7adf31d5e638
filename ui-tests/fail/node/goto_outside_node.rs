use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Ticket {
    text: String,
}

fn route() -> Step<Ticket> {
    goto!(END)
}

fn main() {
    let _ = route;
}
