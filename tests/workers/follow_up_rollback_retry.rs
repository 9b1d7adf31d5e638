//! A rollback follow-up whose worker dies right after its restart commit, before it cancelled
//! the requests the replaced branch's subgraph children made: the next claim finds the restart
//! made and cancels them then (not the new branch's own).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::support::hooked_store::Hooked;
use crate::support::refund_subgraph::{Case, Counts, support};
use crate::support::worker_graph::wait_until;
use agentflow::approval::ApprovalStatus;
use agentflow::prelude::*;
use agentflow::{CancellationToken, Multitask, RedbStore, Store, Worker};

const LIMIT: Duration = Duration::from_secs(60);
const THREAD: &str = "case-l4";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_retried_after_its_restart_cancels_the_replaced_branch_s_child_requests() {
    let inner: Arc<dyn Store> = Arc::new(RedbStore::in_memory().expect("in-memory store"));
    let mut hooked = Hooked::new(Arc::clone(&inner));
    // The worker "dies" (its store call panics) right after the commit of the follow-up's
    // restart, once.
    let died = Arc::new(AtomicBool::new(false));
    let (probe, once) = (Arc::clone(&inner), Arc::clone(&died));
    hooked.after_checkpoint = Some(Box::new(move || {
        let latest = probe.list_checkpoints(THREAD).ok().and_then(|c| c.last().cloned());
        if latest.is_some_and(|c| c.metadata.extra.get("follow_up").is_some()) && !once.swap(true, Ordering::SeqCst) {
            panic!("the worker dies right after the restart commit");
        }
    }));
    let app = support::graph().app().store(Arc::new(hooked) as Arc<dyn Store>);
    let counts = Arc::new(Counts::default());
    // Run in this process: the thread waits for its child's refund approval, out of the queue.
    let run = app.runner(&*counts).thread(THREAD).owner("agent").run(Case { amount: 40, outcome: None }).await;
    assert!(matches!(run.unwrap().outcome, Outcome::Interrupted { .. }));
    let old = inner.list_pending_approvals().unwrap();
    assert_eq!(old.len(), 1, "{old:?}");
    let old = old[0].id.clone();

    app.submit_follow_up(THREAD, &Case::update().amount(7), Multitask::Rollback, "agent").unwrap();
    let stop = CancellationToken::new();
    let worker = Worker::new(app.clone(), Arc::clone(&counts)).poll_interval(Duration::from_millis(10));
    let handle = tokio::spawn(worker.run(stop.clone()));
    let status = |id: &str| inner.approval(id).unwrap().map(|a| a.status);
    wait_until("the replaced branch's request is cancelled", LIMIT, || {
        died.load(Ordering::SeqCst) && status(&old) == Some(ApprovalStatus::Cancelled)
    })
    .await;
    // The new branch asks for its own refund, which stays.
    wait_until("the new branch asks", LIMIT, || {
        inner.list_pending_approvals().unwrap().iter().any(|a| a.id != old && a.args.contains('7'))
    })
    .await;
    stop.cancel();
    handle.await.unwrap().unwrap();
    assert_eq!(status(&old), Some(ApprovalStatus::Cancelled));
    let kinds: Vec<String> = inner.list_audit(THREAD).unwrap().into_iter().map(|e| e.kind).collect();
    assert_eq!(kinds.iter().filter(|k| *k == "run.follow_up").count(), 1, "{kinds:?}");
}
