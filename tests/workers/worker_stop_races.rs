//! Stops that race a run's end, on redb and on PostgreSQL.
//!
//! - A worker shut down just as a run's last step commits. That commit records the thread
//!   `completed`; the shutdown then asks the run to pause at its next step boundary, of which
//!   there is none. The run used to end `Paused` there, overwrite `completed` with `paused`, and
//!   the worker left its row queued for another worker. It now ends `Completed` and leaves the
//!   queue.
//! - A cancel asked (`cancel_run`) while a step runs whose node then fails: the cancel wins, the
//!   thread ends `cancelled` (not `failed`, which a later resume would run again) and the
//!   failed node does not run again. (A step that runs out of budget as the cancel comes ends
//!   the same way: `tests/executor_limits.rs`.)

use crate::support::hooked_store;
use crate::support::pg;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use agentflow::persist::ThreadStatus;
use agentflow::prelude::*;
use agentflow::{CancellationToken, RedbStore, Store, Worker};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
pub struct Count {
    #[reduce(add)]
    pub n: u64,
}

#[graph(state = Count, start = first)]
mod counting {
    use super::*;

    #[node(goto = [second])]
    async fn first(_s: &Count) -> Step<Count> {
        goto!(second, Count::update().n(1))
    }

    #[node(goto = [END])]
    async fn second(_s: &Count) -> Step<Count> {
        goto!(END, Count::update().n(1))
    }
}

async fn shutdown_as_the_last_step_commits(inner: Arc<dyn Store>, thread: &'static str) {
    let stop = CancellationToken::new();
    let mut hooked = hooked_store::Hooked::new(Arc::clone(&inner));
    hooked.fail_commit = Some({
        let stop = stop.clone();
        Box::new(move |commit| {
            if commit.thread.id == thread && commit.thread.status == ThreadStatus::Completed {
                // The worker's loop (on the runtime's other thread) sees the shutdown and asks
                // the run to pause before this commit returns to it.
                stop.cancel();
                std::thread::sleep(Duration::from_secs(1));
            }
            None
        })
    });
    let app = counting::graph().app().store(Arc::new(hooked) as Arc<dyn Store>);
    app.submit(thread, &Count::default()).unwrap();
    let worker = Worker::new(app.clone(), Arc::new(())).poll_interval(Duration::from_millis(10));
    let report = tokio::time::timeout(Duration::from_secs(30), worker.run(stop.clone()))
        .await
        .expect("the worker stops")
        .unwrap();
    assert!(stop.is_cancelled());
    let record = inner.thread(thread).unwrap().unwrap();
    assert_eq!(record.status, ThreadStatus::Completed, "{record:?}");
    assert_eq!((report.completed, report.stopped), (1, 0), "{report:?}");
    assert!(inner.list_runs().unwrap().iter().all(|r| r.thread != thread), "the run left the queue");
    assert_eq!(app.state(thread).unwrap().unwrap().state.n, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redb_a_worker_shut_down_as_the_last_step_commits_settles_the_run_completed() {
    shutdown_as_the_last_step_commits(Arc::new(RedbStore::in_memory().unwrap()), "last-step-redb").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_worker_shut_down_as_the_last_step_commits_settles_the_run_completed() {
    let Some(url) = pg::pg_url() else { return };
    let schema = format!("worker_stop_races_{}", std::process::id());
    let store = agentflow_store::PostgresStore::builder().schema(&schema).open(&url).unwrap();
    shutdown_as_the_last_step_commits(Arc::new(store), "last-step-pg").await;
}

/// Holds the node until the test opens it; counts the node's runs.
#[derive(Default)]
pub struct Gate {
    at: AtomicU32,
    open: AtomicBool,
}

#[graph(state = Count, deps = Gate, start = refuse)]
mod refusing {
    use super::*;

    /// Waits for the gate, then fails for good.
    #[node(goto = [END])]
    async fn refuse(_s: &Count, gate: &Gate) -> Result<Step<Count>, NodeError> {
        gate.at.fetch_add(1, Ordering::SeqCst);
        while !gate.open.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Err(NodeError::fatal("the order was refused"))
    }
}

async fn a_cancel_asked_as_the_node_fails(inner: Arc<dyn Store>, thread: &'static str) {
    let app = refusing::graph().app().store(Arc::clone(&inner));
    app.submit(thread, &Count::default()).unwrap();
    let gate = Arc::new(Gate::default());
    let stop = CancellationToken::new();
    let worker = Worker::new(app.clone(), Arc::clone(&gate)).poll_interval(Duration::from_millis(10));
    let handle = tokio::spawn(worker.run(stop.clone()));
    let began = std::time::Instant::now();
    while gate.at.load(Ordering::SeqCst) == 0 {
        assert!(began.elapsed() < Duration::from_secs(30), "timed out waiting for the node");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let asked = {
        let app = app.clone();
        tokio::task::spawn_blocking(move || app.cancel_run(thread)).await.unwrap().unwrap()
    };
    assert!(asked);
    // The worker reads its runs' requests every poll (10 ms).
    tokio::time::sleep(Duration::from_millis(300)).await;
    gate.open.store(true, Ordering::SeqCst);
    while !app.live_runs().unwrap().is_empty() {
        assert!(began.elapsed() < Duration::from_secs(30), "timed out waiting for the run to leave the queue");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop.cancel();
    tokio::time::timeout(Duration::from_secs(30), handle).await.expect("the worker stops").unwrap().unwrap();
    let record = inner.thread(thread).unwrap().unwrap();
    assert_eq!(record.status, ThreadStatus::Cancelled, "{record:?}");
    assert_eq!(gate.at.load(Ordering::SeqCst), 1, "the failed node did not run again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redb_a_cancel_asked_as_the_node_fails_ends_the_thread_cancelled() {
    a_cancel_asked_as_the_node_fails(Arc::new(RedbStore::in_memory().unwrap()), "cancel-fail-redb").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_cancel_asked_as_the_node_fails_ends_the_thread_cancelled() {
    let Some(url) = pg::pg_url() else { return };
    let schema = format!("worker_stop_races_cancel_{}", std::process::id());
    let store = agentflow_store::PostgresStore::builder().schema(&schema).open(&url).unwrap();
    a_cancel_asked_as_the_node_fails(Arc::new(store), "cancel-fail-pg").await;
}

/// `cancel_run` or `pause_run` asked (from any process) while the run's last step commits: too
/// late, the run ends `Completed`, nothing is compensated, and the run leaves the queue (at once,
/// or at the next claim of the request it kept, which finds the thread finished).
async fn a_control_asked_as_the_last_step_commits(
    inner: Arc<dyn Store>,
    thread: &'static str,
    control: agentflow_store::RunControl,
) {
    let mut hooked = hooked_store::Hooked::new(Arc::clone(&inner));
    hooked.fail_commit = Some({
        let inner = Arc::clone(&inner);
        Box::new(move |commit| {
            if commit.thread.id == thread && commit.thread.status == ThreadStatus::Completed {
                assert!(inner.control_run(thread, control).unwrap(), "the run is queued");
                // The worker reads its runs' requests every poll (10 ms) and stops the run.
                std::thread::sleep(Duration::from_millis(300));
            }
            None
        })
    });
    let app = counting::graph().app().store(Arc::new(hooked) as Arc<dyn Store>);
    app.submit(thread, &Count::default()).unwrap();
    let stop = CancellationToken::new();
    let worker = Worker::new(app.clone(), Arc::new(())).poll_interval(Duration::from_millis(10));
    let handle = tokio::spawn(worker.run(stop.clone()));
    let began = std::time::Instant::now();
    while !app.live_runs().unwrap().is_empty() || inner.thread(thread).unwrap().is_none() {
        assert!(began.elapsed() < Duration::from_secs(30), "the run stayed queued: {:?}", app.live_runs());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop.cancel();
    let report =
        tokio::time::timeout(Duration::from_secs(30), handle).await.expect("the worker stops").unwrap().unwrap();
    let record = inner.thread(thread).unwrap().unwrap();
    assert_eq!(record.status, ThreadStatus::Completed, "{record:?}");
    assert_eq!((report.completed, report.controlled), (report.claimed, 0), "{report:?}");
    assert_eq!(app.state(thread).unwrap().unwrap().state.n, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redb_a_cancel_asked_as_the_last_step_commits_is_too_late() {
    let store = Arc::new(RedbStore::in_memory().unwrap());
    a_control_asked_as_the_last_step_commits(store, "late-cancel", agentflow_store::RunControl::Cancel).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redb_a_pause_asked_as_the_last_step_commits_is_too_late() {
    let store = Arc::new(RedbStore::in_memory().unwrap());
    a_control_asked_as_the_last_step_commits(store, "late-pause", agentflow_store::RunControl::Pause).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_cancel_asked_as_the_last_step_commits_is_too_late() {
    let Some(url) = pg::pg_url() else { return };
    let schema = format!("worker_stop_races_late_{}", std::process::id());
    let store = agentflow_store::PostgresStore::builder().schema(&schema).open(&url).unwrap();
    a_control_asked_as_the_last_step_commits(Arc::new(store), "late-cancel-pg", agentflow_store::RunControl::Cancel)
        .await;
}
