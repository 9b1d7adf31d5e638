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

    #[node(goto = [END], subgraphs = [searcher])]
    async fn research(s: &Task, cx: &Ctx<()>) -> Result<Step<Task>, NodeError> {
        let found = cx.subgraph(searcher::graph(), s.clone()).await?;
        Ok(goto!(END, Task::update().text(found.text)))
    }
}

// supervisor -> researcher -> searcher -> fetcher: 4 levels, over the default 3.
#[graph(state = Task, start = delegate)]
pub mod supervisor {
    use super::*;

    #[node(goto = [END], subgraphs = [researcher])]
    async fn delegate(s: &Task, cx: &Ctx<()>) -> Result<Step<Task>, NodeError> {
        let report = cx.subgraph(researcher::graph(), s.clone()).await?;
        Ok(goto!(END, Task::update().text(report.text)))
    }
}

fn main() {
    let _ = supervisor::graph();
}
