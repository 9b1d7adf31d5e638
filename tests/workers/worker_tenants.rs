//! A run submitted for a tenant: the worker that claims it creates the thread for that tenant,
//! and an actor that does not act for the tenant cannot submit it.

use std::sync::Arc;
use std::time::Duration;

use crate::support::stores::open_redb;
use crate::support::temp::temp_dir;
use crate::support::worker_graph::{Job, job, wait_until};
use agentflow::access::Actor;
use agentflow::persist::ThreadStatus;
use agentflow::prelude::*;
use agentflow::{CancellationToken, Worker, WorkerError};

/// Who the submitted runs act for: the jobs' graph lists a tool the default policy gates.
const OWNER: &str = "agent:jobs";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_submitted_for_a_tenant_creates_its_thread_for_that_tenant() {
    let dir = temp_dir("worker-tenant");
    let store = Arc::new(open_redb(dir.join("store.redb")).expect("open the store file"));
    let app: App<Job, ()> = job::graph().app().store(store);

    // An actor of another tenant is refused, and nothing is queued.
    let globex = app.acting_as(Actor::new("g", Vec::<String>::new()).for_tenants(["globex"]));
    let err = globex.submit_for("t-acme", &Job::new(2, false, 0), OWNER, "acme").unwrap_err();
    assert!(matches!(err, WorkerError::Access(_)), "{err}");
    assert!(app.live_runs().unwrap().is_empty(), "the refused run was not queued");

    app.submit_for("t-acme", &Job::new(2, false, 0), OWNER, "acme").unwrap();
    app.submit_as("t-none", &Job::new(2, false, 0), OWNER).unwrap();
    let queued: Vec<(String, Option<String>)> =
        app.live_runs().unwrap().into_iter().map(|r| (r.thread, r.tenant)).collect();
    assert_eq!(queued, [("t-acme".to_string(), Some("acme".to_string())), ("t-none".to_string(), None)]);

    let stop = CancellationToken::new();
    let worker = Worker::new(app.clone(), Arc::new(())).poll_interval(Duration::from_millis(10));
    let handle = tokio::spawn(worker.run(stop.clone()));
    wait_until("the queue is empty", Duration::from_secs(60), || app.live_runs().unwrap().is_empty()).await;
    stop.cancel();
    let report = handle.await.unwrap().unwrap();
    assert_eq!(report.completed, 2);

    let acme = app.thread("t-acme").unwrap().expect("the worker created the thread");
    assert_eq!(acme.status, ThreadStatus::Completed, "{}", acme.detail);
    assert_eq!(acme.tenant.as_deref(), Some("acme"));
    assert_eq!(app.thread("t-none").unwrap().expect("the other thread").tenant, None);
    let submitted = app.audit_log("t-acme").unwrap();
    let entry = submitted.iter().find(|e| e.kind == "run.submitted").expect("the run.submitted entry");
    assert_eq!(entry.detail["tenant"], "acme");
    let _ = std::fs::remove_dir_all(&dir);
}
