use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Email {
    body: String,
    summary: Option<String>,
}

#[graph(state = Email, start = summarize)]
mod mail {
    use super::*;

    #[node(goto = [END], writes = [sumary])]
    async fn summarize(e: &Email) -> Step<Email> {
        goto!(END, Email::update().summary(Some(e.body.clone())))
    }
}

fn main() {
    let _ = mail::graph();
}
