use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Doc {
    #[reduce(append)]
    stages: Vec<String>,
}

#[graph(state = Doc, start = parse)]
mod pipeline {
    use super::*;

    #[node(goto = [check])]
    async fn parse(_d: &Doc) -> Step<Doc> {
        goto!(check, Doc::update().stages(vec!["parse".into()]))
    }

    #[node(goto = [render, END])]
    async fn check(d: &Doc) -> Step<Doc> {
        if d.stages.is_empty() { goto!(END) } else { goto!(render, Doc::update().stages(vec!["check".into()])) }
    }

    #[node(goto = [END])]
    async fn render(_d: &Doc) -> Step<Doc> {
        goto!(END, Doc::update().stages(vec!["render".into()]))
    }
}

fn main() {
    let graph = pipeline::graph();
    // Without `max_steps`, an acyclic graph is bounded by its node count.
    assert_eq!(graph.max_steps(), 3);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let run = rt.block_on(graph.run(Doc::default(), &())).unwrap();
    assert!(run.outcome.is_completed(), "{}", run.outcome);
    assert_eq!(run.state.stages, ["parse", "check", "render"]);
}
