//! Calls cut off in a subgraph child that its parent no longer calls: listed for a human
//! by the parent's step, and the child's requests cancelled.

use crate::support::hooked_store;
use crate::support::stores::open_redb;
use crate::uncertain_world::*;
use agentflow::PendingKind;
use agentflow::approval::{ApprovalStatus, Settlement};
use agentflow::prelude::*;
use serde_json::json;
use std::sync::Arc;

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
    let store: Arc<dyn agentflow::Store> = Arc::new(open_redb(&path).expect("open store"));
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
    let store = Arc::new(open_redb(&path).expect("open store"));
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
    let inner: Arc<dyn agentflow::Store> = Arc::new(open_redb(&path).expect("open store"));
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
