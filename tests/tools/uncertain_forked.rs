//! Calls cut off and then forked away: the fork turns them into unknown outcomes for a human.

use crate::uncertain_world::*;
use agentflow::PendingKind;
use agentflow::approval::{ApprovalStatus, Settlement};
use agentflow::prelude::*;
use serde_json::json;
use std::time::Duration;

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
