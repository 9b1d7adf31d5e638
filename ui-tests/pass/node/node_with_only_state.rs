use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Ticket {
    text: String,
    length: usize,
}

struct Services;

#[graph(state = Ticket, deps = Services, start = measure)]
mod support {
    use super::*;

    #[node(goto = [END])]
    async fn measure(t: &Ticket) -> Step<Ticket> {
        goto!(END, Ticket::update().length(t.text.len()))
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let input = Ticket { text: "four".into(), ..Ticket::default() };
    let run = rt.block_on(support::graph().run(input, &Services)).unwrap();
    assert!(run.outcome.is_completed(), "{}", run.outcome);
    assert_eq!(run.state.length, 4);
}
