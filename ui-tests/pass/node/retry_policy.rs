use std::time::Duration;

use agentflow::RetryPolicy;
use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Fetch {
    done: bool,
}

#[graph(state = Fetch, start = fetch)]
mod fetcher {
    use super::*;

    #[node(goto = [END], retry(attempts = 4, base = 10ms, max_delay = 1s, jitter = false))]
    async fn fetch(_f: &Fetch) -> Step<Fetch> {
        goto!(END, Fetch::update().done(true))
    }
}

fn main() {
    let graph = fetcher::graph();
    let expected =
        RetryPolicy::attempts(4).base(Duration::from_millis(10)).max_delay(Duration::from_secs(1)).jitter(false);
    assert_eq!(graph.nodes()[0].retry, expected);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let run = rt.block_on(graph.run(Fetch::default(), &())).unwrap();
    assert!(run.state.done);
}
