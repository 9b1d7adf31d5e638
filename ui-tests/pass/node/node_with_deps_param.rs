use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Ticket {
    text: String,
    billing: bool,
}

struct Services {
    billing_words: Vec<&'static str>,
}

#[graph(state = Ticket, deps = Services, start = classify)]
mod support {
    use super::*;

    #[node(goto = [END])]
    async fn classify(t: &Ticket, deps: &Services) -> Step<Ticket> {
        let billing = deps.billing_words.iter().any(|w| t.text.contains(w));
        goto!(END, Ticket::update().billing(billing))
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let services = Services { billing_words: vec!["refund"] };
    let input = Ticket { text: "I want a refund".into(), ..Ticket::default() };
    let run = rt.block_on(support::graph().run(input, &services)).unwrap();
    assert!(run.outcome.is_completed(), "{}", run.outcome);
    assert!(run.state.billing);
}
