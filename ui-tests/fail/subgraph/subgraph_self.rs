use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
pub struct Task {
    depth: u32,
}

#[graph(state = Task, start = split)]
pub mod planner {
    use super::*;

    #[node(goto = [END], subgraphs = [planner])]
    async fn split(s: &Task, cx: &Ctx<()>) -> Result<Step<Task>, NodeError> {
        let deeper = cx.subgraph(planner::graph(), Task { depth: s.depth + 1 }).await?;
        Ok(goto!(END, Task::update().depth(deeper.depth)))
    }
}

fn main() {
    let _ = planner::graph();
}
