//! An approved (or otherwise journaled) call runs as often as promised: a
//! run deadline or a node timeout lets a call in flight finish and records
//! it; a call cut off mid-way (the run dropped, standing in for a crash) is
//! an uncertain outcome: re-run with the same key only if the tool or effect
//! is idempotent, else the run pauses until a human settles it.

use crate::support::hooked_store;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentflow::approval::{ApprovalDesk, ApprovalStatus, Approver, RoleAuthorizer, Settlement};
use agentflow::prelude::*;
use agentflow::tool::{Decision, Risk, RiskPolicy};
use agentflow::{PendingKind, RedbStore, Run};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::Notify;

// ---------------------------------------------------------------- the outside world

/// Every call that reached a tool or effect body: (order, idempotency key).
static LEDGER: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

fn calls(order: &str) -> Vec<String> {
    LEDGER.lock().unwrap().iter().filter(|(o, _)| o == order).map(|(_, k)| k.clone()).collect()
}

/// One notifier per order: the body says "I acted" before it blocks.
fn acted(order: &str) -> Arc<Notify> {
    static MAP: Mutex<Option<HashMap<String, Arc<Notify>>>> = Mutex::new(None);
    MAP.lock().unwrap().get_or_insert_with(HashMap::new).entry(order.to_string()).or_default().clone()
}

/// Acts (records the call), then holds the call for `hold_ms`; with
/// `hold_ms` 0 the first call for an order never answers (the run is dropped
/// while it waits) and later ones answer at once.
async fn act(order: &str, key: &str, hold_ms: u64) {
    let first = {
        let mut ledger = LEDGER.lock().unwrap();
        let first = !ledger.iter().any(|(o, _)| o == order);
        ledger.push((order.to_string(), key.to_string()));
        first
    };
    acted(order).notify_one();
    if hold_ms == 0 && first {
        std::future::pending::<()>().await;
    }
    tokio::time::sleep(Duration::from_millis(hold_ms)).await;
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct Refund {
    order_id: String,
    /// How long the provider takes to answer; 0: never.
    hold_ms: u64,
}

/// Refunds an order. Irreversible, and the provider does not deduplicate.
#[tool(risk = irreversible)]
async fn refund(args: Refund, cx: &ToolCx) -> Result<Value, ToolError> {
    act(&args.order_id, cx.idempotency_key(), args.hold_ms).await;
    Ok(json!({ "refunded": args.order_id }))
}

/// Opens a ticket; the tracker drops a second request with the same key.
#[tool(risk = external, idempotent)]
async fn open_ticket(args: Refund, cx: &ToolCx) -> Result<Value, ToolError> {
    act(&args.order_id, cx.idempotency_key(), args.hold_ms).await;
    Ok(json!({ "ticket": args.order_id }))
}

/// Posts a note to the customer; a second request posts a second note.
#[tool(risk = external)]
async fn post_note(args: Refund, cx: &ToolCx) -> Result<Value, ToolError> {
    act(&args.order_id, cx.idempotency_key(), args.hold_ms).await;
    Ok(json!({ "posted": args.order_id }))
}

// ---------------------------------------------------------------- graphs

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Job {
    order: String,
    hold_ms: u64,
    receipt: Option<Value>,
}

fn job(order: &str, hold_ms: u64) -> Job {
    Job { order: order.into(), hold_ms, receipt: None }
}

fn args(s: &Job) -> Value {
    json!({ "order_id": s.order, "hold_ms": s.hold_ms })
}

#[graph(state = Job, deps = (), start = pay)]
mod refund_flow {
    use super::*;

    #[node(goto = [END], tools = [refund])]
    async fn pay(s: &Job, cx: &Ctx<()>) -> Result<Step<Job>, NodeError> {
        let obs = cx.run_tool(refund, args(s)).await?;
        Ok(goto!(END, Job::update().receipt(Some(obs.body))))
    }
}

#[graph(state = Job, deps = (), start = pay)]
mod timed_refund_flow {
    use super::*;

    /// A timeout a stall does not reach before the call starts, well short of the call's hold.
    #[node(goto = [END], tools = [refund], timeout = 1s, retry(attempts = 3, base = 1ms, jitter = false))]
    async fn pay(s: &Job, cx: &Ctx<()>) -> Result<Step<Job>, NodeError> {
        let obs = cx.run_tool(refund, args(s)).await?;
        Ok(goto!(END, Job::update().receipt(Some(obs.body))))
    }
}

#[graph(state = Job, deps = (), start = act)]
mod external_flow {
    use super::*;

    /// Both tools run without an approval (the policy lets external calls run).
    #[node(goto = [END], tools = [open_ticket, post_note])]
    async fn act(s: &Job, cx: &Ctx<()>) -> Result<Step<Job>, NodeError> {
        let ticket = cx.run_tool(open_ticket, args(s)).await?;
        let note =
            cx.run_tool(post_note, json!({ "order_id": format!("{}-note", s.order), "hold_ms": s.hold_ms })).await?;
        Ok(goto!(END, Job::update().receipt(Some(json!([ticket.body, note.body])))))
    }
}

#[graph(state = Job, deps = (), start = charge)]
mod effect_flow {
    use super::*;

    #[node(goto = [END])]
    async fn charge(s: &Job, cx: &Ctx<()>) -> Result<Step<Job>, NodeError> {
        let receipt: Value = cx
            .effect("charge", |key| async move {
                act(&s.order, &key, s.hold_ms).await;
                Ok::<_, NodeError>(json!({ "charged": s.order }))
            })
            .await?;
        Ok(goto!(END, Job::update().receipt(Some(receipt))))
    }
}

#[graph(state = Job, deps = (), start = charge)]
mod idempotent_effect_flow {
    use super::*;

    #[node(goto = [END])]
    async fn charge(s: &Job, cx: &Ctx<()>) -> Result<Step<Job>, NodeError> {
        let receipt: Value = cx
            .idempotent_effect("charge", |key| async move {
                act(&s.order, &key, s.hold_ms).await;
                Ok::<_, NodeError>(json!({ "charged": s.order }))
            })
            .await?;
        Ok(goto!(END, Job::update().receipt(Some(receipt))))
    }
}

// ---------------------------------------------------------------- helpers

const ROLE: &str = "ops";
const OWNER: &str = "agent:billing";

fn authorizer() -> RoleAuthorizer {
    RoleAuthorizer::new().role_for(Risk::Irreversible, ROLE).role_for(Risk::External, ROLE)
}

fn alice() -> Approver {
    Approver::new("alice", [ROLE])
}

/// A store file of its own; opening it again stands in for a new process.
fn db(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("agentflow-uncertain-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("store.redb")
}

fn open<S: State, D>(graph: CompiledGraph<S, D>, path: &PathBuf) -> App<S, D> {
    graph.app().store(Arc::new(RedbStore::open(path).expect("open store")))
}

fn pending_of<S>(run: &Run<S>) -> (PendingKind, String) {
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("not paused: {:?}", run.outcome) };
    assert_eq!(pending.len(), 1, "{pending:?}");
    (pending[0].kind, pending[0].payload["approval"].as_str().expect("a record id").to_string())
}

/// Runs `start` until the body acted, then drops the run mid-call: what a
/// crash right after the provider answered, before the journal heard, leaves.
async fn cut_off<F: std::future::Future>(order: &str, start: F) {
    let notify = acted(order);
    tokio::select! {
        _ = start => panic!("the run ended before its call acted"),
        () = notify.notified() => {}
    }
}

/// Starts the refund, approves it, and returns the desk.
async fn approved_refund<D: Sync>(graph: &App<Job, D>, deps: &D, thread: &str, hold_ms: u64) -> ApprovalDesk {
    let desk = graph.approvals(authorizer()).unwrap();
    let run = graph.runner(deps).thread(thread).owner(OWNER).run(job(thread, hold_ms)).await.unwrap();
    let (kind, id) = pending_of(&run);
    assert_eq!(kind, PendingKind::Approval);
    desk.approve(&id, &alice()).unwrap();
    desk
}

// ---------------------------------------------------------------- deadlines and timeouts

#[tokio::test]
async fn a_run_deadline_lets_an_approved_call_finish_and_resume_does_not_run_it_again() {
    let graph = refund_flow::graph().app().store(Arc::new(RedbStore::in_memory().unwrap()));
    let desk = approved_refund(&graph, &(), "U-deadline", 300).await;
    // The deadline falls while the refund is with the provider.
    let stopped = graph.runner(&()).thread("U-deadline").timeout(Duration::from_millis(60)).resume().await.unwrap();
    assert!(matches!(stopped.outcome, Outcome::BudgetExhausted { .. } | Outcome::Completed), "{:?}", stopped.outcome);
    let done = match stopped.outcome {
        Outcome::Completed => stopped,
        _ => graph.runner(&()).thread("U-deadline").resume().await.unwrap(),
    };
    assert_eq!(done.outcome, Outcome::Completed, "{:?}", done.outcome);
    assert_eq!(calls("U-deadline").len(), 1, "refunded once");
    let id = &desk.for_thread("U-deadline").unwrap()[0].id;
    assert_eq!(desk.get(id).unwrap().unwrap().status, ApprovalStatus::Succeeded);
}

#[tokio::test]
async fn a_node_timeout_with_retries_runs_an_approved_call_once() {
    let graph = timed_refund_flow::graph().app().store(Arc::new(RedbStore::in_memory().unwrap()));
    let desk = approved_refund(&graph, &(), "U-timeout", 2500).await;
    // The first attempt's 1 s timeout falls while the refund is with the provider (2.5 s).
    let done = graph.runner(&()).thread("U-timeout").resume().await.unwrap();
    assert_eq!(calls("U-timeout").len(), 1, "one refund for one approval");
    assert_eq!(done.outcome, Outcome::Completed, "{:?}", done.outcome);
    assert_eq!(done.state.receipt.unwrap()["result"]["refunded"], "U-timeout");
    let id = &desk.for_thread("U-timeout").unwrap()[0].id;
    assert_eq!(desk.get(id).unwrap().unwrap().status, ApprovalStatus::Succeeded);
}

// ---------------------------------------------------------------- cut off mid-call

/// Approves a refund that never answers, drops the run once the provider
/// acted, and reopens the store ("the next process"): the resume pauses as
/// an unknown outcome instead of refunding again.
async fn cut_off_refund(thread: &str) -> (PathBuf, String) {
    let path = db(thread);
    {
        let graph = open(refund_flow::graph(), &path);
        approved_refund(&graph, &(), thread, 0).await;
        cut_off(thread, graph.runner(&()).thread(thread).resume()).await;
    }
    let graph = open(refund_flow::graph(), &path);
    let run = graph.runner(&()).thread(thread).resume().await.unwrap();
    let (kind, id) = pending_of(&run);
    assert_eq!(kind, PendingKind::OutcomeUnknown);
    assert_eq!(calls(thread).len(), 1, "not refunded again");
    let desk = graph.approvals(authorizer()).unwrap();
    let record = desk.get(&id).unwrap().unwrap();
    assert_eq!((record.status, record.tool.as_str()), (ApprovalStatus::OutcomeUnknown, "refund"));
    assert!(desk.pending().unwrap().iter().any(|r| r.id == id), "listed for a human");
    assert_eq!(graph.pending(thread).unwrap()[0].kind, PendingKind::OutcomeUnknown);
    // Resuming again before anyone decided pauses again; still one refund.
    let again = graph.runner(&()).thread(thread).resume().await.unwrap();
    assert_eq!(pending_of(&again), (PendingKind::OutcomeUnknown, id.clone()));
    assert_eq!(calls(thread).len(), 1);
    (path, id)
}

#[tokio::test]
async fn an_approved_call_cut_off_mid_way_is_not_run_again_and_a_human_settles_it_as_succeeded() {
    let (path, id) = cut_off_refund("U-cut-ok").await;
    let graph = open(refund_flow::graph(), &path);
    let desk = graph.approvals(authorizer()).unwrap();
    // Nobody may call it a success without the role.
    assert!(desk.settle(&id, &Approver::new("mallory", ["intern"]), Settlement::RunAgain).is_err());
    // The provider's dashboard shows the refund went through.
    let settled = desk.settle(&id, &alice(), Settlement::Succeeded(json!({ "refunded": "U-cut-ok", "ref": "pp-1" })));
    assert_eq!(settled.unwrap().status, ApprovalStatus::Succeeded);
    let done = graph.runner(&()).thread("U-cut-ok").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed, "{:?}", done.outcome);
    assert_eq!(calls("U-cut-ok").len(), 1, "refunded once");
    assert_eq!(done.state.receipt.unwrap()["result"]["ref"], "pp-1", "the settled result reaches the node");
    let kinds: Vec<String> = graph.audit_log("U-cut-ok").unwrap().into_iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        [
            "approval.requested",
            "approval.approved",
            "approval.executing",
            "approval.outcome_unknown",
            "approval.succeeded"
        ]
    );
}

/// A circuit breaker that opened while an approved call was cut off mid-way does not settle
/// the call: the resume does not answer `CIRCUIT_OPEN` ("the tool did not run") nor mark the
/// approval `FAILED` (which would let the model ask for, and run, the refund again). The call
/// waits for a human as without a breaker, and is not run again.
#[tokio::test]
async fn an_open_breaker_leaves_an_approved_call_cut_off_mid_way_to_a_human() {
    use agentflow::breaker::Breaker;
    use agentflow_store::{BreakerOp, BreakerRule, BreakerUpdate};

    let thread = "U-cut-breaker";
    let path = db(thread);
    let guarded = |path: &PathBuf| {
        // The dropped call reports its failure to the breaker from a task of its own, which
        // holds the file until it is done: the next process opens it after that.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let store: Arc<dyn agentflow::Store> = loop {
            match RedbStore::open(path) {
                Ok(store) => break Arc::new(store),
                Err(e) if std::time::Instant::now() < deadline => {
                    eprintln!("waiting for the file: {e}");
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => panic!("open store: {e}"),
            }
        };
        let app = refund_flow::graph().app().store(Arc::clone(&store)).circuit_breaker("refund", Breaker::after(1));
        (store, app.expect("the graph lists the tool"))
    };
    {
        let (_, graph) = guarded(&path);
        approved_refund(&graph, &(), thread, 0).await;
        cut_off(thread, graph.runner(&()).thread(thread).resume()).await;
    }
    let (store, graph) = guarded(&path);
    // Meanwhile the provider failed for another thread: the breaker is open.
    let rule = BreakerRule::new(1, 60_000, 60_000);
    let now = agentflow::timer::now_ms();
    let fail = BreakerUpdate::new("refund", BreakerOp::Failed, "elsewhere", rule, now, "other", "test");
    let opened = store.update_breaker(fail).unwrap().record;
    assert!(opened.open_until > now, "{opened:?}");

    let run = graph.runner(&()).thread(thread).resume().await.unwrap();
    let (kind, id) = pending_of(&run);
    assert_eq!(kind, PendingKind::OutcomeUnknown, "{:?}", run.outcome);
    let desk = graph.approvals(authorizer()).unwrap();
    assert_eq!(desk.get(&id).unwrap().unwrap().status, ApprovalStatus::OutcomeUnknown);
    assert_eq!(calls(thread).len(), 1, "not refunded again");

    // Settled by a human, the run completes with the settled result; still one refund.
    desk.settle(&id, &alice(), Settlement::Succeeded(json!({ "refunded": thread }))).unwrap();
    let done = graph.runner(&()).thread(thread).resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed, "{:?}", done.outcome);
    assert_eq!(calls(thread).len(), 1);
}

/// A settled result the run could not read back (nested deeper than JSON is read) is refused
/// at the desk, and the record still waits: settled with a value that reads back, the run
/// completes with it. (Recorded, it would have failed every resume of the thread for good.)
#[tokio::test]
async fn a_settled_result_that_would_not_read_back_is_refused_and_the_record_still_waits() {
    let (path, id) = cut_off_refund("U-cut-deep").await;
    let graph = open(refund_flow::graph(), &path);
    let desk = graph.approvals(authorizer()).unwrap();
    let mut deep = json!("bottom");
    for _ in 0..200 {
        deep = json!([deep]);
    }
    let refused = desk.settle(&id, &alice(), Settlement::Succeeded(deep)).unwrap_err();
    assert!(matches!(refused, agentflow::approval::DecisionError::InvalidResult { .. }), "{refused}");
    assert!(refused.to_string().contains("nests deeper than"), "{refused}");
    assert_eq!(desk.get(&id).unwrap().unwrap().status, ApprovalStatus::OutcomeUnknown);
    desk.settle(&id, &alice(), Settlement::Succeeded(json!({ "refunded": "U-cut-deep" }))).unwrap();
    let done = graph.runner(&()).thread("U-cut-deep").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed, "{:?}", done.outcome);
    assert_eq!(done.state.receipt.unwrap()["result"]["refunded"], "U-cut-deep");
    assert_eq!(calls("U-cut-deep").len(), 1);
}

/// Whether `pay` skips the refund (the model took another path on resume).
#[derive(Default)]
pub struct Route {
    skip: std::sync::atomic::AtomicBool,
}

#[graph(state = Job, deps = Route, start = pay)]
mod maybe_refund_flow {
    use super::*;

    #[node(goto = [END], tools = [refund])]
    async fn pay(s: &Job, cx: &Ctx<Route>) -> Result<Step<Job>, NodeError> {
        if cx.deps().skip.load(std::sync::atomic::Ordering::SeqCst) {
            return Ok(goto!(END, Job::update().receipt(Some(json!("skipped")))));
        }
        let obs = cx.run_tool(refund, args(s)).await?;
        Ok(goto!(END, Job::update().receipt(Some(obs.body))))
    }
}

/// An approved call cut off mid-way, then a resumed step that finishes without making it
/// again, and the process dies right after that step's commit: the approval is
/// `OUTCOME_UNKNOWN`, listed for a human, not left `EXECUTING` for good (where no later step
/// would ever look at it, and no one would be asked).
#[tokio::test]
async fn a_crash_right_after_the_step_that_dropped_a_cut_off_call_still_leaves_it_to_a_human() {
    use std::sync::atomic::{AtomicBool, Ordering};

    let thread = "U-cut-crash";
    let path = db(thread);
    let on = |store: hooked_store::Hooked| maybe_refund_flow::graph().app().store(Arc::new(store));
    let deps = Route::default();
    {
        let inner = Arc::new(RedbStore::open(&path).expect("open store"));
        let graph = on(hooked_store::Hooked::new(inner));
        approved_refund(&graph, &deps, thread, 0).await;
        cut_off(thread, graph.runner(&deps).thread(thread).resume()).await;
    }
    {
        // The next process: the model takes another path, and the process dies as soon as the
        // step's commit returns (nothing it would write after that is written).
        let crashed = Arc::new(AtomicBool::new(false));
        let mut store = hooked_store::Hooked::new(Arc::new(RedbStore::open(&path).expect("open store")));
        let flag = Arc::clone(&crashed);
        store.after_checkpoint = Some(Box::new(move || flag.store(true, Ordering::SeqCst)));
        let flag = Arc::clone(&crashed);
        store.before_transition = Some(Box::new(move |id, _, _| {
            flag.load(Ordering::SeqCst).then(|| agentflow_store::ApprovalError::NotFound { id: id.to_string() })
        }));
        let graph = on(store);
        deps.skip.store(true, Ordering::SeqCst);
        let run = graph.runner(&deps).thread(thread).resume().await.unwrap();
        assert_eq!(run.outcome, Outcome::Completed, "{:?}", run.outcome);
        assert!(crashed.load(Ordering::SeqCst));
    }
    let graph = open(refund_flow::graph(), &path);
    let desk = graph.approvals(authorizer()).unwrap();
    let record = desk.for_thread(thread).unwrap().into_iter().find(|r| r.tool == "refund").expect("the approval");
    assert_eq!(record.status, ApprovalStatus::OutcomeUnknown, "{record:?}");
    assert!(desk.pending().unwrap().iter().any(|r| r.id == record.id), "listed for a human");
    assert_eq!(calls(thread).len(), 1);
}

/// The same step that drops a cut-off approved call, while the run that made the call (it
/// stalled past its lease) records the call's result just before the step commits: that record
/// stands (`SUCCEEDED`), and the step commits without moving it, instead of failing.
#[tokio::test]
async fn a_cut_off_call_whose_result_comes_in_as_the_step_commits_keeps_it_and_the_step_commits() {
    use std::sync::atomic::{AtomicBool, Ordering};

    let thread = "U-cut-race";
    let path = db(thread);
    let on = |store: hooked_store::Hooked| maybe_refund_flow::graph().app().store(Arc::new(store));
    let deps = Route::default();
    {
        let inner = Arc::new(RedbStore::open(&path).expect("open store"));
        let graph = on(hooked_store::Hooked::new(inner));
        approved_refund(&graph, &deps, thread, 0).await;
        cut_off(thread, graph.runner(&deps).thread(thread).resume()).await;
    }
    let mut store = hooked_store::Hooked::new(Arc::new(RedbStore::open(&path).expect("open store")));
    let raced = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&raced);
    store.before_checkpoint = Some(Box::new(move |inner: &dyn agentflow::Store| {
        if flag.swap(true, Ordering::SeqCst) {
            return;
        }
        for a in inner.list_approvals(thread).unwrap() {
            if a.status == ApprovalStatus::Executing {
                let patch = agentflow_store::ApprovalPatch::by("executor:stalled", agentflow::timer::now_ms());
                inner.transition_approval(&a.id, ApprovalStatus::Executing, ApprovalStatus::Succeeded, patch).unwrap();
            }
        }
    }));
    let graph = on(store);
    deps.skip.store(true, Ordering::SeqCst);
    let run = graph.runner(&deps).thread(thread).resume().await.unwrap();
    assert_eq!(run.outcome, Outcome::Completed, "{:?}", run.outcome);
    assert!(raced.load(Ordering::SeqCst));
    let desk = graph.approvals(authorizer()).unwrap();
    let record = desk.for_thread(thread).unwrap().into_iter().find(|r| r.tool == "refund").expect("the approval");
    assert_eq!(record.status, ApprovalStatus::Succeeded, "{record:?}");
    assert_eq!(calls(thread).len(), 1);
}

#[tokio::test]
async fn a_cut_off_call_settled_as_failed_is_reported_failed_and_never_run() {
    let (path, id) = cut_off_refund("U-cut-failed").await;
    let graph = open(refund_flow::graph(), &path);
    let desk = graph.approvals(authorizer()).unwrap();
    desk.settle(&id, &alice(), Settlement::Failed("the provider has no such refund".into())).unwrap();
    let done = graph.runner(&()).thread("U-cut-failed").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed, "{:?}", done.outcome);
    assert_eq!(calls("U-cut-failed").len(), 1);
    let receipt = done.state.receipt.unwrap();
    assert_eq!(receipt["ok"], false, "{receipt}");
    assert!(receipt["detail"].as_str().unwrap().contains("the provider has no such refund"), "{receipt}");
}

#[tokio::test]
async fn a_cut_off_call_settled_as_run_again_runs_once_more_with_the_same_key() {
    let (path, id) = cut_off_refund("U-cut-again").await;
    let graph = open(refund_flow::graph(), &path);
    let desk = graph.approvals(authorizer()).unwrap();
    let record = desk.settle(&id, &alice(), Settlement::RunAgain).unwrap();
    assert_eq!(record.status, ApprovalStatus::Approved);
    let done = graph.runner(&()).thread("U-cut-again").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed, "{:?}", done.outcome);
    assert_eq!(desk.get(&id).unwrap().unwrap().status, ApprovalStatus::Succeeded);
    let keys = calls("U-cut-again");
    assert_eq!(keys.len(), 2, "run again, by a human's decision: {keys:?}");
    assert_eq!(keys[0], keys[1], "with the same idempotency key");
}

#[tokio::test]
async fn without_an_approval_an_idempotent_tool_reruns_with_the_same_key_and_any_other_waits() {
    let thread = "U-external";
    let path = db(thread);
    let policy = || RiskPolicy::default().risk(Risk::External, Decision::Run);
    {
        let graph = open(external_flow::graph(), &path).policy(policy());
        cut_off(thread, graph.runner(&()).thread(thread).owner(OWNER).run(job(thread, 0))).await;
    }
    // The ticket tool is idempotent: run again with the same key, in the audit log.
    let graph = open(external_flow::graph(), &path).policy(policy());
    let second = format!("{thread}-note");
    cut_off(&second, graph.runner(&()).thread(thread).resume()).await;
    let keys = calls(thread);
    assert_eq!(keys.len(), 2, "{keys:?}");
    assert_eq!(keys[0], keys[1]);
    let log = graph.audit_log(thread).unwrap();
    let rerun = log.iter().find(|e| e.kind == "effect.rerun").expect("the re-run is audited");
    assert_eq!(rerun.detail["idempotency_key"], keys[0].as_str());
    drop(graph);

    // The note tool is not: its cut-off call waits for a human, on a record of its own.
    let graph = open(external_flow::graph(), &path).policy(policy());
    let run = graph.runner(&()).thread(thread).resume().await.unwrap();
    let (kind, id) = pending_of(&run);
    assert_eq!(kind, PendingKind::OutcomeUnknown);
    assert_eq!(calls(&second).len(), 1, "the note was not posted again");
    let desk = graph.approvals(authorizer()).unwrap();
    let record = desk.get(&id).unwrap().unwrap();
    assert_eq!((record.tool.as_str(), record.risk.as_str()), ("post_note", "external"));
    desk.settle(&id, &alice(), Settlement::Succeeded(json!({ "posted": second }))).unwrap();
    let done = graph.runner(&()).thread(thread).resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed, "{:?}", done.outcome);
    assert_eq!(calls(&second).len(), 1);
    assert_eq!(done.state.receipt.unwrap()[1]["result"]["posted"], second.as_str());
}

// ---------------------------------------------------------------- effects

#[tokio::test]
async fn an_effect_cut_off_mid_way_waits_for_a_human_and_takes_the_settled_result() {
    let thread = "U-effect";
    let path = db(thread);
    {
        let graph = open(effect_flow::graph(), &path);
        cut_off(thread, graph.runner(&()).thread(thread).owner(OWNER).run(job(thread, 0))).await;
    }
    let graph = open(effect_flow::graph(), &path);
    let run = graph.runner(&()).thread(thread).resume().await.unwrap();
    let (kind, id) = pending_of(&run);
    assert_eq!(kind, PendingKind::OutcomeUnknown);
    assert_eq!(calls(thread).len(), 1, "the effect was not run again");
    let desk = graph.approvals(authorizer()).unwrap();
    let record = desk.get(&id).unwrap().unwrap();
    assert_eq!((record.tool.as_str(), record.args.as_str()), ("effect", r#"{"key":"charge"}"#));
    desk.settle(&id, &alice(), Settlement::Succeeded(json!({ "charged": "by hand" }))).unwrap();
    let done = graph.runner(&()).thread(thread).resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed, "{:?}", done.outcome);
    assert_eq!(done.state.receipt, Some(json!({ "charged": "by hand" })));
    assert_eq!(calls(thread).len(), 1);
}

/// The `OUTCOME_UNKNOWN` record of an effect cut off mid-way is written fenced by the lease of
/// the run that finds it: a run that lost the thread just before records nothing (the holder's
/// run records it).
#[tokio::test]
async fn a_run_that_lost_the_thread_records_no_unknown_outcome_for_a_cut_off_effect() {
    use agentflow::Store;
    let thread = "U-effect-stale";
    let path = db(thread);
    {
        let graph = open(effect_flow::graph(), &path);
        cut_off(thread, graph.runner(&()).thread(thread).owner(OWNER).run(job(thread, 0))).await;
    }
    let inner: Arc<dyn Store> = Arc::new(RedbStore::open(&path).expect("open store"));
    let mut store = hooked_store::Hooked::new(Arc::clone(&inner));
    // Another executor takes the thread (this run's lease lapsed) right before the record.
    store.before_effects = Some(Box::new(|inner, batch| {
        if !batch.new_approvals.is_empty() {
            let later = agentflow::timer::now_ms() + 3_600_000;
            inner.acquire_lease(&batch.thread, "other-executor", 60_000, later).expect("the other executor");
        }
        Ok(())
    }));
    let graph = effect_flow::graph().app().store(Arc::new(store));
    let run = graph.runner(&()).thread(thread).resume().await;
    let said = match &run {
        Ok(run) => format!("{:?}", run.outcome),
        Err(e) => e.to_string(),
    };
    assert!(said.contains("no longer holds") || said.contains("was lost"), "{said}");
    let records = inner.list_approvals(thread).unwrap();
    assert!(records.is_empty(), "the stale run recorded {records:?}");
    assert_eq!(calls(thread).len(), 1, "the effect was not run again");
}

/// An effect cut off mid-way, then resumed: the run pauses on its `OUTCOME_UNKNOWN` record.
async fn effect_left_unknown(thread: &str) -> (Arc<RedbStore>, App<Job, ()>, String) {
    let path = db(thread);
    {
        let graph = open(effect_flow::graph(), &path);
        cut_off(thread, graph.runner(&()).thread(thread).owner(OWNER).run(job(thread, 0))).await;
    }
    let store = Arc::new(RedbStore::open(&path).expect("open store"));
    let graph = effect_flow::graph().app().store(Arc::clone(&store) as Arc<dyn agentflow::Store>);
    let run = graph.runner(&()).thread(thread).resume().await.unwrap();
    let (kind, id) = pending_of(&run);
    assert_eq!(kind, PendingKind::OutcomeUnknown);
    (store, graph, id)
}

#[tokio::test]
async fn an_effect_settled_as_run_again_through_the_desk_runs_once_more() {
    let thread = "U-effect-again";
    let (_store, graph, id) = effect_left_unknown(thread).await;
    graph.approvals(authorizer()).unwrap().settle(&id, &alice(), Settlement::RunAgain).unwrap();
    let done = graph.runner(&()).thread(thread).resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed, "{:?}", done.outcome);
    assert_eq!(calls(thread).len(), 2);
}

/// "Run again" written around the desk (a raw store transition with no decider) runs nothing.
#[tokio::test]
async fn an_effect_moved_to_run_again_without_a_decider_is_not_run_again() {
    use agentflow::Store;
    let thread = "U-effect-forged";
    let (store, graph, id) = effect_left_unknown(thread).await;
    let patch = agentflow_store::ApprovalPatch::by("script", 1);
    store.transition_approval(&id, ApprovalStatus::OutcomeUnknown, ApprovalStatus::Approved, patch).unwrap();
    let run = graph.runner(&()).thread(thread).resume().await.unwrap();
    assert_eq!(calls(thread).len(), 1, "the effect ran again on a decision nobody made through the desk");
    let Outcome::Failed { error, .. } = &run.outcome else { panic!("{:?}", run.outcome) };
    assert!(error.message.contains("not run again") && error.message.contains("no approver's decision"), "{error}");
}

#[tokio::test]
async fn an_idempotent_effect_cut_off_mid_way_runs_again_with_the_same_key() {
    let thread = "U-idem-effect";
    let path = db(thread);
    {
        let graph = open(idempotent_effect_flow::graph(), &path);
        cut_off(thread, graph.runner(&()).thread(thread).owner(OWNER).run(job(thread, 0))).await;
    }
    let graph = open(idempotent_effect_flow::graph(), &path);
    let done = graph.runner(&()).thread(thread).resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed, "{:?}", done.outcome);
    let keys = calls(thread);
    assert_eq!(keys.len(), 2, "{keys:?}");
    assert_eq!(keys[0], keys[1]);
    assert!(graph.audit_log(thread).unwrap().iter().any(|e| e.kind == "effect.rerun"));
}

// ---------------------------------------------------------------- cut off, then never made again

/// Holds a seat; undone by releasing it, and the provider does not deduplicate.
#[tool(risk = reversible)]
async fn hold_seat(args: Refund, cx: &ToolCx) -> Result<Value, ToolError> {
    act(&args.order_id, cx.idempotency_key(), args.hold_ms).await;
    Ok(json!({ "held": args.order_id }))
}

/// The "model": the first time it asks for the call; when the node runs
/// again (the provider already saw a call) it answers differently and ends.
fn first_time(s: &Job) -> bool {
    calls(&s.order).is_empty()
}

#[graph(state = Job, deps = (), start = book)]
mod wavering_tool_flow {
    use super::*;

    #[node(goto = [END], tools = [hold_seat])]
    async fn book(s: &Job, cx: &Ctx<()>) -> Result<Step<Job>, NodeError> {
        if !first_time(s) {
            return Ok(goto!(END, Job::update().receipt(Some(json!("answered without the tool")))));
        }
        let obs = cx.run_tool(hold_seat, args(s)).await?;
        Ok(goto!(END, Job::update().receipt(Some(obs.body))))
    }
}

#[graph(state = Job, deps = (), start = charge)]
mod wavering_effect_flow {
    use super::*;

    #[node(goto = [END])]
    async fn charge(s: &Job, cx: &Ctx<()>) -> Result<Step<Job>, NodeError> {
        if !first_time(s) {
            return Ok(goto!(END, Job::update().receipt(Some(json!("charged another way")))));
        }
        let receipt: Value = cx
            .effect("charge", |key| async move {
                act(&s.order, &key, s.hold_ms).await;
                Ok::<_, NodeError>(json!({ "charged": s.order }))
            })
            .await?;
        Ok(goto!(END, Job::update().receipt(Some(receipt))))
    }
}

/// The thread's audit entries that report an unknown outcome of a call the
/// re-run step did not make again.
fn unknown_entries(log: &[agentflow::persist::AuditEntry]) -> Vec<&agentflow::persist::AuditEntry> {
    log.iter().filter(|e| e.kind == "effect.outcome_unknown").collect()
}

#[tokio::test]
async fn a_policy_run_tool_cut_off_and_not_called_again_is_listed_as_an_unknown_outcome() {
    let thread = "U-waver-tool";
    let path = db(thread);
    let policy = || RiskPolicy::default().risk(Risk::Reversible, Decision::Run);
    {
        let graph = open(wavering_tool_flow::graph(), &path).policy(policy());
        cut_off(thread, graph.runner(&()).thread(thread).owner(OWNER).run(job(thread, 0))).await;
    }
    let graph = open(wavering_tool_flow::graph(), &path).policy(policy());
    let done = graph.runner(&()).thread(thread).resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed, "{:?}", done.outcome);
    assert_eq!(done.state.receipt, Some(json!("answered without the tool")));
    assert_eq!(calls(thread).len(), 1, "the seat was held once");

    let desk = graph.approvals(authorizer()).unwrap();
    let pending: Vec<_> = desk.pending().unwrap().into_iter().filter(|r| r.thread == thread).collect();
    assert_eq!(pending.len(), 1, "the cut-off call is listed for a human: {pending:?}");
    let record = &pending[0];
    assert_eq!(record.status, ApprovalStatus::OutcomeUnknown);
    assert_eq!((record.tool.as_str(), record.risk.as_str(), record.node.as_str()), ("hold_seat", "reversible", "book"));
    assert_eq!(serde_json::from_str::<Value>(&record.args).unwrap(), json!({ "order_id": thread, "hold_ms": 0 }));
    assert_eq!(record.requester, OWNER);

    let log = graph.audit_log(thread).unwrap();
    let entries = unknown_entries(&log);
    assert_eq!(entries.len(), 1, "{log:?}");
    assert_eq!(entries[0].detail["approval"], record.id.as_str());
    assert_eq!(entries[0].detail["tool"], "hold_seat");
    assert_eq!(entries[0].detail["idempotency_key"], calls(thread)[0].as_str());

    // A human with the role for reversible calls settles it; nothing runs again.
    let desk = graph.approvals(authorizer().role_for(Risk::Reversible, ROLE)).unwrap();
    desk.settle(&record.id, &alice(), Settlement::Failed("the hold expired".into())).unwrap();
    assert!(desk.pending().unwrap().iter().all(|r| r.thread != thread));
    assert_eq!(calls(thread).len(), 1);
}

#[tokio::test]
async fn an_effect_cut_off_and_not_made_again_is_listed_as_an_unknown_outcome() {
    let thread = "U-waver-effect";
    let path = db(thread);
    {
        let graph = open(wavering_effect_flow::graph(), &path);
        cut_off(thread, graph.runner(&()).thread(thread).owner(OWNER).run(job(thread, 0))).await;
    }
    let graph = open(wavering_effect_flow::graph(), &path);
    let done = graph.runner(&()).thread(thread).resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed, "{:?}", done.outcome);
    assert_eq!(done.state.receipt, Some(json!("charged another way")));

    let desk = graph.approvals(authorizer()).unwrap();
    let pending: Vec<_> = desk.pending().unwrap().into_iter().filter(|r| r.thread == thread).collect();
    assert_eq!(pending.len(), 1, "the cut-off effect is listed for a human: {pending:?}");
    let record = &pending[0];
    assert_eq!(record.status, ApprovalStatus::OutcomeUnknown);
    assert_eq!((record.tool.as_str(), record.args.as_str()), ("effect", r#"{"key":"charge"}"#));

    let log = graph.audit_log(thread).unwrap();
    let entries = unknown_entries(&log);
    assert_eq!(entries.len(), 1, "{log:?}");
    assert_eq!(entries[0].detail["approval"], record.id.as_str());
    assert_eq!(entries[0].detail["key"], "charge");
    assert_eq!(entries[0].detail["node"], "charge");
    // Resuming the completed thread again lists it once, not twice.
    let _ = graph.runner(&()).thread(thread).resume().await;
    assert_eq!(desk.pending().unwrap().iter().filter(|r| r.thread == thread).count(), 1);
}

/// The unknown outcome of a call cut off mid-way is recorded by the run that holds the thread,
/// in its step's commit: a run that lost the thread just before that commit records nothing
/// (the new holder finds the open call itself and asks about it once).
#[tokio::test]
async fn a_run_that_lost_the_thread_before_its_step_commit_records_no_unknown_outcome() {
    let thread = "U-waver-stolen";
    let path = db(thread);
    {
        let graph = open(wavering_effect_flow::graph(), &path);
        cut_off(thread, graph.runner(&()).thread(thread).owner(OWNER).run(job(thread, 0))).await;
    }
    {
        let mut store = hooked_store::Hooked::new(Arc::new(RedbStore::open(&path).expect("open store")));
        // Another executor takes the thread while this run's step is about to commit.
        store.before_checkpoint = Some(Box::new(move |s| {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
            let later = now + 600_000;
            s.acquire_lease(thread, "thief", 60_000, later).expect("the thief takes the thread");
        }));
        let graph = wavering_effect_flow::graph().app().store(Arc::new(store));
        let refused = graph.runner(&()).thread(thread).resume().await.expect_err("the run lost its thread");
        assert!(refused.to_string().contains("thief"), "{refused}");
        let desk = graph.approvals(authorizer()).unwrap();
        assert!(desk.for_thread(thread).unwrap().is_empty(), "a record written by a run that lost the thread");
        assert!(unknown_entries(&graph.audit_log(thread).unwrap()).is_empty());
    }
    assert_eq!(calls(thread).len(), 1);
}

/// A run that lost the thread does not take an approved call still `EXECUTING` for one cut off
/// mid-way: the new holder may be making it right now. Its move to `OUTCOME_UNKNOWN` is fenced
/// by the run's lease and refused.
#[tokio::test]
async fn a_run_that_lost_the_thread_does_not_move_an_executing_approval() {
    lost_the_thread_then_finds_an_executing_approval("U-cut-stolen", 600_000).await;
}

/// The same when the other holder's lease has expired by then (it crashed mid-call): the
/// stored lease is still not this run's, so the refusal is not taken for the call's failure.
#[tokio::test]
async fn a_run_refused_under_another_holders_expired_lease_does_not_fail_an_executing_approval() {
    lost_the_thread_then_finds_an_executing_approval("U-cut-stolen-expired", 0).await;
}

/// Cuts an approved refund off mid-call, then resumes it while another holder takes the thread
/// (its lease running `lease_ms` past now) just as the run records the unknown outcome.
async fn lost_the_thread_then_finds_an_executing_approval(thread: &'static str, lease_ms: u64) {
    use std::sync::atomic::{AtomicBool, Ordering};

    let path = db(thread);
    {
        let graph = open(refund_flow::graph(), &path);
        approved_refund(&graph, &(), thread, 0).await;
        cut_off(thread, graph.runner(&()).thread(thread).resume()).await;
    }
    let stolen = Arc::new(AtomicBool::new(false));
    let steal = {
        let stolen = Arc::clone(&stolen);
        move |s: &dyn agentflow::Store| {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
            if lease_ms == 0 {
                // The other holder took the thread (the run's lease released under it) and its
                // own lease has lapsed since.
                let holder = s.thread(thread).unwrap().and_then(|t| t.lease).expect("the run's lease").holder;
                s.release_lease(thread, &holder).unwrap();
                s.acquire_lease(thread, "thief", 1, now).expect("the thief takes the thread");
                std::thread::sleep(std::time::Duration::from_millis(5));
            } else {
                s.acquire_lease(thread, "thief", 60_000, now + lease_ms).expect("the thief takes the thread");
            }
            stolen.store(true, Ordering::SeqCst);
        }
    };
    let inner: Arc<dyn agentflow::Store> = Arc::new(RedbStore::open(&path).expect("open store"));
    let mut store = hooked_store::Hooked::new(Arc::clone(&inner));
    // Another executor takes the thread just as this run is about to record the unknown outcome.
    let on_batch = steal.clone();
    store.before_effects = Some(Box::new(move |s, batch| {
        if batch.approval_transitions.iter().any(|t| t.to == ApprovalStatus::OutcomeUnknown) {
            on_batch(s);
        }
        Ok(())
    }));
    let on_move = steal.clone();
    let held = Arc::clone(&inner);
    store.before_transition = Some(Box::new(move |_, _, to| {
        if to == ApprovalStatus::OutcomeUnknown {
            on_move(&*held);
        }
        None
    }));
    let graph = refund_flow::graph().app().store(Arc::new(store));
    let said = match graph.runner(&()).thread(thread).resume().await {
        Ok(run) => format!("{:?}", run.outcome),
        Err(e) => e.to_string(),
    };
    assert!(stolen.load(Ordering::SeqCst), "the run never tried to record the unknown outcome: {said}");
    let desk = graph.approvals(authorizer()).unwrap();
    let record = desk.for_thread(thread).unwrap().into_iter().find(|r| r.tool == "refund").expect("the approval");
    assert_eq!(record.status, ApprovalStatus::Executing, "moved by a run that lost the thread ({said})");
    assert_eq!(calls(thread).len(), 1);
}

/// After a resumed step commits, the run cancels the requests its step no longer makes; a run
/// that lost the thread right after that commit cancels nothing: the new holder may have asked
/// for (and a human approved) a call since.
#[tokio::test]
async fn a_run_that_lost_the_thread_after_its_step_commit_cancels_no_request() {
    let thread = "U-waver-cancel";
    let path = db(thread);
    let policy = || RiskPolicy::default().risk(Risk::Reversible, Decision::Run);
    {
        let graph = open(wavering_tool_flow::graph(), &path).policy(policy());
        cut_off(thread, graph.runner(&()).thread(thread).owner(OWNER).run(job(thread, 0))).await;
    }
    let inner: Arc<dyn agentflow::Store> = Arc::new(RedbStore::open(&path).expect("open store"));
    let mut store = hooked_store::Hooked::new(Arc::clone(&inner));
    let held = Arc::clone(&inner);
    // Right after the resumed step's commit, another executor takes the thread and asks for a
    // call, which a human approves.
    store.after_checkpoint = Some(Box::new(move || {
        if held.approval("asked-by-the-new-holder").unwrap().is_some() {
            return;
        }
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
        held.acquire_lease(thread, "thief", 60_000, now + 600_000).expect("the thief takes the thread");
        let asked = agentflow_store::ApprovalRecord {
            id: "asked-by-the-new-holder".into(),
            thread: thread.into(),
            node: "book".into(),
            tool: "hold_seat".into(),
            args: r#"{"hold_ms":0,"order_id":"x"}"#.into(),
            args_hash: "h".into(),
            risk: "reversible".into(),
            requester: OWNER.into(),
            reason: "asked by the new holder".into(),
            created_at: now,
            expires_at: now + 3_600_000,
            status: ApprovalStatus::Pending,
            decided_by: None,
            decision_note: None,
            conditions: None,
            updated_at: now,
        };
        held.put_approval(asked, "thief").unwrap();
    }));
    let graph = wavering_tool_flow::graph().app().store(Arc::new(store)).policy(policy());
    let _ = graph.runner(&()).thread(thread).resume().await;
    let asked = inner.approval("asked-by-the-new-holder").unwrap().expect("the new holder's request");
    assert_eq!(asked.status, ApprovalStatus::Pending, "cancelled by a run that lost the thread");
    assert_eq!(calls(thread).len(), 1);
}

/// Runs a refund without an approval (the policy asks for none then) and cuts it off mid-call;
/// then, the policy tightened (irreversible calls need an approval), resumes, approves the
/// request it asks for and resumes again. Returns the store file, the approval's id and the
/// run that followed.
async fn approved_after_a_policy_change(thread: &str) -> (PathBuf, String, Run<Job>) {
    let path = db(thread);
    {
        let lax = RiskPolicy::default().risk(Risk::Irreversible, Decision::Run);
        let graph = open(refund_flow::graph(), &path).policy(lax);
        cut_off(thread, graph.runner(&()).thread(thread).owner(OWNER).run(job(thread, 0))).await;
    }
    let graph = open(refund_flow::graph(), &path);
    let desk = graph.approvals(authorizer()).unwrap();
    let run = graph.runner(&()).thread(thread).resume().await.unwrap();
    let (kind, approval) = pending_of(&run);
    assert_eq!(kind, PendingKind::Approval, "{:?}", run.outcome);
    desk.approve(&approval, &alice()).unwrap();
    let run = graph.runner(&()).thread(thread).resume().await.unwrap();
    (path, approval, run)
}

/// A call cut off mid-way while it ran without an approval (the policy then asked for none)
/// is not run again on an approval asked for later (the policy was tightened meanwhile): the
/// approver approved a call, not a second run of one that may have acted. The run pauses on
/// the unknown outcome, and the call runs again only once a human settles it as "run again".
#[tokio::test]
async fn an_approval_asked_after_a_policy_change_does_not_rerun_a_call_cut_off_without_one() {
    let thread = "U-cut-unapproved";
    let (path, _, run) = approved_after_a_policy_change(thread).await;
    let graph = open(refund_flow::graph(), &path);
    let desk = graph.approvals(authorizer()).unwrap();
    let (kind, id) = pending_of(&run);
    assert_eq!(kind, PendingKind::OutcomeUnknown, "{:?}", run.outcome);
    assert_eq!(calls(thread).len(), 1, "refunded again on an approval of a new call");
    // Settled as "run again" by someone with the role, it runs once more.
    desk.settle(&id, &alice(), Settlement::RunAgain).unwrap();
    let done = graph.runner(&()).thread(thread).resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed, "{:?}", done.outcome);
    assert_eq!(calls(thread).len(), 2);
}

/// The same cut-off call settled as done: its result is used, the approved call does not run,
/// and the approval is set aside as not used (not left `APPROVED` to be cancelled later as a
/// call the step no longer made).
#[tokio::test]
async fn an_approval_asked_after_a_policy_change_is_set_aside_when_the_cut_off_call_is_settled_as_done() {
    let thread = "U-cut-unapproved-done";
    let (path, approval, run) = approved_after_a_policy_change(thread).await;
    let graph = open(refund_flow::graph(), &path);
    let desk = graph.approvals(authorizer()).unwrap();
    let (kind, unknown) = pending_of(&run);
    assert_eq!(kind, PendingKind::OutcomeUnknown, "{:?}", run.outcome);
    desk.settle(&unknown, &alice(), Settlement::Succeeded(json!({ "refunded": thread }))).unwrap();
    let done = graph.runner(&()).thread(thread).resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed, "{:?}", done.outcome);
    assert_eq!(calls(thread).len(), 1);
    let record = desk.for_thread(thread).unwrap().into_iter().find(|r| r.id == approval).expect("the approval");
    assert_eq!(record.status, ApprovalStatus::Cancelled);
    assert!(record.decision_note.as_deref().unwrap_or_default().contains("not used"), "{record:?}");
}

/// The same, when the step that journals the settled result does not commit (a passing store
/// fault): the result and the approval set aside were written together, and the node's next
/// run replays that result; it is not told the approval was cancelled, nor is the call made.
#[tokio::test]
async fn a_settled_result_journaled_with_its_set_aside_approval_is_replayed_after_a_failed_step_commit() {
    use std::sync::atomic::{AtomicBool, Ordering};

    let thread = "U-cut-unapproved-retry";
    let (path, _, run) = approved_after_a_policy_change(thread).await;
    let unknown = {
        let graph = open(refund_flow::graph(), &path);
        let desk = graph.approvals(authorizer()).unwrap();
        let (kind, unknown) = pending_of(&run);
        assert_eq!(kind, PendingKind::OutcomeUnknown, "{:?}", run.outcome);
        desk.settle(&unknown, &alice(), Settlement::Succeeded(json!({ "refunded": thread }))).unwrap();
        unknown
    };
    {
        let mut store = hooked_store::Hooked::new(Arc::new(RedbStore::open(&path).expect("open store")));
        let failed = Arc::new(AtomicBool::new(false));
        let once = Arc::clone(&failed);
        store.fail_commit = Some(Box::new(move |commit| {
            (commit.checkpoint.is_some() && !once.swap(true, Ordering::SeqCst)).then(|| {
                agentflow_store::CommitError::Invalid { thread: thread.into(), reason: "the disk is full".into() }
            })
        }));
        let graph = refund_flow::graph().app().store(Arc::new(store));
        let _ = graph.runner(&()).thread(thread).resume().await;
        assert!(failed.load(Ordering::SeqCst), "the step never tried to commit");
    }
    let graph = open(refund_flow::graph(), &path);
    let done = graph.runner(&()).thread(thread).resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed, "{:?}", done.outcome);
    let receipt = done.state.receipt.expect("a receipt");
    assert_eq!(receipt["ok"], true, "{receipt}");
    assert_eq!(receipt["result"], json!({ "refunded": thread }));
    assert_eq!(calls(thread).len(), 1);
    let desk = graph.approvals(authorizer()).unwrap();
    assert_eq!(
        desk.for_thread(thread).unwrap().iter().find(|r| r.id == unknown).unwrap().status,
        ApprovalStatus::Succeeded
    );
}

/// Under a two-person rule, running an irreversible call again takes two people, as approving
/// it did; the sign-offs of the first approval do not count.
#[tokio::test]
async fn running_a_cut_off_irreversible_call_again_takes_two_people_under_a_two_person_rule() {
    let (path, id) = cut_off_refund("U-cut-two").await;
    let graph = open(refund_flow::graph(), &path);
    let desk = graph.approvals(authorizer().two_person_for_irreversible()).unwrap();
    let first = desk.settle(&id, &alice(), Settlement::RunAgain).unwrap();
    assert_eq!(first.status, ApprovalStatus::OutcomeUnknown, "one person ran it again");
    assert!(desk.settle(&id, &alice(), Settlement::RunAgain).is_err(), "the same person twice");
    let still = graph.runner(&()).thread("U-cut-two").resume().await.unwrap();
    assert_eq!(pending_of(&still).0, PendingKind::OutcomeUnknown);
    assert_eq!(calls("U-cut-two").len(), 1);

    let second = desk.settle(&id, &Approver::new("bob", [ROLE]), Settlement::RunAgain).unwrap();
    assert_eq!(second.status, ApprovalStatus::Approved);
    let done = graph.runner(&()).thread("U-cut-two").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed, "{:?}", done.outcome);
    assert_eq!(calls("U-cut-two").len(), 2);
}

/// An approved call cut off mid-way, moved back to APPROVED around the desk (a raw store write):
/// the approval that first ran it does not count for running it again.
#[tokio::test]
async fn an_approved_call_moved_to_run_again_around_the_desk_is_not_run_again() {
    use agentflow::Store;
    let (path, id) = cut_off_refund("U-cut-forged").await;
    let store = Arc::new(RedbStore::open(&path).expect("open store"));
    let patch = agentflow_store::ApprovalPatch::by("script", 1);
    store.transition_approval(&id, ApprovalStatus::OutcomeUnknown, ApprovalStatus::Approved, patch).unwrap();
    let graph = refund_flow::graph().app().store(Arc::clone(&store) as Arc<dyn Store>);
    let run = graph.runner(&()).thread("U-cut-forged").resume().await.unwrap();
    assert_eq!(calls("U-cut-forged").len(), 1, "refunded again on a decision nobody made through the desk");
    // The node gets the refusal as the call's observation.
    let receipt = run.state.receipt.expect("the node's receipt");
    assert_eq!(receipt["ok"], false, "{receipt}");
    assert!(receipt["detail"].as_str().unwrap_or_default().contains("no approver's decision"), "{receipt}");
}

// ---------------------------------------------------------------- cut off in a subgraph child the parent no longer calls

/// Orders whose parent node is told to decide otherwise on its next run.
static DECLINED: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// The parent's "model": it calls its child the first time; when the node runs again after
/// the child's provider saw a call, or once told to, it answers another way.
fn calls_the_child(s: &Job) -> bool {
    calls(&s.order).is_empty() && !DECLINED.lock().unwrap().contains(&s.order)
}

#[graph(state = Job, deps = (), start = settle)]
mod parent_of_effect_flow {
    use super::*;

    #[node(goto = [END], subgraphs = [effect_flow])]
    async fn settle(s: &Job, cx: &Ctx<()>) -> Result<Step<Job>, NodeError> {
        if !calls_the_child(s) {
            return Ok(goto!(END, Job::update().receipt(Some(json!("settled without the child")))));
        }
        let done = cx.subgraph(effect_flow::graph(), s.clone()).await?;
        Ok(goto!(END, Job::update().receipt(done.receipt)))
    }
}

#[graph(state = Job, deps = (), start = settle)]
mod parent_of_refund_flow {
    use super::*;

    #[node(goto = [END], subgraphs = [refund_flow])]
    async fn settle(s: &Job, cx: &Ctx<()>) -> Result<Step<Job>, NodeError> {
        if !calls_the_child(s) {
            return Ok(goto!(END, Job::update().receipt(Some(json!("settled without the child")))));
        }
        let done = cx.subgraph(refund_flow::graph(), s.clone()).await?;
        Ok(goto!(END, Job::update().receipt(done.receipt)))
    }
}

/// Stores whose thread (of the same name as its order) another executor takes over while the
/// parent node runs again: the stalled run, seen from the other side.
static STOLEN: Mutex<Vec<(String, Arc<dyn agentflow::Store>)>> = Mutex::new(Vec::new());

#[graph(state = Job, deps = (), start = settle)]
mod stolen_parent_of_effect_flow {
    use super::*;

    #[node(goto = [END], subgraphs = [effect_flow])]
    async fn settle(s: &Job, cx: &Ctx<()>) -> Result<Step<Job>, NodeError> {
        if !calls_the_child(s) {
            let stolen = STOLEN.lock().unwrap().iter().find(|(t, _)| *t == s.order).map(|(_, st)| Arc::clone(st));
            if let Some(store) = stolen {
                let later = agentflow::timer::now_ms() + 3_600_000;
                store
                    .acquire_lease(&s.order, "thief", 3_600_000, later)
                    .map_err(|e| NodeError::fatal(e.to_string()))?;
            }
            return Ok(goto!(END, Job::update().receipt(Some(json!("settled without the child")))));
        }
        let done = cx.subgraph(effect_flow::graph(), s.clone()).await?;
        Ok(goto!(END, Job::update().receipt(done.receipt)))
    }
}

/// The same, but another executor took the parent's thread while its node ran again: the
/// stalled run that then sweeps the child writes nothing into it (its writes there are fenced
/// by the parent's lease, which it lost), and its step is refused.
#[tokio::test]
async fn a_parent_that_lost_its_thread_records_nothing_in_the_child_it_no_longer_calls() {
    let thread = "U-child-stolen";
    let path = db(thread);
    {
        let graph = open(stolen_parent_of_effect_flow::graph(), &path);
        cut_off(thread, graph.runner(&()).thread(thread).owner(OWNER).run(job(thread, 0))).await;
    }
    let store: Arc<dyn agentflow::Store> = Arc::new(RedbStore::open(&path).expect("open store"));
    STOLEN.lock().unwrap().push((thread.to_string(), Arc::clone(&store)));
    let graph = stolen_parent_of_effect_flow::graph().app().store(Arc::clone(&store));
    let run = graph.runner(&()).thread(thread).resume().await;
    let said = match &run {
        Ok(run) => format!("{:?}", run.outcome),
        Err(e) => e.to_string(),
    };
    assert!(said.contains("thief") || said.contains("no longer holds"), "{said}");
    let desk = graph.approvals(authorizer()).unwrap();
    assert_eq!(children_pending(&desk, thread), vec![], "the stalled parent wrote into the child");
    assert_eq!(calls(thread).len(), 1, "nothing ran again");
}

/// The records waiting for a human in the subgraph children of `thread` (ids under `thread/`).
fn children_pending(desk: &ApprovalDesk, thread: &str) -> Vec<agentflow::approval::ApprovalRecord> {
    desk.pending().unwrap().into_iter().filter(|r| r.thread.starts_with(&format!("{thread}/"))).collect()
}

/// A child's effect cut off mid-way, and the parent's re-run answers without the child: no run
/// will reach the child again, so the parent's step lists the child's call for a human, as the
/// child's own next step would have (it stayed an open marker nobody looked at).
#[tokio::test]
async fn a_childs_effect_cut_off_when_the_parent_no_longer_calls_the_child_is_listed_as_an_unknown_outcome() {
    let thread = "U-child-effect";
    let path = db(thread);
    {
        let graph = open(parent_of_effect_flow::graph(), &path);
        cut_off(thread, graph.runner(&()).thread(thread).owner(OWNER).run(job(thread, 0))).await;
    }
    let graph = open(parent_of_effect_flow::graph(), &path);
    let done = graph.runner(&()).thread(thread).resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed, "{:?}", done.outcome);
    assert_eq!(done.state.receipt, Some(json!("settled without the child")));

    let desk = graph.approvals(authorizer()).unwrap();
    let records = children_pending(&desk, thread);
    assert_eq!(records.len(), 1, "the child's cut-off effect is listed for a human: {records:?}");
    let record = &records[0];
    assert_eq!(record.status, ApprovalStatus::OutcomeUnknown);
    assert_eq!(
        (record.tool.as_str(), record.args.as_str(), record.node.as_str()),
        ("effect", r#"{"key":"charge"}"#, "charge")
    );
    let log = graph.audit_log(&record.thread).unwrap();
    assert_eq!(unknown_entries(&log).len(), 1, "{log:?}");
    // A second resume of the completed parent lists it once, not twice.
    let _ = graph.runner(&()).thread(thread).resume().await;
    assert_eq!(children_pending(&desk, thread).len(), 1);
    assert_eq!(calls(thread).len(), 1, "nothing ran again");
}

/// An approved irreversible call cut off mid-way in a child, and the parent's re-run answers
/// without the child: the approval was left `EXECUTING` for good; it is an unknown outcome.
#[tokio::test]
async fn a_childs_approved_call_cut_off_when_the_parent_no_longer_calls_the_child_becomes_an_unknown_outcome() {
    let thread = "U-child-refund";
    let path = db(thread);
    let id = {
        let graph = open(parent_of_refund_flow::graph(), &path);
        let run = graph.runner(&()).thread(thread).owner(OWNER).run(job(thread, 0)).await.unwrap();
        let (kind, id) = pending_of(&run);
        assert_eq!(kind, PendingKind::Approval);
        graph.approvals(authorizer()).unwrap().approve(&id, &alice()).unwrap();
        cut_off(thread, graph.runner(&()).thread(thread).resume()).await;
        id
    };
    let graph = open(parent_of_refund_flow::graph(), &path);
    let desk = graph.approvals(authorizer()).unwrap();
    assert_eq!(desk.get(&id).unwrap().unwrap().status, ApprovalStatus::Executing);
    let done = graph.runner(&()).thread(thread).resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed, "{:?}", done.outcome);
    assert_eq!(done.state.receipt, Some(json!("settled without the child")));
    let record = desk.get(&id).unwrap().unwrap();
    assert_eq!(record.status, ApprovalStatus::OutcomeUnknown, "{record:?}");
    assert!(desk.pending().unwrap().iter().any(|r| r.id == id), "listed for a human to settle");
    desk.settle(&id, &alice(), Settlement::Failed("the refund bounced".into())).unwrap();
    assert_eq!(calls(thread).len(), 1, "the refund reached the provider once");
}

/// A child waits for a request, and the parent's re-run answers without the child: no call
/// will use the request, so it is cancelled with the parent's step (it stayed in the inbox).
#[tokio::test]
async fn a_childs_request_is_cancelled_when_the_parent_no_longer_calls_the_child() {
    let thread = "U-child-request";
    let path = db(thread);
    let graph = open(parent_of_refund_flow::graph(), &path);
    let run = graph.runner(&()).thread(thread).owner(OWNER).run(job(thread, 0)).await.unwrap();
    let (_, id) = pending_of(&run);
    DECLINED.lock().unwrap().push(thread.to_string());
    let done = graph.runner(&()).thread(thread).resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed, "{:?}", done.outcome);
    let desk = graph.approvals(authorizer()).unwrap();
    let record = desk.get(&id).unwrap().unwrap();
    assert_eq!(record.status, ApprovalStatus::Cancelled, "{record:?}");
    assert!(desk.pending().unwrap().iter().all(|r| r.id != id));
    assert!(calls(thread).is_empty());
}

/// The same while a process that lost the parent still holds the child's lease (it outlives the
/// parent's by up to a renewal): the parent's step waits for that lease, as a subgraph call
/// does, then lists the call (it was left to that holder for good).
#[tokio::test]
async fn a_childs_cut_off_effect_held_by_another_run_is_listed_once_that_run_lets_go() {
    let thread = "U-child-held";
    let path = db(thread);
    {
        let graph = open(parent_of_effect_flow::graph(), &path);
        cut_off(thread, graph.runner(&()).thread(thread).owner(OWNER).run(job(thread, 0))).await;
    }
    let store = Arc::new(RedbStore::open(&path).expect("open store"));
    let child = format!("{thread}/settle.0.0.effect_flow");
    let now = agentflow::timer::now_ms();
    agentflow::Store::acquire_lease(&*store, &child, "a-process-that-lost-the-parent", 400, now).unwrap();
    let graph = parent_of_effect_flow::graph().app().store(store.clone() as Arc<dyn agentflow::Store>);
    let done = graph.runner(&()).thread(thread).resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed, "{:?}", done.outcome);
    let desk = graph.approvals(authorizer()).unwrap();
    let records = children_pending(&desk, thread);
    assert_eq!(records.len(), 1, "listed once the other run let go: {records:?}");
    assert_eq!(records[0].thread, child);
    let record = agentflow::Store::thread(&*store, &child).unwrap().unwrap();
    assert!(record.lease.is_none(), "the child's lease was given back: {:?}", record.lease);
}

/// A child whose records cannot be written (the store refuses its commit, as it would a record
/// that no longer decodes) does not hold the parent back: it is logged and left, and the parent's
/// step commits.
#[tokio::test]
async fn a_child_that_cannot_be_settled_does_not_keep_its_parent_from_going_on() {
    let thread = "U-child-refused";
    let path = db(thread);
    {
        let graph = open(parent_of_effect_flow::graph(), &path);
        cut_off(thread, graph.runner(&()).thread(thread).owner(OWNER).run(job(thread, 0))).await;
    }
    let inner: Arc<dyn agentflow::Store> = Arc::new(RedbStore::open(&path).expect("open store"));
    let mut store = hooked_store::Hooked::new(Arc::clone(&inner));
    let child = format!("{thread}/settle.0.0.effect_flow");
    let refused = Arc::new(std::sync::atomic::AtomicBool::new(false));
    store.fail_commit = Some({
        let (child, refused) = (child.clone(), Arc::clone(&refused));
        Box::new(move |commit| {
            (commit.thread.id == child).then(|| {
                refused.store(true, std::sync::atomic::Ordering::SeqCst);
                agentflow_store::CommitError::Invalid { thread: child.clone(), reason: "the record is damaged".into() }
            })
        })
    });
    let graph = parent_of_effect_flow::graph().app().store(Arc::new(store) as Arc<dyn agentflow::Store>);
    let done = graph.runner(&()).thread(thread).resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed, "{:?}", done.outcome);
    assert!(refused.load(std::sync::atomic::Ordering::SeqCst), "the child's records were tried");
    let record = agentflow::Store::thread(&*inner, &child).unwrap().unwrap();
    assert!(record.lease.is_none(), "the child's lease was given back: {:?}", record.lease);
}

// ---------------------------------------------------------------- cut off, then forked away

/// A fork moves the thread off the step whose approved call was cut off mid-way: no run will
/// look at that step's journal again, so the fork itself turns the call into an unknown outcome
/// for a human (it stayed `EXECUTING` for good, though the refund may have gone out).
#[tokio::test]
async fn an_approved_call_cut_off_then_forked_away_becomes_an_unknown_outcome() {
    let thread = "U-fork-refund";
    let path = db(thread);
    let id = {
        let graph = open(refund_flow::graph(), &path);
        let run = graph.runner(&()).thread(thread).owner(OWNER).run(job(thread, 0)).await.unwrap();
        let (_, id) = pending_of(&run);
        graph.approvals(authorizer()).unwrap().approve(&id, &alice()).unwrap();
        cut_off(thread, graph.runner(&()).thread(thread).resume()).await;
        id
    };
    let graph = open(refund_flow::graph(), &path);
    let desk = graph.approvals(authorizer()).unwrap();
    assert_eq!(desk.get(&id).unwrap().unwrap().status, ApprovalStatus::Executing);
    graph.fork(thread, 0, "operator").unwrap();
    let record = desk.get(&id).unwrap().unwrap();
    assert_eq!(record.status, ApprovalStatus::OutcomeUnknown, "{record:?}");
    assert!(desk.pending().unwrap().iter().any(|r| r.id == id), "listed for a human to settle");
    assert_eq!(calls(thread).len(), 1);
}

/// The same for a call run without an approval (`cx.effect`): its started marker becomes an
/// `OUTCOME_UNKNOWN` record with the fork.
#[tokio::test]
async fn an_effect_cut_off_then_forked_away_is_listed_as_an_unknown_outcome() {
    let thread = "U-fork-effect";
    let path = db(thread);
    {
        let graph = open(effect_flow::graph(), &path);
        cut_off(thread, graph.runner(&()).thread(thread).owner(OWNER).run(job(thread, 0))).await;
    }
    let graph = open(effect_flow::graph(), &path);
    graph.fork(thread, 0, "operator").unwrap();
    let desk = graph.approvals(authorizer()).unwrap();
    let pending: Vec<_> = desk.pending().unwrap().into_iter().filter(|r| r.thread == thread).collect();
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!((pending[0].status, pending[0].tool.as_str()), (ApprovalStatus::OutcomeUnknown, "effect"));
    let log = graph.audit_log(thread).unwrap();
    assert_eq!(unknown_entries(&log).len(), 1, "{log:?}");
    // The forked branch runs afresh and lists nothing twice.
    let _ = graph.runner(&()).thread(thread).resume().await;
    assert_eq!(desk.pending().unwrap().iter().filter(|r| r.thread == thread).count(), 1);
}

/// And for a subgraph child's cut-off call: the fork abandons the child with its parent's step.
#[tokio::test]
async fn a_childs_effect_cut_off_then_forked_away_is_listed_as_an_unknown_outcome() {
    let thread = "U-fork-child";
    let path = db(thread);
    {
        let graph = open(parent_of_effect_flow::graph(), &path);
        cut_off(thread, graph.runner(&()).thread(thread).owner(OWNER).run(job(thread, 0))).await;
    }
    let graph = open(parent_of_effect_flow::graph(), &path);
    graph.fork(thread, 0, "operator").unwrap();
    let desk = graph.approvals(authorizer()).unwrap();
    let records = children_pending(&desk, thread);
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0].status, ApprovalStatus::OutcomeUnknown);
}

/// And for a child's approved call cut off mid-way: the fork turns it into an unknown outcome
/// (it stayed `EXECUTING` in the child for good, though the refund may have gone out).
#[tokio::test]
async fn a_childs_approved_call_cut_off_then_forked_away_becomes_an_unknown_outcome() {
    let thread = "U-fork-child-refund";
    let path = db(thread);
    let id = {
        let graph = open(parent_of_refund_flow::graph(), &path);
        let run = graph.runner(&()).thread(thread).owner(OWNER).run(job(thread, 0)).await.unwrap();
        let (kind, id) = pending_of(&run);
        assert_eq!(kind, PendingKind::Approval);
        graph.approvals(authorizer()).unwrap().approve(&id, &alice()).unwrap();
        cut_off(thread, graph.runner(&()).thread(thread).resume()).await;
        id
    };
    let graph = open(parent_of_refund_flow::graph(), &path);
    let desk = graph.approvals(authorizer()).unwrap();
    assert_eq!(desk.get(&id).unwrap().unwrap().status, ApprovalStatus::Executing);
    graph.fork(thread, 0, "operator").unwrap();
    let record = desk.get(&id).unwrap().unwrap();
    assert_eq!(record.status, ApprovalStatus::OutcomeUnknown, "{record:?}");
    assert!(children_pending(&desk, thread).iter().any(|r| r.id == id), "listed for a human to settle");
    assert_eq!(calls(thread).len(), 1, "the refund reached the provider once");
}

/// "Run again" approves the call again, with a fresh time to live: settled after the first
/// approval's expiry, the call runs (the approval came back `APPROVED` past its expiry, and the
/// resumed call was refused as `APPROVAL_EXPIRED`, though the human had just asked for it).
#[tokio::test]
async fn a_cut_off_call_settled_as_run_again_after_its_approval_expired_still_runs() {
    let thread = "U-again-late";
    let path = db(thread);
    let ttl = Duration::from_millis(600);
    {
        let graph = open(refund_flow::graph(), &path).approval_ttl(ttl);
        approved_refund(&graph, &(), thread, 0).await;
        cut_off(thread, graph.runner(&()).thread(thread).resume()).await;
    }
    let graph = open(refund_flow::graph(), &path).approval_ttl(ttl);
    let run = graph.runner(&()).thread(thread).resume().await.unwrap();
    let (kind, id) = pending_of(&run);
    assert_eq!(kind, PendingKind::OutcomeUnknown);
    let desk = graph.approvals(authorizer()).unwrap();
    let expires_at = desk.get(&id).unwrap().unwrap().expires_at;
    while agentflow::timer::now_ms() <= expires_at {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let record = desk.settle(&id, &alice(), Settlement::RunAgain).unwrap();
    assert_eq!(record.status, ApprovalStatus::Approved);
    assert!(record.expires_at > agentflow::timer::now_ms(), "a fresh time to live: {record:?}");
    let done = graph.runner(&()).thread(thread).resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed, "{:?}", done.outcome);
    let receipt = done.state.receipt.expect("a receipt");
    assert_eq!(receipt["result"], json!({ "refunded": thread }), "the call ran: {receipt}");
    assert_eq!(calls(thread).len(), 2, "run again, by a human's decision");
}
