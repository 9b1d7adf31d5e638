//! Saga compensation, on an order workflow: create order -> reserve
//! inventory -> charge payment -> ship fails -> refund -> release -> cancel.
//! Each compensation runs once, newest first; a failed one is named and retried on resume; a
//! cancelled run is compensated too; a compensation cut off mid-call waits for a human.

use crate::saga_shop::*;
use crate::support::pg;
use crate::support::temp::temp_dir as tempdir;
use agentflow::persist::{HistoryError, ResumeError, ThreadStatus};
use agentflow::prelude::*;
use agentflow::{Activity, CancellationToken, Event, RedbStore, RunError, Store};
use std::sync::Arc;
use std::sync::atomic::Ordering;

// ---------------------------------------------------------------- tests

#[tokio::test]
async fn a_failed_order_is_undone_newest_first_each_compensation_once() {
    let dir = tempdir("order");
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let shop = Shop::new(&dir);
    let app = app(Arc::clone(&store));
    let mut compensations = Vec::new();
    let run = app
        .runner(&shop)
        .thread("order-1")
        .owner("agent:shop")
        .on_event(|e| {
            if let Event::Activity(Activity::Compensation { compensation, result, .. }) = e {
                compensations.push(format!("{compensation} {result}"));
            }
        })
        .run(Checkout::default())
        .await
        .unwrap();

    let Outcome::Compensated { reason, undone: done, unknown } = &run.outcome else {
        panic!("expected Compensated, got {:?}", run.outcome)
    };
    assert!(reason.contains("shipping failed"), "{reason}");
    assert_eq!(triples(done), undone(&REVERSED));
    assert!(unknown.is_empty(), "{unknown:?}");
    assert_eq!(compensations, ["refund_payment ok", "release_inventory ok", "cancel_order ok"]);

    // What ran, and what changed, in order: each compensation once, newest first,
    // with the arguments built from the forward call's arguments and result.
    assert_eq!(
        lines(&dir, "calls.log"),
        [
            "create_order",
            "reserve_inventory",
            "charge_payment",
            "ship",
            "refund_payment",
            "release_inventory",
            "cancel_order"
        ]
    );
    assert_eq!(
        lines(&dir, "effects.log"),
        [
            "create ord-1 2xlamp",
            "reserve 2xlamp",
            "charge ord-1 4200",
            "refund pay-3 4200",
            "release res-9 (2)",
            "cancel ord-1"
        ]
    );

    // The thread is compensated, the audit log says what was undone, and a
    // resume has nothing left to do.
    assert_eq!(store.thread("order-1").unwrap().unwrap().status, ThreadStatus::Compensated);
    let audit = store.list_audit("order-1").unwrap();
    let kinds: Vec<(&str, &str)> = audit
        .iter()
        .filter(|e| e.kind.starts_with("saga."))
        .map(|e| (e.kind.as_str(), e.detail["compensation"].as_str().unwrap_or_default()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("saga.step", "cancel_order"),
            ("saga.step", "release_inventory"),
            ("saga.step", "refund_payment"),
            ("saga.compensating", ""),
            ("saga.compensated", "refund_payment"),
            ("saga.compensated", "release_inventory"),
            ("saga.compensated", "cancel_order"),
        ]
    );
    let again = app.runner(&shop).thread("order-1").resume().await;
    assert!(
        matches!(again, Err(RunError::Resume(ResumeError::Finished { ref status, .. })) if status == "compensated")
    );
    // Nor does an update bring it back to life: its step's journal says the calls ran, and
    // they were undone.
    let refused = app.update_state("order-1", Checkout::update().shipped(false), "ops").unwrap_err();
    assert!(matches!(refused, HistoryError::Undone { status: "compensated", .. }), "{refused}");
    assert_eq!(store.thread("order-1").unwrap().unwrap().status, ThreadStatus::Compensated);
    let again = app.runner(&shop).thread("order-1").resume().await;
    assert!(matches!(again, Err(RunError::Resume(ResumeError::Finished { .. }))), "{again:?}");
    assert_eq!(lines(&dir, "calls.log").len(), 7);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_failed_compensation_is_named_stops_the_rest_and_resume_retries_it() {
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    failed_compensation_then_resume(store, "refund-down").await;
}

/// The same on PostgreSQL (`AGENTFLOW_PG_URL`; skipped when unset): the
/// `compensating` status and the compensations' journal round-trip there too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_compensation_then_resume_on_postgres() {
    let Some(url) = pg::pg_url() else { return };
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let schema = format!("saga_{}_{nanos}", std::process::id());
    let store = agentflow_store::PostgresStore::builder().schema(schema).open(&url).expect("open the PostgreSQL store");
    failed_compensation_then_resume(Arc::new(store), "refund-down-pg").await;
}

async fn failed_compensation_then_resume(store: Arc<dyn Store>, name: &str) {
    let dir = tempdir(name);
    let shop = Shop::new(&dir);
    shop.refunds_down.store(true, Ordering::SeqCst);
    let app = app(Arc::clone(&store));
    let run = app.runner(&shop).thread("order-2").owner("agent:shop").run(Checkout::default()).await.unwrap();
    let Outcome::CompensationFailed { compensation, tool, error, approval, undone: done, .. } = &run.outcome else {
        panic!("expected CompensationFailed, got {:?}", run.outcome)
    };
    assert_eq!((compensation.as_str(), tool.as_str()), ("refund_payment", "charge_payment"));
    assert!(error.contains("the payment provider is down"), "{error}");
    assert_eq!(*approval, None);
    assert!(done.is_empty());
    // The later compensations did not run: the saga stops for a human.
    assert_eq!(count(&lines(&dir, "calls.log"), "release_inventory"), 0);
    assert_eq!(count(&lines(&dir, "calls.log"), "cancel_order"), 0);
    assert_eq!(store.thread("order-2").unwrap().unwrap().status, ThreadStatus::Compensating);
    let failed = store.list_audit("order-2").unwrap();
    let failed: Vec<_> = failed.iter().filter(|e| e.kind == "saga.compensation_failed").collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].detail["compensation"], "refund_payment");
    // An update would make the thread resumable as a graph again, past the compensation.
    let refused = app.update_state("order-2", Checkout::update().shipped(false), "ops").unwrap_err();
    assert!(matches!(refused, HistoryError::Undone { status: "compensating", .. }), "{refused}");
    assert_eq!(store.thread("order-2").unwrap().unwrap().status, ThreadStatus::Compensating);

    // The provider is back: a resume continues the compensation, not the graph.
    shop.refunds_down.store(false, Ordering::SeqCst);
    let mut nodes_run = Vec::new();
    let run = app
        .runner(&shop)
        .thread("order-2")
        .on_event(|e| {
            if let Event::NodeStarted { node, .. } = e {
                nodes_run.push(node);
            }
        })
        .resume()
        .await
        .unwrap();
    assert!(nodes_run.is_empty(), "a compensating thread resumes its compensation, not its graph: {nodes_run:?}");
    let Outcome::Compensated { reason, undone: done, .. } = &run.outcome else {
        panic!("expected Compensated, got {:?}", run.outcome)
    };
    assert!(reason.contains("shipping failed"), "the reason it started with: {reason}");
    assert_eq!(triples(done), undone(&REVERSED));
    let calls = lines(&dir, "calls.log");
    assert_eq!(count(&calls, "refund_payment"), 2, "{calls:?}");
    assert_eq!((count(&calls, "ship"), count(&calls, "create_order")), (1, 1), "{calls:?}");
    let effects = lines(&dir, "effects.log");
    assert_eq!(effects[3..], ["refund pay-3 4200", "release res-9 (2)", "cancel ord-1"]);
    assert_eq!(store.thread("order-2").unwrap().unwrap().status, ThreadStatus::Compensated);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_cancelled_run_is_compensated_too() {
    let dir = tempdir("cancel");
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let token = CancellationToken::new();
    // Cancelled while it charges: the run stops at the next step boundary, before `deliver`.
    let shop = Shop { cancel: Some((token.clone(), "charge")), ..Shop::new(&dir) };
    let app = app(Arc::clone(&store));
    let run = app.runner(&shop).thread("order-3").cancel_token(token).run(Checkout::default()).await.unwrap();
    let Outcome::Compensated { reason, undone: done, .. } = &run.outcome else {
        panic!("expected Compensated, got {:?}", run.outcome)
    };
    assert_eq!(reason, "Cancelled");
    assert_eq!(triples(done), undone(&REVERSED));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_cancel_that_comes_as_the_last_step_runs_leaves_the_order_completed() {
    // The cancel comes while `deliver` ships, the graph's last step: the step commits the thread
    // `completed`, and there is no step boundary left to stop at. The run used to end
    // `Cancelled` there, mark the completed thread cancelled and undo the shipped order.
    let dir = tempdir("cancel-last");
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let token = CancellationToken::new();
    let shop = Shop { ships: true, cancel: Some((token.clone(), "deliver")), ..Shop::new(&dir) };
    let app = app(Arc::clone(&store));
    let run = app.runner(&shop).thread("order-4").cancel_token(token.clone()).run(Checkout::default()).await.unwrap();
    assert!(token.is_cancelled());
    assert_eq!(run.outcome, Outcome::Completed);
    assert!(run.state.shipped);
    assert_eq!(store.thread("order-4").unwrap().unwrap().status, ThreadStatus::Completed);
    let calls = lines(&dir, "calls.log");
    assert_eq!(calls, ["create_order", "reserve_inventory", "charge_payment", "ship"], "nothing was undone");
    assert_eq!(lines(&dir, "effects.log").last().map(String::as_str), Some("ship ord-1"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_run_without_compensable_calls_keeps_its_outcome() {
    // The same failure before any call completed: nothing to undo, the run is `Failed`.
    #[graph(state = Checkout, deps = Shop, start = only)]
    mod early {
        use super::*;

        #[node(goto = [END])]
        async fn only(_s: &Checkout, cx: &Ctx<Shop>) -> Result<Step<Checkout>, NodeError> {
            Err(cx.compensate("nothing done yet"))
        }
    }
    let dir = tempdir("early");
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let shop = Shop::new(&dir);
    let run = early::graph().app().store(Arc::clone(&store)).runner(&shop).thread("t").run(Checkout::default()).await;
    let run = run.unwrap();
    assert!(matches!(run.outcome, Outcome::Failed { ref node, .. } if node == "only"), "{:?}", run.outcome);
    assert_eq!(store.thread("t").unwrap().unwrap().status, ThreadStatus::Failed);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_compensation_cut_off_mid_call_that_is_not_idempotent_waits_for_a_human() {
    use agentflow::approval::{ApprovalStatus, Approver, RoleAuthorizer, Settlement};
    let dir = tempdir("unknown");
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let acted = Arc::new(tokio::sync::Notify::new());
    let shop = Shop { hang_in_cancel: Some(Arc::clone(&acted)), ..Shop::new(&dir) };
    let app = app(Arc::clone(&store));
    // `cancel_order` acts and never answers; the run is dropped there (standing in for a crash).
    tokio::select! {
        run = app.runner(&shop).thread("order-4").owner("agent:shop").run(Checkout::default()) => {
            panic!("the run should hang in cancel_order: {:?}", run.map(|r| r.outcome))
        }
        () = acted.notified() => {}
    }
    assert_eq!(store.thread("order-4").unwrap().unwrap().status, ThreadStatus::Compensating);

    // Whether it acted is unknown and it is not idempotent: the resume does not run it again.
    let run = app.runner(&shop).thread("order-4").resume().await.unwrap();
    let Outcome::CompensationFailed { compensation, approval: Some(id), undone: done, .. } = &run.outcome else {
        panic!("expected CompensationFailed with a record, got {:?}", run.outcome)
    };
    assert_eq!(compensation, "cancel_order");
    assert_eq!(triples(done), undone(&REVERSED[..2]));
    let record = store.approval(id).unwrap().unwrap();
    assert_eq!((record.status, record.tool.as_str()), (ApprovalStatus::OutcomeUnknown, "cancel_order"));
    assert_eq!(count(&lines(&dir, "calls.log"), "cancel_order"), 1);

    // A human settles it as done: the resume records it and the saga completes, without running it again.
    let desk = app.approvals(RoleAuthorizer::new().role_for(Risk::Reversible, "ops")).unwrap();
    desk.settle(id, &Approver::new("alice", ["ops"]), Settlement::Succeeded(serde_json::json!({}))).unwrap();
    let run = app.runner(&shop).thread("order-4").resume().await.unwrap();
    let Outcome::Compensated { undone: done, .. } = &run.outcome else {
        panic!("expected Compensated, got {:?}", run.outcome)
    };
    assert_eq!(triples(done), undone(&REVERSED));
    assert_eq!(count(&lines(&dir, "calls.log"), "cancel_order"), 1);
    assert_eq!(count(&lines(&dir, "effects.log"), "cancel ord-1"), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

/// "Run again" written around the desk (a raw store transition with no decider) does not run a
/// compensation cut off mid-call again, as it runs no node's call again.
#[tokio::test]
async fn a_compensation_moved_to_run_again_without_a_decider_is_not_run_again() {
    use agentflow::approval::ApprovalStatus;
    let dir = tempdir("forged");
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let acted = Arc::new(tokio::sync::Notify::new());
    let shop = Shop { hang_in_cancel: Some(Arc::clone(&acted)), ..Shop::new(&dir) };
    let app = app(Arc::clone(&store));
    tokio::select! {
        run = app.runner(&shop).thread("order-6").owner("agent:shop").run(Checkout::default()) => {
            panic!("the run should hang in cancel_order: {:?}", run.map(|r| r.outcome))
        }
        () = acted.notified() => {}
    }
    let run = app.runner(&shop).thread("order-6").resume().await.unwrap();
    let Outcome::CompensationFailed { approval: Some(id), .. } = &run.outcome else {
        panic!("expected CompensationFailed with a record, got {:?}", run.outcome)
    };
    let patch = agentflow_store::ApprovalPatch::by("script", 1);
    store.transition_approval(id, ApprovalStatus::OutcomeUnknown, ApprovalStatus::Approved, patch).unwrap();
    let resumed = app.runner(&shop).thread("order-6").resume().await.unwrap();
    assert_eq!(count(&lines(&dir, "calls.log"), "cancel_order"), 1, "run again on a decision nobody made");
    // The saga ends naming the record (the compensations behind it were made before), not stuck
    // `compensating` on an error no desk decision could clear.
    let Outcome::CompensationFailed { compensation, approval: Some(named), error, .. } = &resumed.outcome else {
        panic!("expected CompensationFailed, got {:?}", resumed.outcome)
    };
    assert_eq!((compensation.as_str(), named), ("cancel_order", id));
    assert!(error.contains("no approver's decision"), "{error}");
    let _ = std::fs::remove_dir_all(&dir);
}
