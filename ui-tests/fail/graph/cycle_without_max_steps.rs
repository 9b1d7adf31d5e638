use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Essay {
    draft: String,
    #[reduce(add)]
    revisions: u32,
}

#[graph(state = Essay, start = draft)]
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
    let _ = writer::graph();
}
