use std::time::Duration;

use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Call {
    done: bool,
}

#[graph(state = Call, start = call)]
mod caller {
    use super::*;

    #[node(goto = [END], timeout = 500ms)]
    async fn call(_c: &Call) -> Step<Call> {
        goto!(END, Call::update().done(true))
    }
}

fn main() {
    let graph = caller::graph();
    assert_eq!(graph.nodes()[0].timeout, Some(Duration::from_millis(500)));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let run = rt.block_on(graph.run(Call::default(), &())).unwrap();
    assert!(run.outcome.is_completed(), "{}", run.outcome);
    assert!(run.state.done);
}
