use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

fn keep_longest(old: &mut String, new: String) {
    if new.len() > old.len() {
        *old = new;
    }
}

mod reducers {
    pub fn max(old: &mut u32, new: u32) {
        *old = (*old).max(new);
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Best {
    #[reduce(custom = keep_longest)]
    answer: String,
    #[reduce(custom = reducers::max)]
    score: u32,
}

#[graph(state = Best, start = split)]
mod best {
    use super::*;

    #[node(goto = [short, long])]
    async fn split(_b: &Best) -> Step<Best> {
        goto!([short, long])
    }

    #[node(goto = [END], writes = [answer, score])]
    async fn short(_b: &Best) -> Step<Best> {
        goto!(END, Best::update().answer("ok".into()).score(7))
    }

    #[node(goto = [END], writes = [answer, score])]
    async fn long(_b: &Best) -> Step<Best> {
        goto!(END, Best::update().answer("a longer answer".into()).score(3))
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let run = rt.block_on(best::graph().run(Best::default(), &())).unwrap();
    assert!(run.outcome.is_completed(), "{}", run.outcome);
    assert_eq!(run.state.answer, "a longer answer");
    assert_eq!(run.state.score, 7);
}
