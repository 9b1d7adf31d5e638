//! Promise (README, Durable runs): "Resume refuses a changed graph (nodes,
//! routes, `writes`, tool sets and risk classes) and names what changed."
//!
//! Graph `v1` runs on a store file to a breakpoint and the store is closed;
//! a "new process" opens the file and resumes the thread with `v2`, which is
//! `v1` except that one node's `#[node(writes = [..])]` list is shorter.
//!
//! If the promise were false the resume would go on: `second` would run,
//! `c` would be 3 and the thread completed under a graph that did not start
//! it. The second test checks the other half, "names what changed": the
//! refusal should name the node whose `writes` changed.

use std::path::PathBuf;
use std::sync::Arc;

use crate::support::stores::open_redb;
use agentflow::persist::{ResumeError, ThreadStatus};
use agentflow::prelude::*;
use agentflow::{RunError, Store};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Doc {
    a: u32,
    b: u32,
    c: u32,
}

#[graph(state = Doc, start = first)]
pub mod v1 {
    use super::*;

    #[node(goto = [second], writes = [a, b])]
    async fn first(_s: &Doc) -> Step<Doc> {
        goto!(second, Doc::update().a(1))
    }

    #[node(goto = [END], writes = [c])]
    async fn second(_s: &Doc) -> Step<Doc> {
        goto!(END, Doc::update().c(3))
    }
}

/// `v1` with `first` no longer allowed to write `b`; nothing else differs.
#[graph(state = Doc, start = first)]
pub mod v2 {
    use super::*;

    #[node(goto = [second], writes = [a])]
    async fn first(_s: &Doc) -> Step<Doc> {
        goto!(second, Doc::update().a(1))
    }

    #[node(goto = [END], writes = [c])]
    async fn second(_s: &Doc) -> Step<Doc> {
        goto!(END, Doc::update().c(3))
    }
}

fn db(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("agentflow-promises-writes-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("store.redb")
}

/// Runs `v1` on a new store file until the breakpoint before `second`, then closes the store.
async fn paused_by_v1(name: &str) -> PathBuf {
    let path = db(name);
    let store = Arc::new(open_redb(&path).unwrap());
    let app = v1::graph().app().store(Arc::clone(&store) as Arc<dyn Store>);
    let run = app.runner(&()).thread("doc").interrupt_before(["second"]).run(Doc::default()).await.unwrap();
    assert!(matches!(run.outcome, Outcome::Interrupted { .. }), "{}", run.outcome);
    assert_eq!(run.state, Doc { a: 1, b: 0, c: 0 });
    drop(app);
    Arc::into_inner(store).expect("nothing else holds the store").close().unwrap();
    path
}

/// Resumes the thread with `v2` from a freshly opened store; returns the error and the store.
async fn resume_with_v2(path: &PathBuf) -> (RunError, Arc<dyn Store>) {
    let store: Arc<dyn Store> = Arc::new(open_redb(path).unwrap());
    let app = v2::graph().app().store(Arc::clone(&store));
    let err = match app.runner(&()).thread("doc").resume().await {
        Ok(run) => panic!("resumed under a changed `writes` list: {} with {:?}", run.outcome, run.state),
        Err(e) => e,
    };
    (err, store)
}

#[tokio::test]
async fn a_resume_with_a_changed_writes_list_is_refused() {
    assert_ne!(v1::graph().fingerprint(), v2::graph().fingerprint(), "`writes` is part of the fingerprint");
    let path = paused_by_v1("refused").await;
    let (err, store) = resume_with_v2(&path).await;
    assert!(matches!(err, RunError::Resume(ResumeError::GraphChanged { .. })), "{err}");
    // Nothing moved: the thread still waits where v1 left it, and v1 resumes it.
    assert_eq!(store.thread("doc").unwrap().unwrap().status, ThreadStatus::Interrupted);
    let app = v1::graph().app().store(store);
    assert_eq!(app.state("doc").unwrap().unwrap().state, Doc { a: 1, b: 0, c: 0 });
    let done = app.runner(&()).thread("doc").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(done.state, Doc { a: 1, b: 0, c: 3 });
}

#[tokio::test]
async fn the_refusal_names_the_node_whose_writes_changed() {
    let path = paused_by_v1("named").await;
    let (err, _store) = resume_with_v2(&path).await;
    let RunError::Resume(ResumeError::GraphChanged { changes, .. }) = &err else { panic!("{err}") };
    // The description stored with the thread holds each node's `writes` list:
    // without it the message could only say that something changed.
    assert!(changes.contains("writes") && changes.contains("`first`"), "does not name what changed: {changes}");
}
