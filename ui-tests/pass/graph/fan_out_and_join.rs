use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Research {
    question: String,
    #[reduce(append)]
    sources: Vec<String>,
    summary: Option<String>,
    #[reduce(add)]
    joins: u32,
}

#[graph(state = Research, start = split)]
mod research {
    use super::*;

    #[node(goto = [web, papers])]
    async fn split(r: &Research) -> Step<Research> {
        goto!([web, papers], Research::update().sources(vec![format!("q: {}", r.question)]))
    }

    #[node(goto = [join], writes = [sources])]
    async fn web(_r: &Research) -> Step<Research> {
        goto!(join, Research::update().sources(vec!["web".to_string()]))
    }

    #[node(goto = [join], writes = [sources])]
    async fn papers(_r: &Research) -> Step<Research> {
        goto!(join, Research::update().sources(vec!["papers".to_string()]))
    }

    #[node(goto = [END])]
    async fn join(r: &Research) -> Step<Research> {
        goto!(END, Research::update().summary(Some(r.sources.join(", "))).joins(1))
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let input = Research { question: "why".into(), ..Research::default() };
    let run = rt.block_on(research::graph().run(input, &())).unwrap();
    assert!(run.outcome.is_completed(), "{}", run.outcome);
    // Both branches ran in one step; the join ran once, after both.
    assert_eq!(run.state.sources, ["q: why", "web", "papers"]);
    assert_eq!(run.state.summary.as_deref(), Some("q: why, web, papers"));
    assert_eq!(run.state.joins, 1);
    assert_eq!(run.steps, 3);
}
