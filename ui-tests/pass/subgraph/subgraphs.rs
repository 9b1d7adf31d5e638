// Subgraphs: a node lists the graphs it runs; a graph may delegate as deep
// as its `max_depth` (default 3), raised here to 4.
use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
pub struct Task {
    text: String,
}

#[graph(state = Task, start = fetch)]
pub mod fetcher {
    use super::*;

    #[node(goto = [END])]
    async fn fetch(s: &Task) -> Step<Task> {
        goto!(END, Task::update().text(s.text.clone()))
    }
}

#[graph(state = Task, start = search)]
pub mod searcher {
    use super::*;

    #[node(goto = [END], subgraphs = [fetcher])]
    async fn search(s: &Task, cx: &Ctx<()>) -> Result<Step<Task>, NodeError> {
        let page = cx.subgraph(fetcher::graph(), s.clone()).await?;
        Ok(goto!(END, Task::update().text(page.text)))
    }
}

#[graph(state = Task, start = research)]
pub mod researcher {
    use super::*;

    // Two children, run one after the other.
    #[node(goto = [END], subgraphs = [searcher, fetcher])]
    async fn research(s: &Task, cx: &Ctx<()>) -> Result<Step<Task>, NodeError> {
        let found = cx.subgraph(searcher::graph(), s.clone()).await?;
        let page = cx.subgraph(fetcher::graph(), found).await?;
        Ok(goto!(END, Task::update().text(page.text)))
    }
}

#[graph(state = Task, start = delegate, max_depth = 4)]
pub mod supervisor {
    use super::*;

    #[node(goto = [END], subgraphs = [researcher])]
    async fn delegate(s: &Task, cx: &Ctx<()>) -> Result<Step<Task>, NodeError> {
        let report = cx.subgraph(researcher::graph(), s.clone()).await?;
        Ok(goto!(END, Task::update().text(report.text)))
    }
}

const _: () = assert!(supervisor::DELEGATION_DEPTH == 4);
const _: () = assert!(researcher::DELEGATION_DEPTH == 3);

fn main() {
    let _ = supervisor::graph();
    assert_eq!(supervisor::graph().name(), "supervisor");
}
