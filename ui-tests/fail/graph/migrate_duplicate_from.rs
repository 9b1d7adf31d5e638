// Each older version is migrated from once: both renames belong in one `migrate(from = 1, ..)`.
use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Ticket {
    text: String,
    answer: Option<String>,
}

#[graph(state = Ticket, start = triage, max_steps = 10,
        id = "duplicate_from", version = 3,
        migrate(from = 1, nodes(review -> answer)),
        migrate(from = 1, nodes(legacy -> END)))]
mod support {
    use super::*;

    #[node(goto = [answer, END])]
    async fn triage(t: &Ticket) -> Step<Ticket> {
        if t.text.is_empty() { goto!(END) } else { goto!(answer) }
    }

    #[node(goto = [END])]
    async fn answer(_t: &Ticket) -> Step<Ticket> {
        goto!(END)
    }
}

fn main() {
    let _ = support::graph();
}
