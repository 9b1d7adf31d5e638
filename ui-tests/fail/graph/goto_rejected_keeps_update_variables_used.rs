use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Ticket {
    text: String,
    reply: Option<String>,
}

#[graph(state = Ticket, start = classify)]
mod support {
    use super::*;

    #[node(goto = [answer])]
    async fn classify(t: &Ticket) -> Step<Ticket> {
        let reply = format!("re: {}", t.text);
        goto!(send, Ticket::update().reply(Some(reply)))
    }

    #[node(goto = [END])]
    async fn answer(_t: &Ticket) -> Step<Ticket> {
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
