use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
pub struct Notes {
    text: String,
}

#[graph(state = Notes, start = draft)]
pub mod writer {
    use super::*;

    #[node(goto = [END])]
    async fn draft(s: &Notes) -> Step<Notes> {
        goto!(END, Notes::update().text(format!("draft: {}", s.text)))
    }
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
        let found = cx.subgraph(research::graph(), s.clone()).await?;
        let written = cx.subgraph(writer::graph(), found).await?;
        Ok(goto!(END, Notes::update().text(written.text)))
    }
}

fn main() {
    let _ = supervisor::graph();
}
