use agentflow::prelude::*;
use agentflow::reducer::HasId;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Note {
    id: String,
    text: String,
}

impl HasId for Note {
    fn id(&self) -> &str {
        &self.id
    }
}

fn note(id: &str, text: &str) -> Note {
    Note { id: id.into(), text: text.into() }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Chat {
    #[reduce(messages)]
    notes: Vec<Note>,
}

#[graph(state = Chat, start = write)]
mod chat {
    use super::*;

    #[node(goto = [edit])]
    async fn write(_c: &Chat) -> Step<Chat> {
        goto!(edit, Chat::update().notes(vec![note("a", "draft"), note("b", "other")]))
    }

    #[node(goto = [END])]
    async fn edit(_c: &Chat) -> Step<Chat> {
        goto!(END, Chat::update().notes(vec![note("a", "final"), note("c", "new")]))
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let run = rt.block_on(chat::graph().run(Chat::default(), &())).unwrap();
    assert!(run.outcome.is_completed(), "{}", run.outcome);
    // `a` was replaced in place, `c` appended.
    assert_eq!(run.state.notes, [note("a", "final"), note("b", "other"), note("c", "new")]);
}
