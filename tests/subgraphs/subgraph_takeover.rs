//! A process dies while a subgraph child runs; another process takes the
//! parent over as soon as the parent's lease has expired. The child's own
//! lease, renewed on its own schedule, may still be held by the dead process
//! for a moment. The subgraph docs promise that a child cut off by a crash
//! resumes from its last checkpoint: the parent must wait for the child's
//! lease rather than fail its node (and, with no retry policy, the thread).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use agentflow::persist::ThreadStatus;
use agentflow::timer::now_ms;
use agentflow::{Outcome, RedbStore, Store};

use crate::subgraph_tree::{Gate, Slow, slow_parent};

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
