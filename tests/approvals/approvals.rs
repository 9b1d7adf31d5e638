//! Approvals at the tool boundary: the gateway, the desk and the store's
//! compare-and-set, end to end through the ReAct prebuilt and small graphs.
//!
//! Covered here: the approved path and the audit log, concurrent decisions (exactly one wins),
//! replay, tampering and expiry refused, edit re-validation.

use crate::approval_refunds::*;
use crate::support::stores::store;
use agentflow::approval::{ApprovalStatus, Approver, DecisionError};
use agentflow::message::Role;
use agentflow::persist::ResumeError;
use agentflow::prebuilt::react::ReactState;
use agentflow::prelude::*;
use agentflow::tool::args_hash;
use agentflow::{PendingKind, RunError};
use serde_json::json;
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Barrier};
use std::time::Duration;

// ---------------------------------------------------------------- the approved path and the audit log

#[tokio::test]
async fn an_approved_call_runs_once_and_the_audit_log_tells_the_story() {
    let graph = react();
    let desk = graph.approvals(authorizer()).unwrap();
    let deps = bot("A-1", 299);
    let run = start(&graph, &deps, "A-1").await;
    let id = waiting_for(&run);
    // Nothing ran yet; the request is recorded with everything a reviewer needs.
    assert!(refunds_for("A-1").is_empty());
    let record = desk.get(&id).unwrap().unwrap();
    assert_eq!(record.status, ApprovalStatus::Pending);
    assert_eq!((record.tool.as_str(), record.risk.as_str()), ("process_refund", "irreversible"));
    assert_eq!(record.args, r#"{"amount":299,"order_id":"A-1"}"#);
    assert_eq!(record.args_hash, args_hash(&json!({ "order_id": "A-1", "amount": 299 })));
    assert_eq!((record.thread.as_str(), record.node.as_str(), record.requester.as_str()), ("A-1", "tools", OWNER));
    // No `approval_ttl` set: valid for the default 24 hours.
    assert_eq!(record.expires_at - record.created_at, 24 * 3_600_000);
    assert_eq!(graph.pending("A-1").unwrap()[0].kind, PendingKind::Approval);
    assert!(desk.pending().unwrap().iter().any(|r| r.id == id));

    // Resuming while it is still pending just pauses again.
    let again = graph.runner(&deps).thread("A-1").resume().await.unwrap();
    assert_eq!(waiting_for(&again), id);
    // A value is not how an approval is given.
    let err = graph.runner(&deps).thread("A-1").resume_with(true).await.unwrap_err();
    assert!(matches!(err, RunError::NotWaiting { .. }), "{err}");

    let approved = desk.approve(&id, &alice()).unwrap();
    assert_eq!((approved.status, approved.decided_by.as_deref()), (ApprovalStatus::Approved, Some("alice")));
    let done = graph.runner(&deps).thread("A-1").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(refunds_for("A-1"), vec![299]);
    assert_eq!(done.state.answer.as_deref(), Some(r#"Done: {"order_id":"A-1","refunded":299}"#));
    assert_eq!(desk.get(&id).unwrap().unwrap().status, ApprovalStatus::Succeeded);

    // request -> decision (who, when, what) -> execution start -> result
    let log = graph.audit_log("A-1").unwrap();
    let approval: Vec<_> = log.iter().filter(|e| e.detail.get("approval") == Some(&json!(id))).collect();
    let kinds: Vec<&str> = approval.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds, ["approval.requested", "approval.approved", "approval.executing", "approval.succeeded"]);
    assert_eq!(approval[0].actor, OWNER);
    assert_eq!(approval[0].detail["tool"], "process_refund");
    assert_eq!(approval[1].actor, "alice");
    assert_eq!(approval[1].detail["decided_by"], "alice");
    assert_eq!(approval[1].detail["args_edited"], false);
    assert!(approval[1].at >= approval[0].at && approval[3].at >= approval[1].at);
    assert_eq!(approval[2].actor, "executor:tools");
    assert!(approval.windows(2).all(|w| w[0].seq < w[1].seq));
}

// ---------------------------------------------------------------- exactly one decision wins

#[tokio::test]
async fn of_32_concurrent_decisions_exactly_one_wins_and_the_refund_runs_once() {
    let graph = react();
    let desk = graph.approvals(authorizer()).unwrap();
    let deps = bot("C-1", 120);
    let id = waiting_for(&start(&graph, &deps, "C-1").await);

    let barrier = Barrier::new(32);
    let results: Vec<Result<_, DecisionError>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..32)
            .map(|i| {
                let (desk, id, barrier) = (&desk, &id, &barrier);
                s.spawn(move || {
                    let who = Approver::new(format!("approver-{i}"), [ROLE]);
                    barrier.wait();
                    // Half approve, a quarter reject, a quarter edit: still one winner.
                    match i % 4 {
                        0 | 1 => desk.approve(id, &who),
                        2 => desk.reject(id, &who, "too much"),
                        _ => desk.edit(id, &who, json!({ "order_id": "C-1", "amount": 100 })),
                    }
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let wins: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    let already = results.iter().filter(|r| matches!(r, Err(DecisionError::AlreadyDecided { .. }))).count();
    assert_eq!((wins.len(), already), (1, 31), "{results:?}");
    let winner = wins[0].clone();
    assert_eq!(desk.get(&id).unwrap().unwrap(), winner);
    let decisions = kinds(&graph, "C-1").iter().filter(|k| *k != "approval.requested").count();
    assert_eq!(decisions, 1, "one decision in the audit log");

    let done = graph.runner(&deps).thread("C-1").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    match winner.status {
        ApprovalStatus::Approved if winner.decision_note.is_some() => assert_eq!(refunds_for("C-1"), vec![100]),
        ApprovalStatus::Approved => assert_eq!(refunds_for("C-1"), vec![120]),
        _ => assert!(refunds_for("C-1").is_empty()),
    }
}

// ---------------------------------------------------------------- replay

#[tokio::test]
async fn a_used_approval_cannot_be_replayed_and_a_rerun_does_not_refund_twice() {
    let graph = pay_graph();
    let desk = graph.approvals(authorizer()).unwrap();
    let deps = PayDeps { fail_after: AtomicU32::new(1), ..PayDeps::default() };
    let run = graph.runner(&deps).thread("R-1").owner(OWNER).run(pay_input("R-1", 50)).await.unwrap();
    let id = waiting_for(&run);
    desk.approve(&id, &alice()).unwrap();
    // The refund runs, then the node fails: the step is not committed.
    let failed = graph.runner(&deps).thread("R-1").resume().await.unwrap();
    assert!(matches!(&failed.outcome, Outcome::Failed { node, .. } if node == "pay"), "{:?}", failed.outcome);
    assert_eq!(refunds_for("R-1"), vec![50]);
    assert_eq!(desk.get(&id).unwrap().unwrap().status, ApprovalStatus::Succeeded);

    // A double click, or a replay of the decision, is refused.
    for decision in [desk.approve(&id, &alice()), desk.approve(&id, &bob()), desk.reject(&id, &bob(), "late")] {
        let err = decision.unwrap_err();
        assert!(matches!(err, DecisionError::AlreadyDecided { current: ApprovalStatus::Succeeded, .. }), "{err}");
    }
    // The node runs again from its start: the journal returns the first result.
    let done = graph.runner(&deps).thread("R-1").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(refunds_for("R-1"), vec![50], "refunded once");
    assert_eq!(done.state.receipt.unwrap()["result"]["refunded"], 50);
    // A finished thread cannot be resumed into a second refund.
    let err = graph.runner(&deps).thread("R-1").resume().await.unwrap_err();
    assert!(matches!(err, RunError::Resume(ResumeError::Finished { .. })), "{err}");

    // Branching back before the refund is a new call: it needs a new approval.
    graph.fork("R-1", 0, "operator").unwrap();
    let replay = graph.runner(&deps).thread("R-1").resume().await.unwrap();
    let second = waiting_for(&replay);
    assert_ne!(second, id);
    assert_eq!(refunds_for("R-1"), vec![50]);
}

// ---------------------------------------------------------------- tampering

#[tokio::test]
async fn tampered_stored_arguments_are_refused_and_never_run() {
    let graph = react();
    let store = Arc::clone(graph.backing_store().unwrap());
    let deps = bot("T-1", 299);
    let id = waiting_for(&start(&graph, &deps, "T-1").await);
    // Someone with write access to the store approves a bigger refund
    // without going through the desk, keeping the old hash.
    let original = store.approval(&id).unwrap().unwrap();
    let patch = agentflow::approval::ApprovalPatch {
        args: Some(agentflow::approval::ApprovalArgs {
            canonical: r#"{"amount":9999,"order_id":"T-1"}"#.into(),
            hash: original.args_hash.clone(),
        }),
        ..agentflow::approval::ApprovalPatch::by("mallory", 1)
    };
    store.transition_approval(&id, ApprovalStatus::Pending, ApprovalStatus::Approved, patch).unwrap();

    let done = graph.runner(&deps).thread("T-1").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    let obs = last_observation(&done.state);
    assert_eq!(obs["code"], "APPROVAL_INVALID");
    assert!(obs["detail"].as_str().unwrap().contains("do not match its hash"), "{obs}");
    assert!(done.state.answer.unwrap().starts_with("No refund (APPROVAL_INVALID)"));
    assert!(refunds_for("T-1").is_empty(), "never executed");
}

#[tokio::test]
async fn a_call_whose_arguments_changed_after_approval_needs_a_new_approval() {
    // The node asks for 70, is approved, then asks for 700 when it runs again.
    let graph = pay_graph();
    let desk = graph.approvals(authorizer()).unwrap();
    let deps = PayDeps { drift: 630, ..PayDeps::default() };
    let run = graph.runner(&deps).thread("T-2").owner(OWNER).run(pay_input("T-2", 70)).await.unwrap();
    let first = waiting_for(&run);
    desk.approve(&first, &alice()).unwrap();
    let run = graph.runner(&deps).thread("T-2").resume().await.unwrap();
    let second = waiting_for(&run);
    assert_ne!(second, first);
    let pending = desk.get(&second).unwrap().unwrap();
    assert_eq!(
        (pending.status, pending.args.as_str()),
        (ApprovalStatus::Pending, r#"{"amount":700,"order_id":"T-2"}"#)
    );
    // The approval for 70 was not used for 700, and nothing ran.
    assert_eq!(desk.get(&first).unwrap().unwrap().status, ApprovalStatus::Approved);
    assert!(refunds_for("T-2").is_empty());

    // The same through the model's message: rewriting the stored call gives a new request.
    let graph = react();
    let desk = graph.approvals(authorizer()).unwrap();
    let deps = bot("T-3", 30);
    let first = waiting_for(&start(&graph, &deps, "T-3").await);
    desk.approve(&first, &alice()).unwrap();
    let state = graph.state("T-3").unwrap().unwrap().state;
    let mut call = state.messages.iter().rev().find(|m| m.role == Role::Ai).unwrap().clone();
    call.tool_calls[0].arguments = json!({ "order_id": "T-3", "amount": 3000 });
    graph.update_state("T-3", ReactState::update().messages(vec![call]), "mallory").unwrap();
    let run = graph.runner(&deps).thread("T-3").resume().await.unwrap();
    let second = waiting_for(&run);
    assert_ne!(second, first);
    assert_eq!(desk.get(&second).unwrap().unwrap().args, r#"{"amount":3000,"order_id":"T-3"}"#);
    assert!(refunds_for("T-3").is_empty());
}

// ---------------------------------------------------------------- expiry

/// A time to live longer than a u64 of milliseconds holds never ends: it is not wrapped around
/// to one that ended at the request (every approved call would then come back expired).
#[tokio::test]
async fn an_approval_time_to_live_past_what_millis_hold_never_ends() {
    for (n, ttl) in [Duration::from_secs(1 << 62), Duration::MAX].into_iter().enumerate() {
        let graph = refunds::graph().app().store(store()).approval_ttl(ttl);
        let desk = graph.approvals(authorizer()).unwrap();
        let thread = format!("L-{n}");
        let deps = bot(&thread, 10);
        let id = waiting_for(&start(&graph, &deps, &thread).await);
        assert_eq!(desk.get(&id).unwrap().unwrap().expires_at, u64::MAX);
        desk.approve(&id, &alice()).unwrap();
        graph.runner(&deps).thread(thread.as_str()).resume().await.unwrap();
        assert_eq!(refunds_for(&thread), vec![10]);
    }
}

#[tokio::test]
async fn an_expired_approval_is_never_executed() {
    let graph = refunds::graph().app().store(store()).approval_ttl(Duration::from_millis(150));
    let desk = graph.approvals(authorizer()).unwrap();

    // Decided too late: refused, and the run learns it expired.
    let deps = bot("E-1", 10);
    let id = waiting_for(&start(&graph, &deps, "E-1").await);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let err = desk.approve(&id, &alice()).unwrap_err();
    assert!(matches!(err, DecisionError::Expired { .. }), "{err}");
    assert_eq!(desk.get(&id).unwrap().unwrap().status, ApprovalStatus::Expired);
    let err = desk.approve(&id, &alice()).unwrap_err();
    assert!(matches!(err, DecisionError::AlreadyDecided { current: ApprovalStatus::Expired, .. }), "{err}");
    let done = graph.runner(&deps).thread("E-1").resume().await.unwrap();
    assert_eq!(last_observation(&done.state)["code"], "APPROVAL_EXPIRED");
    assert!(refunds_for("E-1").is_empty());

    // Approved in time but used too late: also refused. A TTL that leaves room for a slow
    // machine between the request and its approval; the run resumes once it has passed.
    let slow = refunds::graph().app().store(store()).approval_ttl(Duration::from_millis(1500));
    let slow_desk = slow.approvals(authorizer()).unwrap();
    let deps = bot("E-2", 10);
    let id = waiting_for(&start(&slow, &deps, "E-2").await);
    slow_desk.approve(&id, &alice()).unwrap();
    let expires_at = slow_desk.get(&id).unwrap().unwrap().expires_at;
    while agentflow::timer::now_ms() <= expires_at {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let done = slow.runner(&deps).thread("E-2").resume().await.unwrap();
    assert_eq!(last_observation(&done.state)["code"], "APPROVAL_EXPIRED");
    assert_eq!(slow_desk.get(&id).unwrap().unwrap().status, ApprovalStatus::Expired);
    assert!(refunds_for("E-2").is_empty());

    // Nobody decided, the thread resumed after the TTL: expired at the gateway.
    let deps = bot("E-3", 10);
    let id = waiting_for(&start(&graph, &deps, "E-3").await);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let done = graph.runner(&deps).thread("E-3").resume().await.unwrap();
    assert_eq!(last_observation(&done.state)["code"], "APPROVAL_EXPIRED");
    assert_eq!(desk.get(&id).unwrap().unwrap().status, ApprovalStatus::Expired);
    assert!(refunds_for("E-3").is_empty());
}

// ---------------------------------------------------------------- edit

#[tokio::test]
async fn an_edit_is_revalidated_and_the_tool_runs_with_the_edited_arguments() {
    let graph = react();
    let desk = graph.approvals(authorizer()).unwrap();
    let deps = bot("D-1", 299);
    let id = waiting_for(&start(&graph, &deps, "D-1").await);
    let original = desk.get(&id).unwrap().unwrap();

    for (bad, says) in [
        (json!({ "order_id": "D-1", "amount": "lots" }), "invalid type"),
        (json!({ "order_id": "D-1", "amount": -5 }), "invalid value"),
        (json!({ "order_id": "D-1", "amount": 199, "note": "x" }), "unknown field(s) note"),
        (json!({ "amount": 199 }), "missing field `order_id`"),
    ] {
        let err = desk.edit(&id, &alice(), bad).unwrap_err();
        assert!(matches!(&err, DecisionError::InvalidEdit { tool, .. } if tool == "process_refund"), "{err}");
        assert!(err.to_string().contains("the edited arguments for `process_refund` do not validate"), "{err}");
        assert!(err.to_string().contains(says), "{err}");
    }
    assert_eq!(desk.get(&id).unwrap().unwrap().status, ApprovalStatus::Pending, "a refused edit decides nothing");

    let edited = json!({ "order_id": "D-1", "amount": 199 });
    let record = desk.edit(&id, &alice(), edited.clone()).unwrap();
    assert_eq!(record.status, ApprovalStatus::Approved);
    assert_eq!(record.args, r#"{"amount":199,"order_id":"D-1"}"#);
    assert_eq!(record.args_hash, args_hash(&edited));
    assert_ne!(record.args_hash, original.args_hash);
    let done = graph.runner(&deps).thread("D-1").resume().await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed);
    assert_eq!(refunds_for("D-1"), vec![199]);
    assert_eq!(last_observation(&done.state)["result"]["refunded"], 199);
    let log = graph.audit_log("D-1").unwrap();
    let decision = log.iter().find(|e| e.kind == "approval.approved").unwrap();
    assert_eq!(decision.detail["args_edited"], true);
    assert_eq!(decision.detail["args_hash"], json!(args_hash(&edited)));
    let note = decision.detail["note"].as_str().unwrap();
    assert!(note.contains(r#""amount":299"#) && note.contains(r#""amount":199"#), "{note}");
}
