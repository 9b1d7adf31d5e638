use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Research {
    question: String,
    hits: u32,
}

#[graph(state = Research, start = split)]
mod research {
    use super::*;

    #[node(goto = [web, papers])]
    async fn split(_r: &Research) -> Step<Research> {
        goto!([web, papers])
    }

    #[node(goto = [END], writes = [hits])]
    async fn web(_r: &Research) -> Step<Research> {
        goto!(END, Research::update().hits(1))
    }

    #[node(goto = [END], writes = [hits])]
    async fn papers(_r: &Research) -> Step<Research> {
        goto!(END, Research::update().hits(2))
    }
}

fn main() {
    let _ = research::graph();
}
