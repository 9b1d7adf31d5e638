//! Workers and a parent thread whose subgraph waits for an approval. The approval belongs to
//! the child thread (`{parent}/{node}`), the run queued is the parent's: it must stay parked,
//! claimed by no worker, until the child's approval is decided (then it finishes once) or
//! expires (then the child's call resolves as `APPROVAL_EXPIRED`). On `RedbStore`, and the
//! decided case on `PostgresStore` too (skipped with one line without `AGENTFLOW_PG_URL`).

use crate::support::hooked_store;
use crate::support::pg;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use agentflow::approval::{Approver, RoleAuthorizer};
use agentflow::persist::ThreadStatus;
use agentflow::prelude::*;
use agentflow::tool::Risk;
use agentflow::{CancellationToken, RedbStore, Store, Worker};
use agentflow_store::{PostgresStore, RunWait};
use serde_json::json;

use crate::support::refund_subgraph;
use refund_subgraph::{Case, Counts, support};

async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(60), "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn a_parent_waiting_on_its_childs_approval_stays_parked(store: Arc<dyn Store>, thread: &str) {
    let app = support::graph().app().store(Arc::clone(&store));
    let counts = Arc::new(Counts::default());
    app.submit_as(thread, &Case { amount: 40, outcome: None }, "agent").unwrap();
    let stop = CancellationToken::new();
    let worker = Worker::new(app.clone(), Arc::clone(&counts)).poll_interval(Duration::from_millis(10));
    let handle = tokio::spawn(worker.run(stop.clone()));
    let parked = |app: &App<Case, Counts>| {
        app.live_runs()
            .unwrap()
            .into_iter()
            .find(|r| r.thread == thread && r.wait == RunWait::Approval && r.lease.is_none())
    };
    wait_until("the parent parks for its child's approval", || parked(&app).is_some()).await;
    let claims = parked(&app).unwrap().claims;
    let approvals = store.list_pending_approvals().unwrap();
    assert_eq!(approvals.len(), 1, "{approvals:?}");
    assert!(approvals[0].thread.starts_with(&format!("{thread}/settle")), "the child's: {}", approvals[0].thread);
    // Fifty polls later nobody has claimed it again: the approval still waits.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let still = parked(&app).expect("still parked");
    assert_eq!(still.claims, claims, "claimed again while the child's approval waited");

    let desk = app.approvals(RoleAuthorizer::new().role_for(Risk::Irreversible, "approver")).unwrap();
    desk.approve(&approvals[0].id, &Approver::new("alice", ["approver"])).unwrap();
    wait_until("the parent finishes", || app.live_runs().unwrap().iter().all(|r| r.thread != thread)).await;
    stop.cancel();
    let report = handle.await.unwrap().unwrap();
    let record = app.thread(thread).unwrap().unwrap();
    assert_eq!(record.status, ThreadStatus::Completed, "{}", record.detail);
    assert_eq!(
        app.state(thread).unwrap().unwrap().state.outcome,
        Some(json!({ "ok": true, "result": { "refunded": 40 } }))
    );
    assert_eq!(counts.refunds.load(Ordering::SeqCst), 1);
    assert_eq!((report.claimed, report.interrupted, report.completed, report.failed), (2, 1, 1, 0), "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redb_a_parent_waiting_on_its_childs_approval_is_not_claimed_until_it_is_decided() {
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().expect("in-memory store"));
    a_parent_waiting_on_its_childs_approval_stays_parked(store, "case-redb").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_parent_waiting_on_its_childs_approval_is_not_claimed_until_it_is_decided() {
    let Some(url) = pg::pg_url() else { return };
    let schema = format!("worker_subgraph_{}", std::process::id());
    let store: Arc<dyn Store> =
        Arc::new(PostgresStore::builder().schema(&schema).open(&url).expect("open the PostgreSQL store"));
    a_parent_waiting_on_its_childs_approval_stays_parked(store, "case-pg").await;
}

/// Nobody decides the child's approval and no scheduler runs: the parent, parked, is claimed
/// when the approval expires; the child's call resolves as `APPROVAL_EXPIRED`, nothing is
/// refunded, and the parent completes with that observation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_is_claimed_when_its_childs_approval_expires() {
    const TTL_MS: u64 = 800;
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().expect("in-memory store"));
    // Until the approval was looked at, no claim sees it expired: the clock of claims stops
    // before it expires (the claim of a ready row does not look at the time), however slowly
    // this test goes.
    let cap = Arc::new(AtomicU64::new(agentflow::timer::now_ms() + TTL_MS - 1));
    let mut hooked = hooked_store::Hooked::new(Arc::clone(&store));
    hooked.claim_clock = Some({
        let cap = Arc::clone(&cap);
        Box::new(move |now: u64| now.min(cap.load(Ordering::SeqCst)))
    });
    let app =
        support::graph().app().store(Arc::new(hooked) as Arc<dyn Store>).approval_ttl(Duration::from_millis(TTL_MS));
    let counts = Arc::new(Counts::default());
    app.submit_as("expiring", &Case { amount: 40, outcome: None }, "agent").unwrap();
    let stop = CancellationToken::new();
    let worker = Worker::new(app.clone(), Arc::clone(&counts)).poll_interval(Duration::from_millis(10));
    let handle = tokio::spawn(worker.run(stop.clone()));
    wait_until("the parent parks", || {
        app.live_runs().unwrap().iter().any(|r| r.thread == "expiring" && r.wait == RunWait::Approval)
    })
    .await;
    let approval = store.list_pending_approvals().unwrap().pop().expect("the child's approval");
    cap.store(u64::MAX, Ordering::SeqCst);
    wait_until("the parent finishes", || app.live_runs().unwrap().is_empty()).await;
    stop.cancel();
    let report = handle.await.unwrap().unwrap();
    assert!(agentflow::timer::now_ms() >= approval.expires_at);
    let record = app.thread("expiring").unwrap().unwrap();
    assert_eq!(record.status, ThreadStatus::Completed, "{}", record.detail);
    let outcome = app.state("expiring").unwrap().unwrap().state.outcome.expect("the child's receipt");
    assert_eq!(outcome["ok"], json!(false), "{outcome}");
    assert!(outcome.to_string().contains("APPROVAL_EXPIRED"), "{outcome}");
    assert_eq!(store.approval(&approval.id).unwrap().unwrap().status, agentflow_store::ApprovalStatus::Expired);
    assert_eq!(counts.refunds.load(Ordering::SeqCst), 0);
    assert_eq!((report.claimed, report.completed, report.failed), (2, 1, 0), "{report:?}");
}
