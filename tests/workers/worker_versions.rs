//! A queued run of a thread that a newer version of its graph already moved stays queued for a
//! worker of that version: a worker of the older build (a rolling deploy) leaves it, to be
//! claimed again later, and never removes it.

use std::sync::Arc;
use std::time::Duration;

use crate::support::worker_graph::{Job, job, wait_until};
use agentflow::__private::with_release;
use agentflow::prelude::*;
use agentflow::release::Release;
use agentflow::{CancellationToken, RedbStore, Store, Worker};

const LIMIT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_of_an_older_build_leaves_a_thread_of_a_newer_version_queued() {
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().expect("in-memory store"));
    // Version 2 runs the thread until it waits for the refund's approval.
    let newer = with_release(job::graph(), Release::new("job", 2, &[], "{}", "")).app().store(Arc::clone(&store));
    let run = newer.runner(&()).thread("t").owner("agent").run(Job::new(2, true, 0)).await.unwrap();
    assert!(matches!(run.outcome, Outcome::Interrupted { .. }), "{:?}", run.outcome);
    let before = store.list_checkpoints("t").unwrap().len();

    // A resume queued, then claimed by a worker of version 1.
    let older = job::graph().app().store(Arc::clone(&store));
    older.submit_resume("t").unwrap();
    let stop = CancellationToken::new();
    let worker = Worker::new(older.clone(), Arc::new(())).poll_interval(Duration::from_millis(10));
    let handle = tokio::spawn(worker.run(stop.clone()));
    // Claimed, or gone from the queue.
    let claimed = || store.list_runs().unwrap().iter().all(|r| r.thread != "t" || r.claims >= 1);
    wait_until("the older build's worker claims the run", LIMIT, claimed).await;
    stop.cancel();
    handle.await.unwrap().unwrap();

    let queued: Vec<_> = store.list_runs().unwrap().into_iter().filter(|r| r.thread == "t").collect();
    assert_eq!(queued.len(), 1, "the run left the queue: a worker of version 2 could not resume it");
    assert_eq!(store.list_checkpoints("t").unwrap().len(), before, "the older build wrote to the thread");
    assert_eq!(store.thread("t").unwrap().unwrap().graph_fingerprint, newer.graph().fingerprint());
}
