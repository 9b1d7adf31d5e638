//! A worker running the jobs' graph (`worker_graph::job`), and what the follow-up tests ask of
//! the threads it runs.

use std::sync::Arc;
use std::time::Duration;

use agentflow::persist::ThreadStatus;
use agentflow::prelude::*;
use agentflow::{CancellationToken, Worker, WorkerError, WorkerReport};

use super::worker_graph::{Job, wait_until};

/// How long a thread is waited for.
pub const LIMIT: Duration = Duration::from_secs(60);

/// A worker of `app` polling every 10 ms, running until the token is cancelled.
pub fn start(app: &App<Job, ()>) -> (CancellationToken, tokio::task::JoinHandle<Result<WorkerReport, WorkerError>>) {
    let stop = CancellationToken::new();
    let worker = Worker::new(app.clone(), Arc::new(())).poll_interval(Duration::from_millis(10));
    (stop.clone(), tokio::spawn(worker.run(stop)))
}

/// Stops the worker [`start`] began and returns its report.
pub async fn stop(
    stop: CancellationToken,
    handle: tokio::task::JoinHandle<Result<WorkerReport, WorkerError>>,
) -> WorkerReport {
    stop.cancel();
    handle.await.unwrap().unwrap()
}

/// Waits until `thread` has no run in the queue and its status is `completed`.
pub async fn completes(app: &App<Job, ()>, thread: &str) {
    wait_until(&format!("{thread} completes"), LIMIT, || {
        app.live_runs().unwrap().iter().all(|r| r.thread != thread)
            && app.thread(thread).unwrap().is_some_and(|t| t.status == ThreadStatus::Completed)
    })
    .await;
}

/// The nodes that ran, in order, as the state's trail records them.
pub fn trail(app: &App<Job, ()>, thread: &str) -> Vec<String> {
    let state = app.state(thread).unwrap().unwrap().state;
    state.trail.iter().map(|t| t.split(':').next().unwrap().to_string()).collect()
}

/// How many audit entries of `kind` thread `thread` has.
pub fn count(app: &App<Job, ()>, thread: &str, kind: &str) -> usize {
    app.audit_log(thread).unwrap().iter().filter(|e| e.kind == kind).count()
}
