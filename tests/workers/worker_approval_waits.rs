//! Workers and threads parked for an approval: claimed when the approval expires or is decided,
//! not held by an old branch's unknown outcome, and a cancel asked as the run parks.

use crate::support::hooked_store;
use crate::support::pg;
use crate::support::stores::store as redb;
use crate::worker_naps::*;
use agentflow::persist::ThreadStatus;
use agentflow::prelude::*;
use agentflow::{CancellationToken, Store};
use agentflow::{Worker, WorkerError, WorkerReport};
use agentflow_store::{RunWait, Settle};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

// ------------------------------------------------------------ approvals that expire

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
pub struct Refund {
    pub order: String,
    pub receipt: Option<serde_json::Value>,
    pub escalated_to: Option<String>,
}

static REFUNDS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

#[derive(Deserialize, schemars::JsonSchema)]
pub struct RefundArgs {
    order_id: String,
}

/// Refunds an order. Irreversible, so the default policy asks a human first.
#[tool(risk = irreversible)]
async fn issue_refund(args: RefundArgs) -> Result<serde_json::Value, ToolError> {
    REFUNDS.fetch_add(1, Ordering::SeqCst);
    Ok(serde_json::json!({ "refunded": args.order_id }))
}

#[graph(state = Refund, start = refund)]
mod refunding {
    use super::*;

    /// Asks for the refund; when nobody decided in time, escalates.
    #[node(goto = [escalate, END], tools = [issue_refund])]
    async fn refund(s: &Refund, cx: &Ctx<()>) -> Result<Step<Refund>, NodeError> {
        let obs = cx.run_tool(issue_refund, serde_json::json!({ "order_id": s.order })).await?;
        if obs.code() == Some(agentflow::tool::Code::ApprovalExpired) {
            return Ok(goto!(escalate));
        }
        Ok(goto!(END, Refund::update().receipt(Some(obs.body))))
    }

    #[node(goto = [END])]
    async fn escalate(_s: &Refund) -> Step<Refund> {
        goto!(END, Refund::update().escalated_to(Some("on-call manager".to_string())))
    }
}

/// Nobody decides and no scheduler runs: the worker claims the parked run at the approval's
/// expiry, the call resolves as `APPROVAL_EXPIRED` and the node escalates; the refund never ran.
async fn an_expiring_approval_is_claimed_when_it_expires(store: Arc<dyn Store>, thread: &str) {
    const TTL_MS: u64 = 800;
    // Until the checks below are made, no claim sees the approval expired: it expires after the cap.
    let (hooked, cap) = claims_held_at(Arc::clone(&store), agentflow::timer::now_ms() + TTL_MS - 1);
    let app = refunding::graph().app().store(hooked).approval_ttl(Duration::from_millis(TTL_MS));
    app.submit_as(thread, &Refund { order: format!("{thread}-order"), ..Refund::default() }, "support-bot").unwrap();
    let stop = CancellationToken::new();
    let worker = Worker::new(app.clone(), Arc::new(())).poll_interval(Duration::from_millis(10));
    let handle = tokio::spawn(worker.run(stop.clone()));
    wait_until("the run parks for its approval", || {
        app.live_runs().unwrap().iter().any(|r| r.thread == thread && r.wait == RunWait::Approval && r.lease.is_none())
    })
    .await;
    let approvals = store.list_approvals(thread).unwrap();
    assert_eq!(approvals.len(), 1, "{approvals:?}");
    let expires_at = approvals[0].expires_at;
    assert_eq!(store.thread_timer(thread).unwrap(), Some(expires_at));
    cap.store(u64::MAX, Ordering::SeqCst);
    wait_until("the run leaves the queue", || app.live_runs().unwrap().iter().all(|r| r.thread != thread)).await;
    stop.cancel();
    let report = handle.await.unwrap().unwrap();
    assert!(agentflow::timer::now_ms() >= expires_at);
    let record = app.thread(thread).unwrap().unwrap();
    assert_eq!(record.status, ThreadStatus::Completed, "{}", record.detail);
    let state = app.state(thread).unwrap().unwrap().state;
    assert_eq!((state.escalated_to.as_deref(), state.receipt), (Some("on-call manager"), None));
    let approval = store.approval(&approvals[0].id).unwrap().unwrap();
    assert_eq!(approval.status, agentflow_store::ApprovalStatus::Expired);
    assert_eq!((report.claimed, report.interrupted, report.completed, report.failed), (2, 1, 1, 0), "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redb_a_run_parked_for_an_approval_is_claimed_when_the_approval_expires() {
    an_expiring_approval_is_claimed_when_it_expires(redb(), "expiring-redb").await;
    assert_eq!(REFUNDS.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_run_parked_for_an_approval_is_claimed_when_the_approval_expires() {
    let Some(url) = pg::pg_url() else { return };
    an_expiring_approval_is_claimed_when_it_expires(postgres(&url, "expiry"), "expiring-pg").await;
    assert_eq!(REFUNDS.load(Ordering::SeqCst), 0);
}

/// A worker-queued run parked for its approval, beside an `OUTCOME_UNKNOWN` record of the same
/// thread (a call of the branch cut off earlier): forked, the thread runs its new branch afresh.
/// The fork cancels the open request and hands the parked run back to the workers: the record
/// left for a human no longer keeps it parked (it did, for good, while nothing settled it). The
/// new branch asks for its own approval; the record still waits for a human.
async fn a_forked_thread_is_not_held_by_its_old_branchs_unknown_outcome(store: Arc<dyn Store>, thread: &str) {
    use agentflow_store::ApprovalStatus;

    let app = refunding::graph().app().store(Arc::clone(&store));
    let (stop, handle) = parked_for_its_approval(&app, thread, &format!("{thread}-order")).await;
    let parked = || parked_on_approvals(&app, thread);
    let (first, unknown) = asked_beside_an_unknown_outcome(&*store, thread);

    let seq = app.history(thread).unwrap().first().expect("a checkpoint").seq;
    app.fork(thread, seq, "ops").unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let asked_anew = loop {
        let asked: Vec<_> = store
            .list_approvals(thread)
            .unwrap()
            .into_iter()
            .filter(|a| a.status == ApprovalStatus::Pending && a.id != first.id)
            .collect();
        if !asked.is_empty() {
            break asked;
        }
        assert!(std::time::Instant::now() < deadline, "no worker ran the forked thread: {:?}", app.live_runs());
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(asked_anew.len(), 1, "{asked_anew:?}");
    wait_until("the new branch parks for its own approval", parked).await;
    stop.cancel();
    handle.await.unwrap().unwrap();
    assert_eq!(store.approval(&first.id).unwrap().unwrap().status, ApprovalStatus::Cancelled);
    assert_eq!(store.approval(&unknown.id).unwrap().unwrap().status, ApprovalStatus::OutcomeUnknown);
    assert_eq!(REFUNDS.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redb_a_forked_thread_is_not_held_by_its_old_branchs_unknown_outcome() {
    a_forked_thread_is_not_held_by_its_old_branchs_unknown_outcome(redb(), "forked-redb").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_forked_thread_is_not_held_by_its_old_branchs_unknown_outcome() {
    let Some(url) = pg::pg_url() else { return };
    a_forked_thread_is_not_held_by_its_old_branchs_unknown_outcome(postgres(&url, "forked"), "forked-pg").await;
}

/// The orders `pay_out` paid, one entry per payment.
static PAID: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// Pays an order out. Irreversible, so the default policy asks a human first.
#[tool(risk = irreversible)]
async fn pay_out(args: RefundArgs) -> Result<serde_json::Value, ToolError> {
    PAID.lock().unwrap().push(args.order_id.clone());
    Ok(serde_json::json!({ "paid": args.order_id }))
}

#[graph(state = Refund, start = pay)]
mod paying {
    use super::*;

    #[node(goto = [END], tools = [pay_out])]
    async fn pay(s: &Refund, cx: &Ctx<()>) -> Result<Step<Refund>, NodeError> {
        let obs = cx.run_tool(pay_out, serde_json::json!({ "order_id": s.order })).await?;
        Ok(goto!(END, Refund::update().receipt(Some(obs.body))))
    }
}

/// A run parked for its approval is claimed as soon as that approval is decided, even when the
/// thread holds another record still waiting for a human that the run does not wait on (an
/// outcome left unknown by an earlier step, to settle). It waited until the approval's expiry
/// before, which then refused the approved call as expired.
async fn a_decided_approval_wakes_its_run_past_an_unrelated_waiting_record(store: Arc<dyn Store>, thread: &str) {
    use agentflow::approval::{ApprovalDesk, Approver, RoleAuthorizer};
    use agentflow::tool::Risk;
    use agentflow_store::ApprovalStatus;

    let app = paying::graph().app().store(Arc::clone(&store));
    let order = format!("{thread}-order");
    let (stop, handle) = parked_for_its_approval(&app, thread, &order).await;
    let (asked, unrelated) = asked_beside_an_unknown_outcome(&*store, thread);
    let desk = ApprovalDesk::for_store(Arc::clone(&store), RoleAuthorizer::new().role_for(Risk::Irreversible, "ops"));
    desk.approve(&asked.id, &Approver::new("alice", ["ops"])).unwrap();
    wait_until("the approved run completes", || app.live_runs().unwrap().iter().all(|r| r.thread != thread)).await;
    stop.cancel();
    handle.await.unwrap().unwrap();
    let state = app.state(thread).unwrap().unwrap().state;
    assert_eq!(state.receipt, Some(serde_json::json!({ "ok": true, "result": { "paid": order } })));
    assert_eq!(PAID.lock().unwrap().iter().filter(|o| **o == order).count(), 1);
    assert_eq!(store.approval(&unrelated.id).unwrap().unwrap().status, ApprovalStatus::OutcomeUnknown);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redb_a_decided_approval_wakes_its_run_past_an_unrelated_waiting_record() {
    a_decided_approval_wakes_its_run_past_an_unrelated_waiting_record(redb(), "unrelated-redb").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_decided_approval_wakes_its_run_past_an_unrelated_waiting_record() {
    let Some(url) = pg::pg_url() else { return };
    a_decided_approval_wakes_its_run_past_an_unrelated_waiting_record(postgres(&url, "unrelated"), "unrelated-pg")
        .await;
}

/// The one request thread `thread` waits on, and an `OUTCOME_UNKNOWN` record stored beside it
/// (an earlier call cut off mid-way, left for a human to settle) that the run does not wait on.
fn asked_beside_an_unknown_outcome(
    store: &dyn Store,
    thread: &str,
) -> (agentflow_store::ApprovalRecord, agentflow_store::ApprovalRecord) {
    let asked = store.list_approvals(thread).unwrap();
    assert_eq!(asked.len(), 1, "{asked:?}");
    let now = agentflow::timer::now_ms();
    let unknown = agentflow_store::ApprovalRecord {
        id: format!("unk-{thread}"),
        status: agentflow_store::ApprovalStatus::OutcomeUnknown,
        reason: "an earlier call was cut off mid-way".into(),
        created_at: now,
        updated_at: now,
        expires_at: now + 3_600_000,
        ..asked[0].clone()
    };
    store.put_approval(unknown.clone(), "agentflow").unwrap();
    (asked.into_iter().next().unwrap(), unknown)
}

/// Whether thread `thread`'s run is queued, parked for approvals, with no lease held.
fn parked_on_approvals(app: &App<Refund, ()>, thread: &str) -> bool {
    app.live_runs().unwrap().iter().any(|r| r.thread == thread && r.wait == RunWait::Approval && r.lease.is_none())
}

/// Submits a refund of `order` as thread `thread` and starts a worker, which runs it until it
/// parks for its approval; returns the worker's stop token and task.
async fn parked_for_its_approval(
    app: &App<Refund, ()>,
    thread: &str,
    order: &str,
) -> (CancellationToken, tokio::task::JoinHandle<Result<WorkerReport, WorkerError>>) {
    app.submit_as(thread, &Refund { order: order.to_string(), ..Refund::default() }, "support-bot").unwrap();
    let stop = CancellationToken::new();
    let worker = Worker::new(app.clone(), Arc::new(())).poll_interval(Duration::from_millis(10));
    let handle = tokio::spawn(worker.run(stop.clone()));
    wait_until("the run parks for its approval", || parked_on_approvals(app, thread)).await;
    (stop, handle)
}

/// A cancel asked in the instant after the run stopped to wait for its value, before its worker
/// parked the queue row: the worker never saw it, so the row stays claimable and the next claim
/// ends the thread cancelled (the parked row used to drop the request: the cancel was reported
/// as set, and the thread kept waiting, out of the queue).
async fn a_cancel_asked_as_the_run_parks_is_not_lost(inner: Arc<dyn Store>) {
    let asked = Arc::new(AtomicBool::new(false));
    let mut store = hooked_store::Hooked::new(Arc::clone(&inner));
    store.before_settle = Some({
        let (inner, asked) = (Arc::clone(&inner), Arc::clone(&asked));
        Box::new(move |_: &dyn Store, thread: &str, _: &str, settle: &Settle| {
            if settle.park != Some(RunWait::Answer) || asked.swap(true, Ordering::SeqCst) {
                return;
            }
            let controller = naps::graph().app().store(Arc::clone(&inner));
            assert!(controller.cancel_run(thread).unwrap(), "queued: the request is set");
        })
    });
    let app = naps::graph().app().store(Arc::new(store) as Arc<dyn Store>);
    app.submit("ask", &Nap { ask: true, ..Nap::default() }).unwrap();
    let (stop, handle) = start(&app, ());
    wait_until("the run leaves the queue", || asked.load(Ordering::SeqCst) && app.live_runs().unwrap().is_empty())
        .await;
    stop.cancel();
    let report = handle.await.unwrap().unwrap();
    let record = app.thread("ask").unwrap().unwrap();
    assert_eq!(record.status, ThreadStatus::Cancelled, "the cancel was kept: {}", record.detail);
    assert_eq!((report.claimed, report.interrupted, report.controlled), (2, 1, 1), "{report:?}");
    let kinds: Vec<String> = inner.list_audit("ask").unwrap().into_iter().map(|e| e.kind).collect();
    assert!(kinds.iter().any(|k| k == "run.cancel_requested"), "{kinds:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redb_a_cancel_asked_as_the_run_parks_is_not_lost() {
    a_cancel_asked_as_the_run_parks_is_not_lost(redb()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_cancel_asked_as_the_run_parks_is_not_lost() {
    let Some(url) = pg::pg_url() else { return };
    a_cancel_asked_as_the_run_parks_is_not_lost(postgres(&url, "cancel_parks")).await;
}
