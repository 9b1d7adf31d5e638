use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Research {
    question: String,
    summary: String,
}

#[graph(state = Research, start = split)]
mod research {
    use super::*;

    #[node(goto = [web, papers])]
    async fn split(_r: &Research) -> Step<Research> {
        goto!([web, papers])
    }

    #[node(goto = [END], writes = [summary])]
    async fn web(_r: &Research) -> Step<Research> {
        goto!(END, Research::update().summary("web".into()))
    }

    #[node(goto = [END], writes = [summary])]
    async fn papers(_r: &Research) -> Step<Research> {
        goto!(END, Research::update().summary("papers".into()))
    }
}

fn main() {
    let _ = research::graph();
}
