//! A pause asked as a worker's run parks for an approval: `pause_run` reads the thread's status
//! (running), the run parks, then the pause is written. Set on the parked row, it made the row
//! claimable, the woken run stopped paused and left the queue, and the approval, decided later,
//! woke nothing: the approved refund never ran. The store now refuses a pause on a parked run.

use crate::support::hooked_store;
use crate::support::pg;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use agentflow::persist::ThreadStatus;
use agentflow::prelude::*;
use agentflow::{CancellationToken, RedbStore, Store};
use agentflow::{Worker, WorkerError};
use agentflow_store::RunWait;
use serde::{Deserialize, Serialize};

const LIMIT: Duration = Duration::from_secs(30);

async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !done() {
        assert!(start.elapsed() < LIMIT, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
pub struct Refund {
    pub order: String,
    pub receipt: Option<serde_json::Value>,
}

/// Holds the node until the test opens it (then it stays open).
pub struct Gate {
    open: tokio::sync::Semaphore,
    at: AtomicBool,
}

impl Default for Gate {
    fn default() -> Self {
        Gate { open: tokio::sync::Semaphore::new(0), at: AtomicBool::new(false) }
    }
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct RefundArgs {
    order_id: String,
}

/// Irreversible: the default policy asks a human first.
#[tool(risk = irreversible)]
async fn issue_refund(args: RefundArgs) -> Result<serde_json::Value, ToolError> {
    Ok(serde_json::json!({ "refunded": args.order_id }))
}

#[graph(state = Refund, start = refund, deps = Gate)]
mod refunding {
    use super::*;

    #[node(goto = [END], tools = [issue_refund])]
    async fn refund(s: &Refund, cx: &Ctx<Gate>) -> Result<Step<Refund>, NodeError> {
        let gate = cx.deps();
        gate.at.store(true, Ordering::SeqCst);
        gate.open.acquire().await.expect("open").forget();
        gate.open.add_permits(1);
        let obs = cx.run_tool(issue_refund, serde_json::json!({ "order_id": s.order })).await?;
        Ok(goto!(END, Refund::update().receipt(Some(obs.body))))
    }
}

/// The run parks for its approval between `pause_run`'s status read and its write: the pause is
/// refused (`NotRunning`), nothing is written, and the approval, once decided, wakes the run,
/// which runs the refund once.
async fn a_pause_racing_an_approval_park(inner: Arc<dyn Store>, thread: &'static str) {
    let gate = Arc::new(Gate::default());
    let app = refunding::graph().app().store(Arc::clone(&inner));
    // The controlling process: its status read is followed by the run parking, before its write.
    let mut hooked = hooked_store::Hooked::new(Arc::clone(&inner));
    let seen_running = Arc::new(AtomicBool::new(false));
    hooked.after_thread_read = Some({
        let (inner, seen, gate) = (Arc::clone(&inner), Arc::clone(&seen_running), Arc::clone(&gate));
        Box::new(move |record| {
            let Some(record) = record else { return };
            if record.status != ThreadStatus::Running || seen.swap(true, Ordering::SeqCst) {
                return;
            }
            gate.open.add_permits(1);
            let start = std::time::Instant::now();
            while !inner
                .list_runs()
                .unwrap()
                .iter()
                .any(|r| r.thread == thread && r.wait == RunWait::Approval && r.lease.is_none())
            {
                assert!(
                    start.elapsed() < Duration::from_secs(5),
                    "the run did not park: {:?} {:?}",
                    inner.list_runs(),
                    inner.thread(thread)
                );
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    });
    let controller = refunding::graph().app().store(Arc::new(hooked) as Arc<dyn Store>);

    app.submit_as(thread, &Refund { order: format!("{thread}-order"), ..Refund::default() }, "support-bot").unwrap();
    let stop = CancellationToken::new();
    let worker = Worker::new(app.clone(), Arc::clone(&gate)).poll_interval(Duration::from_millis(10));
    let handle = tokio::spawn(worker.run(stop.clone()));
    wait_until("the node runs", || gate.at.load(Ordering::SeqCst)).await;

    let paused = tokio::task::spawn_blocking(move || controller.pause_run(thread)).await.unwrap();
    assert!(seen_running.load(Ordering::SeqCst), "the status was read while the run ran");
    assert!(matches!(paused, Err(WorkerError::NotRunning { ref status, .. }) if status == "interrupted"), "{paused:?}");
    assert!(inner.list_audit(thread).unwrap().iter().all(|e| e.kind != "run.pause_requested"), "nothing written");

    // Still parked for the approval, which a person then approves, as the inbox shows it.
    let runs = app.live_runs().unwrap();
    let row = runs.iter().find(|r| r.thread == thread).expect("still queued");
    assert_eq!((row.wait, row.control), (RunWait::Approval, None));
    let approvals = inner.list_approvals(thread).unwrap();
    assert_eq!(approvals.len(), 1, "{approvals:?}");
    let desk = agentflow::approval::ApprovalDesk::for_store(
        Arc::clone(&inner),
        agentflow::approval::RoleAuthorizer::new().role_for(agentflow::tool::Risk::Irreversible, "ops"),
    );
    desk.approve(&approvals[0].id, &agentflow::approval::Approver::new("alice", ["ops"])).unwrap();
    // The run commits the thread completed, then its worker settles the row away.
    wait_until("the approved refund runs, the thread completes and its run leaves the queue", || {
        app.thread(thread).unwrap().unwrap().status == ThreadStatus::Completed
            && app.live_runs().unwrap().iter().all(|r| r.thread != thread)
    })
    .await;
    stop.cancel();
    handle.await.unwrap().unwrap();
    let receipt = app.state(thread).unwrap().unwrap().state.receipt;
    let refunded = serde_json::json!({ "ok": true, "result": { "refunded": format!("{thread}-order") } });
    assert_eq!(receipt, Some(refunded), "the refund ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redb_a_pause_asked_as_the_run_parks_for_an_approval_is_refused_and_the_approval_resumes_it() {
    a_pause_racing_an_approval_park(Arc::new(RedbStore::in_memory().unwrap()), "pause-redb").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_pause_asked_as_the_run_parks_for_an_approval_is_refused_and_the_approval_resumes_it() {
    let Some(url) = pg::pg_url() else { return };
    let schema = format!("worker_pause_park_{}", std::process::id());
    let store = agentflow_store::PostgresStore::builder().schema(&schema).open(&url).unwrap();
    a_pause_racing_an_approval_park(Arc::new(store), "pause-pg").await;
}
