use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
pub struct Task {
    text: String,
}

// `ping` runs `pong` and `pong` runs `ping`: each would contain the other.
#[graph(state = Task, start = a)]
pub mod ping {
    use super::*;

    #[node(goto = [END], subgraphs = [pong])]
    async fn a(s: &Task, cx: &Ctx<()>) -> Result<Step<Task>, NodeError> {
        let out = cx.subgraph(pong::graph(), s.clone()).await?;
        Ok(goto!(END, Task::update().text(out.text)))
    }
}

#[graph(state = Task, start = b)]
pub mod pong {
    use super::*;

    #[node(goto = [END], subgraphs = [ping])]
    async fn b(s: &Task, cx: &Ctx<()>) -> Result<Step<Task>, NodeError> {
        let out = cx.subgraph(ping::graph(), s.clone()).await?;
        Ok(goto!(END, Task::update().text(out.text)))
    }
}

fn main() {
    let _ = ping::graph();
}
