//! A process dies while a subgraph child runs; another process takes the
//! parent over as soon as the parent's lease has expired. The child's own
//! lease, renewed on its own schedule, may still be held by the dead process
//! for a moment. The subgraph docs promise that a child cut off by a crash
//! resumes from its last checkpoint: the parent must wait for the child's
//! lease rather than fail its node (and, with no retry policy, the thread).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use agentflow::persist::ThreadStatus;
use agentflow::prelude::*;
use agentflow::{Outcome, RedbStore, Store};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Slow {
    #[reduce(append)]
    done: Vec<String>,
}

/// Steps of `slow` run so far; the second blocks the first time until released.
#[derive(Default)]
pub struct Gate {
    first: AtomicU32,
    second: AtomicU32,
    release: tokio::sync::Notify,
    blocked: tokio::sync::Notify,
}

#[graph(state = Slow, deps = Gate, start = one)]
pub mod slow {
    use super::*;

    #[node(goto = [two])]
    async fn one(_s: &Slow, gate: &Gate) -> Step<Slow> {
        gate.first.fetch_add(1, Ordering::SeqCst);
        goto!(two, Slow::update().done(vec!["one".to_string()]))
    }

    #[node(goto = [END])]
    async fn two(_s: &Slow, gate: &Gate) -> Step<Slow> {
        if gate.second.fetch_add(1, Ordering::SeqCst) == 0 {
            gate.blocked.notify_one();
            gate.release.notified().await;
        }
        goto!(END, Slow::update().done(vec!["two".to_string()]))
    }
}

#[graph(state = Slow, deps = Gate, start = run_it)]
pub mod slow_parent {
    use super::*;

    #[node(goto = [END], subgraphs = [slow])]
    async fn run_it(_s: &Slow, cx: &Ctx<Gate>) -> Result<Step<Slow>, NodeError> {
        let child = cx.subgraph(slow::graph(), Slow::default()).await?;
        Ok(goto!(END, Slow::update().done(child.done)))
    }
}

fn now_ms() -> u64 {
    u64::try_from(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis()).unwrap()
}

#[tokio::test]
async fn a_takeover_waits_for_the_dead_processs_lease_on_the_child_instead_of_failing_the_parent() {
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = slow_parent::graph().app().store(Arc::clone(&store));
    let gate = Arc::new(Gate::default());
    let task = tokio::spawn({
        let (app, gate) = (app.clone(), Arc::clone(&gate));
        async move { app.runner(&*gate).thread("s").run(Slow::default()).await }
    });
    gate.blocked.notified().await;
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    let child = "s/run_it.0.0.slow";
    assert_eq!(store.thread(child).unwrap().unwrap().status, ThreadStatus::Running);
    // The dead process's lease on the child, not yet expired (its parent's is).
    store.acquire_lease(child, "dead-process", 400, now_ms()).unwrap();

    let done = app.runner(&*gate).thread("s").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed, "the parent failed on the child's lease");
    assert_eq!(done.state.done, ["one", "two"]);
    assert_eq!(gate.first.load(Ordering::SeqCst), 1, "the child's committed step ran again");
    assert_eq!(store.thread(child).unwrap().unwrap().status, ThreadStatus::Completed);
}
