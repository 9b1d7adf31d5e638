use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Ticket {
    text: String,
}

struct Services {
    greeting: String,
}

#[graph(state = Ticket, deps = Services, start = classify)]
mod support {
    use super::*;

    #[node(goto = [END])]
    async fn classify(_t: &Ticket, _s: &String) -> Step<Ticket> {
        goto!(END)
    }
}

fn main() {
    let _ = support::graph();
    let _ = Services { greeting: String::new() }.greeting;
}
