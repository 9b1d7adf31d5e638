//! Every public future of a run is `Send` when the state and the deps are:
//! a durable run can be `tokio::spawn`ed or awaited in a web handler.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use agentflow::prelude::*;
use agentflow::{Event, RedbStore, Store};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Note {
    #[reduce(append)]
    trail: Vec<String>,
}

#[derive(Default)]
pub struct Deps {
    asked: AtomicU32,
}

#[graph(state = Note, deps = Deps, start = ask, max_steps = 5)]
mod flow {
    use super::*;

    #[node(goto = [END], interrupt)]
    async fn ask(_s: &Note, cx: &Ctx<Deps>) -> Result<Step<Note>, NodeError> {
        cx.deps().asked.fetch_add(1, Ordering::SeqCst);
        let answer: String = cx.interrupt("name?")?;
        Ok(goto!(END, Note::update().trail(vec![answer])))
    }
}

fn assert_send<T: Send>(_: T) {}

fn graph() -> App<Note, Deps> {
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    flow::graph().app().store(store)
}

/// Never awaited: compiling it is the test.
#[allow(dead_code)]
fn run_resume_and_resume_with_futures_are_send() {
    let graph = graph();
    let deps = Deps::default();
    let mut seen = Vec::new();
    assert_send(graph.run(Note::default(), &deps));
    assert_send(
        graph.runner(&deps).thread("t").on_event(|e: Event<Note>| seen.push(e.to_string())).run(Note::default()),
    );
    assert_send(graph.runner(&deps).thread("t").on_event(|_| {}).resume());
    assert_send(graph.runner(&deps).thread("t").on_event(|_| {}).resume_with("x"));
}

#[tokio::test]
async fn a_durable_run_and_its_resume_run_in_spawned_tasks() {
    let graph = Arc::new(graph());
    let deps = Arc::new(Deps::default());
    let (g, d) = (Arc::clone(&graph), Arc::clone(&deps));
    let first = tokio::spawn(async move {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let run =
            g.runner(&d).thread("spawned").on_event(move |e| drop(tx.send(e.to_string()))).run(Note::default()).await;
        let mut events = Vec::new();
        while let Ok(e) = rx.try_recv() {
            events.push(e);
        }
        (run, events)
    });
    let (run, events) = first.await.expect("the task ran");
    let run = run.expect("a valid run");
    assert!(matches!(run.outcome, Outcome::Interrupted { .. }), "{:?}", run.outcome);
    assert!(events.iter().any(|e| e.starts_with("finished")), "{events:?}");

    let (g, d) = (Arc::clone(&graph), Arc::clone(&deps));
    let resumed = tokio::spawn(async move { g.runner(&d).thread("spawned").resume_with("Ada").await })
        .await
        .expect("the task ran")
        .expect("a valid resume");
    assert_eq!(resumed.outcome, Outcome::Completed);
    assert_eq!(resumed.state.trail, vec!["Ada"]);
    assert_eq!(deps.asked.load(Ordering::SeqCst), 2);
}
