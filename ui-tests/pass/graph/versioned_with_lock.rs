// A released graph (`version = 1`, its id the module's name) whose shape matches its committed
// lock, `graphs/intake/v1.lock` beside this file.
use agentflow::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Ticket {
    text: String,
    answer: Option<String>,
}

#[graph(state = Ticket, start = triage, max_steps = 10, version = 1)]
mod intake {
    use super::*;

    #[node(goto = [answer, END])]
    async fn triage(t: &Ticket) -> Step<Ticket> {
        if t.text.is_empty() { goto!(END) } else { goto!(answer) }
    }

    #[node(goto = [END], writes = [answer])]
    async fn answer(_t: &Ticket) -> Step<Ticket> {
        goto!(END, Ticket::update().answer(Some("done".into())))
    }
}

fn main() {
    let graph = intake::graph();
    let release = graph.release();
    assert_eq!((release.id, release.version, graph.version()), ("intake", 1, 1));
    assert!(release.migrations.is_empty());
    assert!(release.locks.ends_with("ui-tests/pass/graph/graphs"), "{}", release.locks);
    // The macro's shape is the lock's `nodes`, like for like.
    let lock: serde_json::Value = serde_json::from_str(include_str!("graphs/intake/v1.lock")).unwrap();
    let nodes: serde_json::Value = serde_json::from_str(release.nodes).unwrap();
    assert_eq!(nodes, lock["nodes"]);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let run = rt.block_on(graph.run(Ticket { text: "help".into(), answer: None }, &())).unwrap();
    assert_eq!(run.state.answer.as_deref(), Some("done"));
}
