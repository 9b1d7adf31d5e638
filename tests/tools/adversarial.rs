//! A standing adversarial suite: a model-based property test of the tool
//! gateway. Random sequences of operations (model replies that swap the
//! tool under an approved call id, reuse or duplicate call ids, change the
//! arguments; human decisions; runs dropped at a random await; deadlines;
//! a lease taken over mid-run; `update_state`; `fork`) are driven against a
//! durable one-node agent that calls the model and the tools itself. After
//! every operation the outside world (a ledger the tool bodies append to)
//! is checked against the store's approval records and audit log:
//!
//! 1. every executed non-read call matches an approval that was APPROVED
//!    for that exact thread, node, tool and canonical arguments (or the
//!    policy's `Run` for its risk class);
//! 2. no approval is executed twice (idempotent re-runs excepted, each
//!    audited as `effect.rerun`);
//! 3. an uncertain outcome of a non-idempotent call is re-run only after a
//!    human's `RunAgain`, and an approved call cut off mid-way is never left
//!    `EXECUTING` once its thread completed (it is settled or listed for a
//!    human as an unknown outcome);
//! 4. a committed state reads back equal to what the run returned, floats
//!    bit for bit.
//!
//! The world, the script and the driver are in `adversarial_world`, `adversarial_script` and
//! `adversarial_driver`.

use crate::adversarial_driver::*;
use crate::adversarial_script::*;
use crate::adversarial_world::*;
use agentflow::approval::ApprovalStatus;
use agentflow::prelude::*;
use proptest::prelude::*;
use std::future::Future;
use std::time::Duration;

fn run_case(case: usize, short_ttl: bool, ops: &[Op]) {
    LEDGER.with(|l| l.borrow_mut().clear());
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let mut world = World::new(&format!("adv-{case}"), short_ttl);
        for op in ops {
            world.apply(op).await;
            world.check();
        }
    });
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn the_gateway_keeps_its_guarantees_under_adversarial_sequences(
        short_ttl in prop::bool::weighted(0.25),
        ops in prop::collection::vec(op(), 1..24),
    ) {
        static CASE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let case = CASE.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        run_case(case, short_ttl, &ops);
    }
}

// ---------------------------------------------------------------- regressions found by the suite

/// Drops `run` as soon as a tool body acted: a crash mid-call.
async fn cut_off_when_acted<F: Future>(run: F) {
    let acted = async {
        while ledger().is_empty() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    };
    tokio::select! {
        _ = run => panic!("the run ended before its call acted"),
        () = acted => {}
    }
}

/// An approved refund cut off mid-call, after which the model (asked again
/// on resume) no longer asks for it: the step completes without the call.
/// The refund may have acted, so its record must not stay `EXECUTING` out
/// of sight: it is listed for a human as an unknown outcome.
#[tokio::test]
async fn an_approved_call_cut_off_and_never_asked_again_is_listed_as_an_unknown_outcome() {
    // With the suite's 25 ms node timeout a stalled machine could time out every attempt of a
    // run before it reached the approval, the refund or `stop`.
    let mut world = World::with_graph(patient_one_node::graph(), "orphan", false);
    let refund = GenCall { id: 0, tool: 3, order: 0, amount: 12.5 * 0.15, hold_ms: 60_000 };
    world.apply(&Op::Drive(vec![Reply::Calls(vec![refund])])).await;
    let waiting = world.waiting();
    assert_eq!(waiting.len(), 1, "{waiting:?}");
    let id = waiting[0].id.clone();
    world.desk.approve(&id, &alice()).unwrap();
    world.script.lock().unwrap().queue.push_back(Reply::Repeat);
    cut_off_when_acted(world.go(None)).await;
    assert_eq!(ledger().len(), 1, "the refund acted once");
    // The model now answers without the refund; the thread completes.
    let done = world.go(None).await.unwrap();
    assert_eq!(done.outcome, Outcome::Completed, "{:?}", done.outcome);
    world.check();
    assert_eq!(ledger().len(), 1, "not refunded again");
    let record = world.desk.get(&id).unwrap().unwrap();
    assert_eq!(record.status, ApprovalStatus::OutcomeUnknown, "{record:?}");
    assert!(world.desk.pending().unwrap().iter().any(|r| r.id == id), "listed for a human");
    let kinds: Vec<String> = world.graph.audit_log("orphan").unwrap().into_iter().map(|e| e.kind).collect();
    assert!(kinds.contains(&"approval.outcome_unknown".to_string()), "{kinds:?}");
}
