use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Essay {
    #[reduce(add)]
    revisions: u32,
}

#[graph(state = Essay, start = draft, max_steps = 10)]
mod writer {
    use super::*;

    #[node(goto = [review])]
    async fn draft(_e: &Essay) -> Step<Essay> {
        goto!(review, Essay::update().revisions(1))
    }

    #[node(goto = [draft, END])]
    async fn review(e: &Essay) -> Step<Essay> {
        if e.revisions < 3 { goto!(draft) } else { goto!(END) }
    }
}

fn main() {
    let graph = writer::graph();
    assert_eq!(graph.max_steps(), 10);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let run = rt.block_on(graph.run(Essay::default(), &())).unwrap();
    assert!(run.outcome.is_completed(), "{}", run.outcome);
    assert_eq!(run.state.revisions, 3);
    assert_eq!(run.steps, 6);
}
