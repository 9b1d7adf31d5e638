use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
pub struct Task {
    text: String,
}

pub struct Search {
    pub endpoint: String,
}

pub struct Desk;

#[graph(state = Task, deps = Search, start = search)]
pub mod research {
    use super::*;

    #[node(goto = [END])]
    async fn search(s: &Task, deps: &Search) -> Step<Task> {
        goto!(END, Task::update().text(format!("{} via {}", s.text, deps.endpoint)))
    }
}

#[graph(state = Task, deps = Desk, start = delegate)]
pub mod supervisor {
    use super::*;

    #[node(goto = [END], subgraphs = [research])]
    async fn delegate(s: &Task, cx: &Ctx<Desk>) -> Result<Step<Task>, NodeError> {
        let found = cx.subgraph(research::graph(), s.clone()).await?;
        Ok(goto!(END, Task::update().text(found.text)))
    }
}

fn main() {
    let _ = supervisor::graph();
}
