use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
pub struct Notes {
    text: String,
}

#[graph(state = Notes, start = search)]
pub mod research {
    use super::*;

    #[node(goto = [END])]
    async fn search(s: &Notes) -> Step<Notes> {
        goto!(END, Notes::update().text(format!("notes: {}", s.text)))
    }
}

#[graph(state = Notes, start = delegate)]
pub mod supervisor {
    use super::*;

    #[node(goto = [END], subgraphs = [research])]
    async fn delegate(s: &Notes, cx: &Ctx<()>) -> Result<Step<Notes>, NodeError> {
        let child = research::graph();
        let found = cx.subgraph(child, s.clone()).await?;
        Ok(goto!(END, Notes::update().text(found.text)))
    }
}

fn main() {
    let _ = supervisor::graph();
}
