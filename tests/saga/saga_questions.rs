//! Compensation and the questions a thread waits on: an answer of the wrong shape undoes
//! nothing, a refused value or a failure for good beside it, a worker's cancel, a fork of a
//! compensated order, and a child that took the answer and failed later.

use crate::saga_shop::*;
use crate::support::temp::temp_dir as tempdir;
use agentflow::persist::ThreadStatus;
use agentflow::prelude::*;
use agentflow::tool::RiskPolicy;
use agentflow::{CancellationToken, RedbStore, RunError, Store};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// A go-ahead of the wrong shape fails the run, spends the answer and leaves the thread waiting
/// for a new one (as the README says): it undoes nothing. It used to count as a failure for good
/// and refund, release and cancel the order.
#[tokio::test]
async fn an_answer_of_the_wrong_shape_undoes_nothing_and_the_thread_waits_for_a_new_one() {
    let dir = tempdir("wrong-shape");
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = confirmed_app(Arc::clone(&store));
    let shop = Shop { ships: true, ..Shop::new(&dir) };
    let run = app.runner(&shop).thread("order-5").run(Checkout::default()).await.unwrap();
    assert!(matches!(run.outcome, Outcome::Interrupted { .. }), "{}", run.outcome);

    let run = app.runner(&shop).thread("order-5").resume_with("yes please").await.unwrap();
    let Outcome::Failed { node, error } = &run.outcome else { panic!("expected Failed, got {}", run.outcome) };
    assert_eq!(node, "confirm");
    assert!(error.to_string().contains("does not have the shape it expects"), "{error}");
    assert_eq!(store.thread("order-5").unwrap().unwrap().status, ThreadStatus::Failed);
    assert_eq!(lines(&dir, "calls.log"), ["create_order", "charge_payment"], "nothing was undone");

    // Answered again with the right shape, the order ships.
    let run = app.runner(&shop).thread("order-5").resume_with(true).await.unwrap();
    assert_eq!(run.outcome, Outcome::Completed);
    assert!(run.state.shipped);
    assert_eq!(lines(&dir, "calls.log"), ["create_order", "charge_payment", "ship"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A thread cancelled while it waits for a go-ahead is compensating; its refund fails, so it
/// stays `compensating`. A value given to it then is refused: the graph does not run again (it
/// used to ship the half-undone order and end `Completed`). `resume` finishes the compensation.
#[tokio::test]
async fn a_compensating_thread_refuses_a_value_and_its_graph_does_not_run_again() {
    let dir = tempdir("compensating-value");
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = confirmed_app(Arc::clone(&store));
    let shop = Shop { ships: true, ..Shop::new(&dir) };
    let run = app.runner(&shop).thread("order-6").run(Checkout::default()).await.unwrap();
    assert!(matches!(run.outcome, Outcome::Interrupted { .. }), "{}", run.outcome);

    shop.refunds_down.store(true, Ordering::SeqCst);
    let cancelled = CancellationToken::new();
    cancelled.cancel();
    let run = app.runner(&shop).thread("order-6").cancel_token(cancelled).resume().await.unwrap();
    assert!(matches!(run.outcome, Outcome::CompensationFailed { .. }), "{}", run.outcome);
    assert_eq!(store.thread("order-6").unwrap().unwrap().status, ThreadStatus::Compensating);

    let refused = app.runner(&shop).thread("order-6").resume_with(true).await;
    assert!(
        matches!(&refused, Err(RunError::NotWaiting { status, .. }) if status.contains("compensating")),
        "{:?}",
        refused.map(|r| r.outcome)
    );
    assert_eq!(count(&lines(&dir, "calls.log"), "ship"), 0, "the graph did not run again");
    assert_eq!(store.thread("order-6").unwrap().unwrap().status, ThreadStatus::Compensating);

    shop.refunds_down.store(false, Ordering::SeqCst);
    let run = app.runner(&shop).thread("order-6").resume().await.unwrap();
    let Outcome::Compensated { undone: done, .. } = &run.outcome else { panic!("{}", run.outcome) };
    assert_eq!(
        triples(done),
        undone(&[("charge", "charge_payment", "refund_payment"), ("create", "create_order", "cancel_order")])
    );
    assert_eq!(count(&lines(&dir, "calls.log"), "ship"), 0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The same through a subgraph: the parent's `resume_with` hands a go-ahead of the wrong shape
/// down to the child that asks. The child fails where it waits, and so does the parent's node:
/// nothing is undone (the parent's order used to be cancelled), and the right answer, given to
/// the parent again, reaches the child.
#[tokio::test]
async fn an_answer_of_the_wrong_shape_to_a_subgraphs_question_undoes_nothing_in_the_parent() {
    let dir = tempdir("wrong-shape-child");
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = confirmed_by_child::graph().app().store(Arc::clone(&store)).policy(RiskPolicy::allow_all());
    let shop = Shop::new(&dir);
    let run = app.runner(&shop).thread("order-7").run(Checkout::default()).await.unwrap();
    assert!(matches!(run.outcome, Outcome::Interrupted { .. }), "{}", run.outcome);

    let run = app.runner(&shop).thread("order-7").resume_with("yes please").await.unwrap();
    let Outcome::Failed { node, error } = &run.outcome else { panic!("expected Failed, got {}", run.outcome) };
    assert_eq!(node, "confirm");
    assert_eq!(error.class, agentflow::ErrorClass::NeedsInput, "{error}");
    assert_eq!(store.thread("order-7").unwrap().unwrap().status, ThreadStatus::Failed);
    assert_eq!(lines(&dir, "calls.log"), ["create_order"], "nothing was undone");

    let run = app.runner(&shop).thread("order-7").resume_with(true).await.unwrap();
    assert_eq!(run.outcome, Outcome::Completed);
    assert!(run.state.shipped);
    assert_eq!(lines(&dir, "calls.log"), ["create_order"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// One node of a step refuses an answer of the wrong shape while another fails for good: the
/// run fails for good (the refusal came first in declaration order, but only a person's new
/// answer would unblock it, and nothing will unblock the other) and the order is undone.
#[tokio::test]
async fn a_failure_for_good_beside_a_refused_answer_in_one_step_undoes_the_order() {
    #[graph(state = Checkout, deps = Shop, start = create)]
    mod both {
        use super::*;

        #[node(goto = [ask, refuse], tools = [create_order])]
        async fn create(_s: &Checkout, cx: &Ctx<Shop>) -> Result<Step<Checkout>, NodeError> {
            cx.run_tool(create_order, serde_json::json!({ "item": "lamp", "qty": 2 })).await?;
            Ok(goto!([ask, refuse], Checkout::update().order_id(Some("ord-1".to_string()))))
        }

        #[node(goto = [END], interrupt)]
        async fn ask(_s: &Checkout, cx: &Ctx<Shop>) -> Result<Step<Checkout>, NodeError> {
            let go: bool = cx.interrupt(serde_json::json!({ "ship": "ord-1" }))?;
            Ok(goto!(END, Checkout::update().shipped(go)))
        }

        /// Asks too (any value will do), then fails for good.
        #[node(goto = [END], interrupt)]
        async fn refuse(_s: &Checkout, cx: &Ctx<Shop>) -> Result<Step<Checkout>, NodeError> {
            let _seen: serde_json::Value = cx.interrupt(serde_json::json!({ "stock": "check" }))?;
            Err(cx.compensate("the warehouse burned down"))
        }
    }
    let dir = tempdir("both");
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = both::graph().app().store(Arc::clone(&store)).policy(RiskPolicy::allow_all());
    let run = app.runner(&Shop::new(&dir)).thread("order-8").run(Checkout::default()).await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{}", run.outcome) };
    let id = |node: &str| pending.iter().find(|p| p.node == node).unwrap().question_id();
    // Each gets an answer of the same shape: `ask` refuses its shape, `refuse` fails for good.
    let answer = |node: &str| {
        let id = id(node);
        let shop = Shop::new(&dir);
        let app = app.clone();
        async move { app.runner(&shop).thread("order-8").resume_answering(&id, "yes please").await.unwrap() }
    };
    let run = answer("ask").await;
    assert!(matches!(run.outcome, Outcome::Interrupted { .. }), "{}", run.outcome);
    let run = answer("refuse").await;
    let Outcome::Compensated { reason, undone: done, .. } = &run.outcome else { panic!("{}", run.outcome) };
    assert!(reason.contains("`refuse`") && reason.contains("burned down"), "{reason}");
    assert_eq!(triples(done), undone(&[("create", "create_order", "cancel_order")]));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Under a worker: a thread waiting for its go-ahead is cancelled from another process's point
/// of view (`cancel_run`); a worker claims the request, and the cancelled run undoes the order,
/// newest call first, each compensation once. The row leaves the queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_cancelling_a_waiting_order_undoes_it() {
    let dir = tempdir("worker-cancel");
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = confirmed_app(Arc::clone(&store));
    app.submit("order-9", &Checkout::default()).unwrap();
    let shop = Arc::new(Shop::new(&dir));
    let stop = CancellationToken::new();
    let worker = agentflow::Worker::new(app.clone(), Arc::clone(&shop)).poll_interval(Duration::from_millis(10));
    let handle = tokio::spawn(worker.run(stop.clone()));
    let began = std::time::Instant::now();
    while store.thread("order-9").unwrap().is_none_or(|t| t.status != ThreadStatus::Interrupted) {
        assert!(began.elapsed() < Duration::from_secs(30), "the run never waited for its go-ahead");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let asked = tokio::task::spawn_blocking({
        let app = app.clone();
        move || app.cancel_run("order-9")
    })
    .await
    .unwrap()
    .unwrap();
    assert!(asked);
    while !app.live_runs().unwrap().is_empty() {
        assert!(began.elapsed() < Duration::from_secs(30), "the cancelled run stayed queued");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop.cancel();
    let report = handle.await.unwrap().unwrap();
    assert_eq!(store.thread("order-9").unwrap().unwrap().status, ThreadStatus::Compensated);
    assert_eq!(
        lines(&dir, "calls.log"),
        ["create_order", "charge_payment", "refund_payment", "cancel_order"],
        "each compensation once, newest first; nothing shipped"
    );
    assert_eq!(report.controlled, 1, "{report:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A compensated order cannot be carried on (`update_state` refuses it), but it can be forked at
/// a checkpoint to run again, as the README says: the new branch runs its steps afresh, ships
/// this time, and completes; the old branch's calls and their compensations stay in the log.
#[tokio::test]
async fn a_compensated_order_forked_at_a_checkpoint_runs_again() {
    let dir = tempdir("fork-compensated");
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = app(Arc::clone(&store));
    let run = app.runner(&Shop::new(&dir)).thread("order-10").run(Checkout::default()).await.unwrap();
    assert!(matches!(run.outcome, Outcome::Compensated { .. }), "{}", run.outcome);
    assert_eq!(store.thread("order-10").unwrap().unwrap().status, ThreadStatus::Compensated);
    let before_deliver = app
        .history("order-10")
        .unwrap()
        .into_iter()
        .find(|c| c.cursor == ["deliver"])
        .expect("the checkpoint before `deliver`")
        .seq;
    app.fork("order-10", before_deliver, "ops").unwrap();
    let shop = Shop { ships: true, ..Shop::new(&dir) };
    let run = app.runner(&shop).thread("order-10").resume().await.unwrap();
    assert_eq!(run.outcome, Outcome::Completed);
    assert!(run.state.shipped);
    let calls = lines(&dir, "calls.log");
    assert_eq!(calls.last().map(String::as_str), Some("ship"));
    assert_eq!(count(&calls, "ship"), 2, "shipping failed once, then ran again on the new branch");
    assert_eq!(count(&calls, "create_order"), 1, "the steps before the fork point are not run again");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A node that fails with a needs-input error of its own (no question asked, no answer refused)
/// fails for good as far as the saga goes: the order is undone, as for any other failure. Only
/// an answer refused for its shape leaves the order waiting.
#[tokio::test]
async fn a_needs_input_failure_that_refused_no_answer_undoes_the_order() {
    #[graph(state = Checkout, deps = Shop, start = create)]
    mod stuck_order {
        use super::*;

        #[node(goto = [address], tools = [create_order])]
        async fn create(_s: &Checkout, cx: &Ctx<Shop>) -> Result<Step<Checkout>, NodeError> {
            cx.run_tool(create_order, serde_json::json!({ "item": "lamp", "qty": 2 })).await?;
            Ok(goto!(address))
        }

        #[node(goto = [END])]
        async fn address(_s: &Checkout) -> Result<Step<Checkout>, NodeError> {
            Err(NodeError::needs_input("no shipping address on file"))
        }
    }
    let dir = tempdir("needs-input");
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = stuck_order::graph().app().store(Arc::clone(&store)).policy(RiskPolicy::allow_all());
    let run = app.runner(&Shop::new(&dir)).thread("order-11").run(Checkout::default()).await.unwrap();
    let Outcome::Compensated { undone: done, .. } = &run.outcome else { panic!("{}", run.outcome) };
    assert_eq!(triples(done), undone(&[("create", "create_order", "cancel_order")]));
    let _ = std::fs::remove_dir_all(&dir);
}

#[graph(state = Checkout, deps = Shop, start = ask)]
mod go_then_stuck {
    use super::*;

    #[node(goto = [check], interrupt)]
    async fn ask(s: &Checkout, cx: &Ctx<Shop>) -> Result<Step<Checkout>, NodeError> {
        let go: bool = cx.interrupt(serde_json::json!({ "ship": s.order_id }))?;
        Ok(goto!(check, Checkout::update().shipped(go)))
    }

    #[node(goto = [END])]
    async fn check(_s: &Checkout) -> Result<Step<Checkout>, NodeError> {
        Err(NodeError::needs_input("no shipping address on file"))
    }
}

#[graph(state = Checkout, deps = Shop, start = create)]
mod stuck_parent {
    use super::*;

    #[node(goto = [confirm], tools = [create_order])]
    async fn create(_s: &Checkout, cx: &Ctx<Shop>) -> Result<Step<Checkout>, NodeError> {
        cx.run_tool(create_order, serde_json::json!({ "item": "lamp", "qty": 2 })).await?;
        Ok(goto!(confirm))
    }

    #[node(goto = [END], subgraphs = [go_then_stuck])]
    async fn confirm(s: &Checkout, cx: &Ctx<Shop>) -> Result<Step<Checkout>, NodeError> {
        cx.subgraph(go_then_stuck::graph(), s.clone()).await?;
        Ok(goto!(END))
    }
}

/// The child takes the go-ahead (it decodes), commits that step, and a later step of the child
/// fails with a needs-input error of its own: the child moved on, so the parent no longer waits
/// on the question it answered (nobody would read a second answer), and its failure undoes the
/// order as any other.
#[tokio::test]
async fn a_child_that_took_the_answer_and_failed_later_leaves_no_question_behind() {
    let dir = tempdir("child-moved-on");
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = stuck_parent::graph().app().store(Arc::clone(&store)).policy(RiskPolicy::allow_all());
    let shop = Shop::new(&dir);
    let run = app.runner(&shop).thread("order-12").run(Checkout::default()).await.unwrap();
    assert!(matches!(run.outcome, Outcome::Interrupted { .. }), "{}", run.outcome);
    let run = app.runner(&shop).thread("order-12").resume_with(true).await.unwrap();
    let Outcome::Compensated { undone: done, .. } = &run.outcome else { panic!("{}", run.outcome) };
    assert_eq!(triples(done), undone(&[("create", "create_order", "cancel_order")]));
    assert!(
        app.pending("order-12").unwrap().iter().all(|p| p.kind != agentflow::PendingKind::Interrupt),
        "no question left behind: {:?}",
        app.pending("order-12")
    );
    let _ = std::fs::remove_dir_all(&dir);
}
