use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Trail {
    #[reduce(append)]
    visited: Vec<String>,
}

#[graph(state = Trail, start = first)]
mod trail {
    use super::*;

    #[node(goto = [second])]
    async fn first(_t: &Trail) -> Step<Trail> {
        goto!(second)
    }

    #[node(goto = [END])]
    async fn second(_t: &Trail) -> Step<Trail> {
        goto!(END, Trail::update().visited(vec!["second".into()]))
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let run = rt.block_on(trail::graph().run(Trail::default(), &())).unwrap();
    assert!(run.outcome.is_completed(), "{}", run.outcome);
    assert_eq!(run.state.visited, ["second"]);
    assert_eq!(run.steps, 2);
}
