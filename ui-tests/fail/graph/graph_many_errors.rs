use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Ticket {
    text: String,
    answer: Option<String>,
}

#[graph(state = Ticket, start = classify)]
mod support {
    use super::*;

    #[node(goto = [anser, review])]
    async fn classify(t: &Ticket) -> Step<Ticket> {
        if t.text.is_empty() { goto!(review) } else { goto!(escalate) }
    }

    #[node(goto = [END], writes = [answer])]
    async fn answer(_t: &Ticket) -> Step<Ticket> {
        goto!(END, Ticket::update().answer(None).text(String::new()))
    }

    #[node(goto = [draft])]
    async fn review(_t: &Ticket) -> Step<Ticket> {
        goto!(draft)
    }

    #[node(goto = [review])]
    async fn draft(_t: &Ticket) -> Step<Ticket> {
        goto!(review)
    }
}

fn main() {
    let _ = support::graph();
}
