//! A step that runs two nodes at once, cut off (its run future dropped, as a process that dies
//! writes nothing more) after one node finished and while the other still runs: under
//! `Durability::Sync` the finished node's write was committed when it finished, so the resume
//! runs only the other one. Under `Async` the writes are kept with the step: both run again.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use agentflow::prelude::*;
use agentflow::{Durability, RedbStore, Store};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Both {
    #[reduce(append)]
    done: Vec<String>,
}

#[derive(Default)]
pub struct Counts {
    quick: AtomicU32,
    slow: AtomicU32,
    /// Whether `slow` hangs (the first run) or returns at once.
    hang: std::sync::atomic::AtomicBool,
}

#[graph(state = Both, deps = Counts, start = fork)]
mod forked {
    use super::*;

    #[node(goto = [quick, slow])]
    async fn fork(_s: &Both) -> Step<Both> {
        goto!([quick, slow])
    }

    #[node(goto = [END])]
    async fn quick(_s: &Both, counts: &Counts) -> Step<Both> {
        counts.quick.fetch_add(1, Ordering::SeqCst);
        goto!(END, Both::update().done(vec!["quick".into()]))
    }

    #[node(goto = [END])]
    async fn slow(_s: &Both, counts: &Counts) -> Step<Both> {
        counts.slow.fetch_add(1, Ordering::SeqCst);
        if counts.hang.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        goto!(END, Both::update().done(vec!["slow".into()]))
    }
}

async fn cut_off_then_resume(durability: Durability) -> (u32, u32, Vec<String>) {
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = forked::graph().app().store(Arc::clone(&store));
    let counts = Counts { hang: true.into(), ..Counts::default() };
    let run = app.runner(&counts).thread("t").durability(durability).run(Both::default());
    // Long enough for `quick` to finish and its write to be committed; `slow` never returns.
    assert!(tokio::time::timeout(Duration::from_millis(300), run).await.is_err(), "the run did not hang");
    counts.hang.store(false, Ordering::SeqCst);
    let app = forked::graph().app().store(store);
    let run = app.runner(&counts).thread("t").durability(durability).resume().await.unwrap();
    assert_eq!(run.outcome, Outcome::Completed);
    (counts.quick.load(Ordering::SeqCst), counts.slow.load(Ordering::SeqCst), run.state.done)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_node_of_a_step_cut_off_does_not_run_again_under_sync() {
    let (quick, slow, done) = cut_off_then_resume(Durability::Sync).await;
    assert_eq!((quick, slow), (1, 2), "`quick` finished before the cut: only `slow` runs again");
    assert_eq!(done, ["quick", "slow"], "merged in declaration order");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_async_a_step_cut_off_runs_all_its_nodes_again() {
    let (quick, slow, done) = cut_off_then_resume(Durability::Async).await;
    assert_eq!((quick, slow), (2, 2), "`Async` keeps the writes with the step");
    assert_eq!(done, ["quick", "slow"]);
}
