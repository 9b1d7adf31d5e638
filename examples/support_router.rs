//! A support ticket router: a branch, a fan-out/join and a bounded retry loop.
//!
//! Deterministic, no model: `cargo run --example support_router`.

use agentflow::prelude::*;
use agentflow::{Event, RetryPolicy};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
pub struct Ticket {
    text: String,
    intent: Option<String>,
    #[reduce(append)]
    evidence: Vec<String>,
    draft: Option<String>,
    #[reduce(add)]
    revisions: u32,
    approved: bool,
}

/// What the nodes may use: here only a word list standing in for a classifier.
pub struct Services {
    pub billing_words: Vec<&'static str>,
}

#[graph(state = Ticket, deps = Services, start = classify, max_steps = 12)]
pub mod support {
    use super::*;

    #[node(goto = [lookup_docs, escalate])]
    async fn classify(t: &Ticket, deps: &Services) -> Step<Ticket> {
        let billing = deps.billing_words.iter().any(|w| t.text.contains(w));
        if billing {
            goto!(escalate, Ticket::update().intent(Some("billing".into())))
        } else {
            goto!(lookup_docs, Ticket::update().intent(Some("question".into())))
        }
    }

    #[node(goto = [END])]
    async fn escalate(_t: &Ticket) -> Step<Ticket> {
        goto!(END, Ticket::update().draft(Some("Forwarded to a human agent.".into())))
    }

    #[node(goto = [search_faq, search_forum])]
    async fn lookup_docs(_t: &Ticket) -> Step<Ticket> {
        goto!([search_faq, search_forum])
    }

    #[node(goto = [draft], writes = [evidence])]
    async fn search_faq(t: &Ticket) -> Step<Ticket> {
        goto!(draft, Ticket::update().evidence(vec![format!("faq: reset steps for '{}'", t.text)]))
    }

    #[node(goto = [draft], writes = [evidence])]
    async fn search_forum(_t: &Ticket) -> Step<Ticket> {
        goto!(draft, Ticket::update().evidence(vec!["forum: 12 similar threads".to_string()]))
    }

    #[node(goto = [review], retry = 2)]
    async fn draft(t: &Ticket) -> Step<Ticket> {
        let text = format!("Draft v{} based on {} sources", t.revisions + 1, t.evidence.len());
        goto!(review, Ticket::update().draft(Some(text)).revisions(1))
    }

    #[node(goto = [draft, END])]
    async fn review(t: &Ticket) -> Step<Ticket> {
        if t.revisions < 2 { goto!(draft) } else { goto!(END, Ticket::update().approved(true)) }
    }
}

/// The word list the example classifies with.
pub fn services() -> Services {
    Services { billing_words: vec!["refund", "invoice"] }
}

/// The example's ticket.
pub fn input() -> Ticket {
    Ticket { text: "cannot log in".into(), ..Ticket::default() }
}

#[tokio::main]
async fn main() {
    let graph = support::graph();
    println!("{}", graph.mermaid());
    let services = services();
    let input = input();
    let run = graph
        .app()
        .runner(&services)
        .on_event(|e: Event<Ticket>| println!("  {e}"))
        .run(input)
        .await
        .expect("valid run configuration");
    let _ = RetryPolicy::none();
    println!("outcome: {}", run.outcome);
    println!("state: {:?}", run.state);
}
