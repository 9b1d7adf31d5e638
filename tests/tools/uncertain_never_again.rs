//! Calls cut off and then not made again by the re-run step: listed for a human as unknown
//! outcomes, with approvals asked after a policy change set aside.

use crate::support::hooked_store;
use crate::support::stores::open_redb;
use crate::uncertain_world::*;
use agentflow::approval::{ApprovalStatus, Approver, Settlement};
use agentflow::prelude::*;
use agentflow::tool::{Decision, Risk, RiskPolicy};
use agentflow::{PendingKind, Run};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::Arc;

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
        let mut store = hooked_store::Hooked::new(Arc::new(open_redb(&path).expect("open store")));
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
    let inner: Arc<dyn agentflow::Store> = Arc::new(open_redb(&path).expect("open store"));
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
    let inner: Arc<dyn agentflow::Store> = Arc::new(open_redb(&path).expect("open store"));
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
        let mut store = hooked_store::Hooked::new(Arc::new(open_redb(&path).expect("open store")));
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
    let store = Arc::new(open_redb(&path).expect("open store"));
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
