use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Ticket {
    text: String,
    answer: Option<String>,
}

#[graph(state = Ticket, start = answer)]
mod support {
    use super::*;

    #[node(goto = [END])]
    async fn answer(t: &Ticket) -> Step<Ticket> {
        let step: Step<Ticket> = goto!(END, Ticket::update().answer(Some(t.text.to_uppercase())));
        step
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let input = Ticket { text: "ok".into(), ..Ticket::default() };
    let run = rt.block_on(support::graph().run(input, &())).unwrap();
    assert!(run.outcome.is_completed(), "{}", run.outcome);
    assert_eq!(run.state.answer.as_deref(), Some("OK"));
}
