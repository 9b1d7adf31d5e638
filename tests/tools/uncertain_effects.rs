//! Effects cut off mid-way: a human settles them, an idempotent one runs again with the same
//! key, and a run that lost the thread records no unknown outcome.

use crate::support::hooked_store;
use crate::support::stores::open_redb;
use crate::uncertain_world::*;
use agentflow::approval::{ApprovalStatus, Settlement};
use agentflow::prelude::*;
use agentflow::{PendingKind, RedbStore};
use serde_json::json;
use std::sync::Arc;

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
    let inner: Arc<dyn Store> = Arc::new(open_redb(&path).expect("open store"));
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
    let store = Arc::new(open_redb(&path).expect("open store"));
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
