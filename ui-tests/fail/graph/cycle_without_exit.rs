use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Essay {
    draft: String,
}

#[graph(state = Essay, start = draft, max_steps = 10)]
mod writer {
    use super::*;

    #[node(goto = [review])]
    async fn draft(_e: &Essay) -> Step<Essay> {
        goto!(review)
    }

    #[node(goto = [draft])]
    async fn review(_e: &Essay) -> Step<Essay> {
        goto!(draft)
    }
}

fn main() {
    let _ = writer::graph();
}
