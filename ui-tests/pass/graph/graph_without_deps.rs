use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Counter {
    #[reduce(add)]
    count: u32,
}

#[graph(state = Counter, start = bump)]
mod counter {
    use super::*;

    #[node(goto = [END])]
    async fn bump(_c: &Counter, cx: &Ctx<()>) -> Step<Counter> {
        goto!(END, Counter::update().count(cx.attempt()))
    }
}

fn main() {
    let graph: CompiledGraph<Counter> = counter::graph();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let run = rt.block_on(graph.run(Counter { count: 41 }, &())).unwrap();
    assert!(run.outcome.is_completed(), "{}", run.outcome);
    assert_eq!(run.state.count, 42);
}
