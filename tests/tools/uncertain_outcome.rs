//! An approved (or otherwise journaled) call runs as often as promised: a
//! run deadline or a node timeout lets a call in flight finish and records
//! it; a call cut off mid-way (the run dropped, standing in for a crash) is
//! an uncertain outcome: re-run with the same key only if the tool
//! is idempotent, else the run pauses until a human settles it.

use crate::support::hooked_store;
use crate::support::stores::open_redb;
use crate::uncertain_world::*;
use agentflow::approval::{ApprovalStatus, Approver, Settlement};
use agentflow::prelude::*;
use agentflow::tool::{Decision, Risk, RiskPolicy};
use agentflow::{PendingKind, RedbStore};
use serde_json::json;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

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
            match open_redb(path) {
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
        let inner = Arc::new(open_redb(&path).expect("open store"));
        let graph = on(hooked_store::Hooked::new(inner));
        approved_refund(&graph, &deps, thread, 0).await;
        cut_off(thread, graph.runner(&deps).thread(thread).resume()).await;
    }
    {
        // The next process: the model takes another path, and the process dies as soon as the
        // step's commit returns (nothing it would write after that is written).
        let crashed = Arc::new(AtomicBool::new(false));
        let mut store = hooked_store::Hooked::new(Arc::new(open_redb(&path).expect("open store")));
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
        let inner = Arc::new(open_redb(&path).expect("open store"));
        let graph = on(hooked_store::Hooked::new(inner));
        approved_refund(&graph, &deps, thread, 0).await;
        cut_off(thread, graph.runner(&deps).thread(thread).resume()).await;
    }
    let mut store = hooked_store::Hooked::new(Arc::new(open_redb(&path).expect("open store")));
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
