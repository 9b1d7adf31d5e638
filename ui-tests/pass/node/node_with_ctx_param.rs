use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Ticket {
    text: String,
    greeting: Option<String>,
}

struct Services {
    greeting: &'static str,
}

#[graph(state = Ticket, deps = Services, start = greet)]
mod support {
    use super::*;

    #[node(goto = [END])]
    async fn greet(t: &Ticket, cx: &Ctx<Services>) -> Step<Ticket> {
        let text = format!("{}, {} (from {})", cx.deps().greeting, t.text, cx.node());
        goto!(END, Ticket::update().greeting(Some(text)))
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let services = Services { greeting: "hello" };
    let input = Ticket { text: "ada".into(), ..Ticket::default() };
    let run = rt.block_on(support::graph().run(input, &services)).unwrap();
    assert!(run.outcome.is_completed(), "{}", run.outcome);
    assert_eq!(run.state.greeting.as_deref(), Some("hello, ada (from greet)"));
}
