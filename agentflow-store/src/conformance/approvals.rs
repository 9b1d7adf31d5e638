//! Approvals: the status state machine, approvals in a step commit, the unknown outcome, and
//! the compare-and-set under a race.

use std::sync::Barrier;

use serde_json::{Value, json};

use crate::conformance::fixtures::{NOW, approval, root, step, thread};
use crate::{
    ApprovalArgs, ApprovalError, ApprovalPatch, ApprovalRecord, ApprovalStatus, ApprovalTransition, CommitError,
    StepCommit, Store, ThreadStatus,
};

/// The approval state machine: legal moves only, compare-and-set, audit per transition.
pub fn approvals_state_machine(store: &dyn Store) {
    use ApprovalStatus::{Approved, Cancelled, Executing, Expired, Failed, Pending, Rejected, Succeeded};
    store.put_approval(approval("a1", "t"), "agent").unwrap();
    store.put_approval(approval("a2", "t"), "agent").unwrap();
    store.put_approval(approval("b1", "u"), "agent").unwrap();
    assert!(matches!(store.put_approval(approval("a1", "t"), "agent"), Err(ApprovalError::AlreadyExists { .. })));
    let mut approved = approval("a3", "t");
    approved.status = Approved;
    assert!(matches!(store.put_approval(approved, "agent"), Err(ApprovalError::NotPending { .. })));
    assert_eq!(store.approval("a1").unwrap(), Some(approval("a1", "t")));
    assert_eq!(store.approval("zz").unwrap(), None);
    let ids = |v: Vec<ApprovalRecord>| v.into_iter().map(|a| a.id).collect::<Vec<_>>();
    assert_eq!(ids(store.list_approvals("t").unwrap()), ["a1", "a2"]);
    assert_eq!(ids(store.list_pending_approvals().unwrap()), ["a1", "a2", "b1"]);

    // Every pair outside the state machine is refused.
    for from in [Pending, Approved, Rejected, Expired, Cancelled, Executing, Succeeded, Failed] {
        for to in [Pending, Approved, Rejected, Expired, Cancelled, Executing, Succeeded, Failed] {
            if !from.can_move_to(to) {
                let err = store.transition_approval("a1", from, to, ApprovalPatch::by("x", NOW)).unwrap_err();
                assert!(matches!(err, ApprovalError::IllegalTransition { .. }), "{err}");
            }
        }
    }
    let err = store.transition_approval("a1", Approved, Executing, ApprovalPatch::by("x", NOW)).unwrap_err();
    assert!(matches!(err, ApprovalError::AlreadyDecided { current: Pending, .. }), "{err}");
    let err = store.transition_approval("nope", Pending, Approved, ApprovalPatch::by("x", NOW)).unwrap_err();
    assert!(matches!(err, ApprovalError::NotFound { .. }), "{err}");

    let mut patch = ApprovalPatch::by("reviewer", NOW + 5);
    patch.decided_by = Some("carol".to_string());
    patch.note = Some("lower the amount".to_string());
    patch.conditions = Some(json!({ "max": 199 }));
    patch.args = Some(ApprovalArgs { canonical: r#"{"amount":199}"#.to_string(), hash: "h199".to_string() });
    let rec = store.transition_approval("a1", Pending, Approved, patch).unwrap();
    assert_eq!(rec.status, Approved);
    assert_eq!(rec.args_hash, "h199");
    assert_eq!(rec.decided_by.as_deref(), Some("carol"));
    assert_eq!(store.approval("a1").unwrap(), Some(rec));
    assert_eq!(ids(store.list_pending_approvals().unwrap()), ["a2", "b1"]);
    let err = store.transition_approval("a1", Pending, Rejected, ApprovalPatch::by("x", NOW)).unwrap_err();
    assert!(matches!(err, ApprovalError::AlreadyDecided { current: Approved, .. }), "{err}");
    store.transition_approval("a1", Approved, Executing, ApprovalPatch::by("exec", NOW + 6)).unwrap();
    let done = store.transition_approval("a1", Executing, Succeeded, ApprovalPatch::by("exec", NOW + 7)).unwrap();
    assert!(done.status.is_final());
    assert_eq!(done.decision_note.as_deref(), Some("lower the amount"));
    store.transition_approval("a2", Pending, Rejected, ApprovalPatch::by("carol", NOW)).unwrap();

    let kinds: Vec<String> = store.list_audit("t").unwrap().into_iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        [
            "approval.requested",
            "approval.requested",
            "approval.approved",
            "approval.executing",
            "approval.succeeded",
            "approval.rejected"
        ]
    );
    let approved_entry = &store.list_audit("t").unwrap()[2];
    assert_eq!(approved_entry.actor, "reviewer");
    assert_eq!(approved_entry.detail["from"], "PENDING");
    assert_eq!(approved_entry.detail["args_hash"], "h199");

    // Null conditions are no conditions: stored, returned and read back as `None` (a JSON form
    // of the record, an export, could not tell them apart).
    let mut null = approval("n1", "v");
    null.conditions = Some(Value::Null);
    store.put_approval(null, "agent").unwrap();
    assert_eq!(store.approval("n1").unwrap().unwrap().conditions, None);
    let mut patch = ApprovalPatch::by("carol", NOW + 1);
    patch.conditions = Some(Value::Null);
    let rec = store.transition_approval("n1", Pending, Approved, patch).unwrap();
    assert_eq!(rec.conditions, None);
    assert_eq!(store.approval("n1").unwrap(), Some(rec));
}

/// Approvals created and moved inside a step commit, all or nothing.
pub fn approvals_in_step_commit(store: &dyn Store) {
    let mut c = StepCommit::new(thread("t")).with_checkpoint(root("t", 0, b"S"));
    c.thread.status = ThreadStatus::Interrupted;
    c.new_approvals.push(approval("a1", "t"));
    let receipt = store.commit_step(c).unwrap();
    assert_eq!(receipt.audit_seqs, [1]);
    assert_eq!(store.approval("a1").unwrap().unwrap().status, ApprovalStatus::Pending);

    let transition =
        |from, to| ApprovalTransition { id: "a1".to_string(), from, to, patch: ApprovalPatch::by("exec", NOW) };
    // A lost compare-and-set refuses the whole commit.
    let mut c = StepCommit::new(thread("t")).with_checkpoint(step("t", 1, 0, &[b"x"]));
    c.approval_transitions.push(transition(ApprovalStatus::Approved, ApprovalStatus::Executing));
    let err = store.commit_step(c).unwrap_err();
    assert!(matches!(err, CommitError::Approval(ApprovalError::AlreadyDecided { .. })), "{err}");
    assert_eq!(store.latest_checkpoint("t").unwrap().unwrap().seq, 0);

    // Two moves of one approval in one commit apply in order.
    let mut c = StepCommit::new(thread("t")).with_checkpoint(step("t", 1, 0, &[b"x"]));
    c.approval_transitions = vec![
        transition(ApprovalStatus::Pending, ApprovalStatus::Approved),
        transition(ApprovalStatus::Approved, ApprovalStatus::Executing),
    ];
    let receipt = store.commit_step(c).unwrap();
    assert_eq!(receipt.audit_seqs, [2, 3]);
    assert_eq!(store.approval("a1").unwrap().unwrap().status, ApprovalStatus::Executing);
}

/// Uncertain outcomes: EXECUTING -> OUTCOME_UNKNOWN, a record created OUTCOME_UNKNOWN, both
/// listed as waiting for a human until decided (succeeded, failed, or approved to run again).
pub fn approvals_outcome_unknown(store: &dyn Store) {
    use ApprovalStatus::{Approved, Executing, Failed, OutcomeUnknown, Pending, Succeeded};
    let ids = |v: Vec<ApprovalRecord>| v.into_iter().map(|a| a.id).collect::<Vec<_>>();
    store.put_approval(approval("a1", "t"), "agent").unwrap();
    store.transition_approval("a1", Pending, Approved, ApprovalPatch::by("alice", NOW)).unwrap();
    store.transition_approval("a1", Approved, Executing, ApprovalPatch::by("exec", NOW)).unwrap();
    store.transition_approval("a1", Executing, OutcomeUnknown, ApprovalPatch::by("exec", NOW)).unwrap();
    let mut effect = approval("e1", "t");
    effect.status = OutcomeUnknown;
    store.put_approval(effect, "exec").unwrap();
    assert_eq!(ids(store.list_pending_approvals().unwrap()), ["a1", "e1"]);
    let err = store.transition_approval("a1", OutcomeUnknown, Executing, ApprovalPatch::by("x", NOW)).unwrap_err();
    assert!(matches!(err, ApprovalError::IllegalTransition { .. }), "{err}");
    store.transition_approval("a1", OutcomeUnknown, Approved, ApprovalPatch::by("bob", NOW)).unwrap();
    let patch = ApprovalPatch { note: Some("{}".into()), ..ApprovalPatch::by("bob", NOW) };
    store.transition_approval("e1", OutcomeUnknown, Succeeded, patch).unwrap();
    assert!(store.list_pending_approvals().unwrap().is_empty());
    assert_eq!(store.approval("e1").unwrap().unwrap().decision_note.as_deref(), Some("{}"));
    let err = store.transition_approval("e1", OutcomeUnknown, Failed, ApprovalPatch::by("x", NOW)).unwrap_err();
    assert!(matches!(err, ApprovalError::AlreadyDecided { current: Succeeded, .. }), "{err}");
    let kinds: Vec<String> = store.list_audit("t").unwrap().into_iter().map(|e| e.kind).collect();
    assert!(kinds.contains(&"approval.outcome_unknown".to_string()), "{kinds:?}");
}

/// 32 threads race PENDING -> APPROVED on one approval: exactly one wins.
pub fn approval_cas_race(store: &dyn Store) {
    store.put_approval(approval("a", "t"), "agent").unwrap();
    let barrier = Barrier::new(32);
    let results: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..32)
            .map(|i| {
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    let mut patch = ApprovalPatch::by(format!("reviewer{i}"), NOW);
                    patch.decided_by = Some(format!("reviewer{i}"));
                    store.transition_approval("a", ApprovalStatus::Pending, ApprovalStatus::Approved, patch)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let winners: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    assert_eq!(winners.len(), 1, "exactly one transition wins");
    let lost = results
        .iter()
        .filter(|r| matches!(r, Err(ApprovalError::AlreadyDecided { current: ApprovalStatus::Approved, .. })))
        .count();
    assert_eq!(lost, 31, "every other caller sees AlreadyDecided");
    let stored = store.approval("a").unwrap().unwrap();
    assert_eq!(stored.decided_by, winners[0].decided_by);
    let approvals_logged = store.list_audit("t").unwrap().iter().filter(|e| e.kind == "approval.approved").count();
    assert_eq!(approvals_logged, 1);
}
