use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Ticket {
    spam: bool,
    answer: Option<String>,
}

#[graph(state = Ticket, start = triage)]
mod support {
    use super::*;

    #[node(goto = [answer, END])]
    async fn triage(t: &Ticket) -> Step<Ticket> {
        if t.spam {
            // Ends this branch, with no update.
            goto!(END)
        } else {
            goto!(answer)
        }
    }

    #[node(goto = [END])]
    async fn answer(_t: &Ticket) -> Step<Ticket> {
        goto!(END, Ticket::update().answer(Some("done".into())))
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let graph = support::graph();
    let spam = rt.block_on(graph.run(Ticket { spam: true, answer: None }, &())).unwrap();
    assert!(spam.outcome.is_completed(), "{}", spam.outcome);
    assert_eq!(spam.state.answer, None);
    let real = rt.block_on(graph.run(Ticket::default(), &())).unwrap();
    assert!(real.outcome.is_completed(), "{}", real.outcome);
    assert_eq!(real.state.answer.as_deref(), Some("done"));
}
