use std::sync::atomic::{AtomicU32, Ordering};

use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Fetch {
    attempts: u32,
}

struct Flaky {
    failures_left: AtomicU32,
}

#[graph(state = Fetch, deps = Flaky, start = fetch)]
mod fetcher {
    use super::*;

    #[node(goto = [END], retry = 3)]
    async fn fetch(_f: &Fetch, cx: &Ctx<Flaky>) -> Result<Step<Fetch>, NodeError> {
        let left = &cx.deps().failures_left;
        if left.load(Ordering::SeqCst) > 0 {
            left.fetch_sub(1, Ordering::SeqCst);
            return Err(NodeError::transient("try again"));
        }
        Ok(goto!(END, Fetch::update().attempts(cx.attempt())))
    }
}

fn main() {
    let graph = fetcher::graph();
    assert_eq!(graph.nodes()[0].retry.max_attempts, 3);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let flaky = Flaky { failures_left: AtomicU32::new(2) };
    let run = rt.block_on(graph.run(Fetch::default(), &flaky)).unwrap();
    assert!(run.outcome.is_completed(), "{}", run.outcome);
    assert_eq!(run.state.attempts, 3);
}
