use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Email {
    body: String,
    summary: Option<String>,
    draft: Option<String>,
    #[reduce(add)]
    edits: u32,
}

#[graph(state = Email, start = summarize)]
mod mail {
    use super::*;

    #[node(goto = [reply], writes = [summary])]
    async fn summarize(e: &Email) -> Step<Email> {
        goto!(reply, Email::update().summary(Some(e.body.chars().take(5).collect())))
    }

    #[node(goto = [END], writes = [draft, edits])]
    async fn reply(e: &Email) -> Step<Email> {
        let summary = e.summary.clone().unwrap_or_default();
        goto!(END, Email::update().draft(Some(format!("Re: {summary}"))).edits(1))
    }
}

fn main() {
    let graph = mail::graph();
    assert!(graph.nodes().iter().all(|n| n.writes.is_some()));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let input = Email { body: "Hello there".into(), ..Email::default() };
    let run = rt.block_on(graph.run(input, &())).unwrap();
    assert!(run.outcome.is_completed(), "{}", run.outcome);
    assert_eq!(run.state.draft.as_deref(), Some("Re: Hello"));
    assert_eq!(run.state.edits, 1);
}
