use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Research {
    question: String,
    sources: Vec<String>,
}

#[graph(state = Research, start = split)]
mod research {
    use super::*;

    #[node(goto = [web, papers])]
    async fn split(_r: &Research) -> Step<Research> {
        goto!([web, papers])
    }

    #[node(goto = [END], writes = [sources])]
    async fn web(_r: &Research) -> Step<Research> {
        goto!(END, Research::update().sources(vec!["web".into()]))
    }

    #[node(goto = [END], writes = [sources])]
    async fn papers(_r: &Research) -> Step<Research> {
        goto!(END, Research::update().sources(vec!["papers".into()]))
    }
}

fn main() {
    let _ = research::graph();
}
