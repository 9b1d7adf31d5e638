//! A node that awaits something that never returns (a tool or model call without a timeout, a
//! hang inside `cx.effect`) no longer holds its run, its worker slot and its lease for good: a
//! cancel or a pause reaches the running node, a worker's shutdown has a deadline, and a worker
//! gives each node attempt a time limit.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use agentflow::persist::ThreadStatus;
use agentflow::prelude::*;
use agentflow::{CancellationToken, RedbStore, Store, Worker};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Task {
    /// Whether `work` hangs (in a plain await, or inside an effect).
    hang: Option<String>,
    done: bool,
}

#[derive(Default)]
pub struct Calls {
    work: AtomicU32,
    effect_started: AtomicBool,
}

#[graph(state = Task, deps = Calls, start = work)]
mod hanging {
    use super::*;

    #[node(goto = [END], retry(attempts = 1))]
    async fn work(s: &Task, cx: &Ctx<Calls>) -> Result<Step<Task>, NodeError> {
        cx.deps().work.fetch_add(1, Ordering::SeqCst);
        match s.hang.as_deref() {
            Some("await") => std::future::pending::<()>().await,
            Some("effect") => {
                cx.effect("call", |_key| async {
                    cx.deps().effect_started.store(true, Ordering::SeqCst);
                    std::future::pending::<Result<String, NodeError>>().await
                })
                .await?;
            }
            // Waits for the stop, then tries to start an effect: too late, it never starts.
            Some("effect after the stop") => {
                cx.cancelled().await;
                cx.effect("late", |_key| async {
                    cx.deps().effect_started.store(true, Ordering::SeqCst);
                    Ok::<_, NodeError>("ran".to_string())
                })
                .await?;
            }
            _ => {}
        }
        Ok(goto!(END, Task::update().done(true)))
    }
}

fn hang(how: &str) -> Task {
    Task { hang: Some(how.to_string()), done: false }
}

fn app() -> App<Task, Calls> {
    hanging::graph().app().store(Arc::new(RedbStore::in_memory().unwrap()) as Arc<dyn Store>)
}

async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let began = Instant::now();
    while !done() {
        assert!(began.elapsed() < Duration::from_secs(20), "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_reaches_a_node_that_hangs() {
    let (app, calls, token) = (app(), Calls::default(), CancellationToken::new());
    let run = app.runner(&calls).thread("t").cancel_token(token.clone()).run(hang("await"));
    let cancel = async {
        wait_until("the node runs", || calls.work.load(Ordering::SeqCst) == 1).await;
        token.cancel();
        std::future::pending::<()>().await
    };
    let run = tokio::select! {
        run = tokio::time::timeout(Duration::from_secs(10), run) => run.expect("the cancel did not reach the hung node"),
        () = cancel => unreachable!(),
    };
    assert_eq!(run.unwrap().outcome, Outcome::Cancelled);
    assert_eq!(app.thread("t").unwrap().unwrap().status, ThreadStatus::Cancelled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_waits_for_an_effect_in_flight_only_for_the_grace() {
    let (app, calls, token) = (app(), Calls::default(), CancellationToken::new());
    let run = app
        .runner(&calls)
        .thread("t")
        .cancel_token(token.clone())
        .stop_grace(Duration::from_millis(200))
        .run(hang("effect"));
    let cancel = async {
        wait_until("the effect runs", || calls.effect_started.load(Ordering::SeqCst)).await;
        token.cancel();
        Instant::now()
    };
    let (run, cancelled_at) = tokio::join!(tokio::time::timeout(Duration::from_secs(10), run), cancel);
    let run = run.expect("a hung effect held the cancel off for good").unwrap();
    assert!(cancelled_at.elapsed() >= Duration::from_millis(200), "the effect in flight was given its grace");
    assert_eq!(run.outcome, Outcome::Cancelled);
}

/// Whether an effect a node would start right after a stop started: never, with or without a
/// store, however the node's wake-up and the stop's fall (the node wakes on the stop itself).
async fn effect_started_after_a_stop(app: App<Task, Calls>) -> (Outcome, bool) {
    let (calls, token) = (Calls::default(), CancellationToken::new());
    let runner = app.runner(&calls).cancel_token(token.clone());
    let runner = if app.backing_store().is_some() { runner.thread("t") } else { runner };
    let run = runner.run(hang("effect after the stop"));
    let cancel = async {
        wait_until("the node runs", || calls.work.load(Ordering::SeqCst) == 1).await;
        token.cancel();
    };
    let (run, ()) = tokio::join!(tokio::time::timeout(Duration::from_secs(10), run), cancel);
    let run = run.expect("the node that waits for the stop was not dropped").unwrap();
    (run.outcome, calls.effect_started.load(Ordering::SeqCst))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_effect_starts_after_a_stop() {
    for trial in 0..20 {
        let (outcome, started) = effect_started_after_a_stop(app()).await;
        assert_eq!((outcome, started), (Outcome::Cancelled, false), "with a store, trial {trial}");
        let (outcome, started) = effect_started_after_a_stop(hanging::graph().app()).await;
        assert_eq!((outcome, started), (Outcome::Cancelled, false), "without a store, trial {trial}");
    }
}

fn worker(app: &App<Task, Calls>, calls: Arc<Calls>) -> Worker<Task, Calls> {
    Worker::new(app.clone(), calls).concurrency(1).poll_interval(Duration::from_millis(10))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_request_frees_the_slot_of_a_hung_run() {
    let (app, calls) = (app(), Arc::new(Calls::default()));
    app.submit("hung", &hang("await")).unwrap();
    let stop = CancellationToken::new();
    let handle = tokio::spawn(worker(&app, Arc::clone(&calls)).run(stop.clone()));
    wait_until("the hung run runs", || calls.work.load(Ordering::SeqCst) == 1).await;
    app.submit("next", &Task::default()).unwrap();
    assert!(app.cancel_run("hung").unwrap());
    // With one slot, the next run runs only once the hung one let it go.
    wait_until("the next run completes", || {
        app.thread("next").unwrap().is_some_and(|t| t.status == ThreadStatus::Completed)
    })
    .await;
    assert_eq!(app.thread("hung").unwrap().unwrap().status, ThreadStatus::Cancelled);
    stop.cancel();
    let report = handle.await.unwrap().unwrap();
    assert_eq!((report.controlled, report.completed), (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_request_reaches_a_hung_run_and_the_thread_resumes_later() {
    let (app, calls) = (app(), Arc::new(Calls::default()));
    app.submit("hung", &hang("await")).unwrap();
    let stop = CancellationToken::new();
    let handle = tokio::spawn(worker(&app, Arc::clone(&calls)).run(stop.clone()));
    wait_until("the hung run runs", || calls.work.load(Ordering::SeqCst) == 1).await;
    assert!(app.pause_run("hung").unwrap());
    wait_until("the run is paused", || app.thread("hung").unwrap().is_some_and(|t| t.status == ThreadStatus::Paused))
        .await;
    stop.cancel();
    handle.await.unwrap().unwrap();
    // Paused, not failed: nothing was undone, and the step runs again when resumed.
    let run = app.runner(&*calls).thread("hung").stop_grace(Duration::ZERO).timeout(Duration::from_millis(300));
    let run = run.resume().await.unwrap();
    assert_eq!(calls.work.load(Ordering::SeqCst), 2, "the paused step ran again");
    assert!(matches!(run.outcome, Outcome::BudgetExhausted { .. }), "{:?}", run.outcome);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_shutdown_stops_a_hung_step_at_its_deadline() {
    let (app, calls) = (app(), Arc::new(Calls::default()));
    app.submit("hung", &hang("await")).unwrap();
    let stop = CancellationToken::new();
    let worker = worker(&app, Arc::clone(&calls)).shutdown_deadline(Duration::from_millis(300));
    let handle = tokio::spawn(worker.run(stop.clone()));
    wait_until("the hung run runs", || calls.work.load(Ordering::SeqCst) == 1).await;
    let began = Instant::now();
    stop.cancel();
    let report = tokio::time::timeout(Duration::from_secs(10), handle)
        .await
        .expect("the shutdown waited for the hung step for good")
        .unwrap()
        .unwrap();
    assert!(began.elapsed() >= Duration::from_millis(300), "the step had until the deadline");
    assert_eq!(report.stopped, 1);
    let record = app.thread("hung").unwrap().unwrap();
    assert_eq!(record.status, ThreadStatus::Paused, "left for another worker: {}", record.detail);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_gives_each_node_attempt_a_time_limit() {
    let (app, calls) = (app(), Arc::new(Calls::default()));
    app.submit("hung", &hang("await")).unwrap();
    let stop = CancellationToken::new();
    let worker = worker(&app, Arc::clone(&calls)).node_time_limit(Some(Duration::from_millis(100)));
    let handle = tokio::spawn(worker.run(stop.clone()));
    wait_until("the hung run failed", || app.thread("hung").unwrap().is_some_and(|t| t.status == ThreadStatus::Failed))
        .await;
    let record = app.thread("hung").unwrap().unwrap();
    assert!(record.detail.contains("timed out after 100ms"), "{}", record.detail);
    stop.cancel();
    assert_eq!(handle.await.unwrap().unwrap().failed, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_time_limit_stops_a_node_hung_inside_an_effect_after_the_grace() {
    let (app, calls) = (app(), Calls::default());
    let run = app
        .runner(&calls)
        .thread("t")
        .node_time_limit(Duration::from_millis(100))
        .stop_grace(Duration::from_millis(100))
        .run(hang("effect"));
    let run = tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("an effect that hangs held the node past its time limit for good")
        .unwrap();
    let Outcome::Failed { error, .. } = &run.outcome else { panic!("{:?}", run.outcome) };
    assert!(error.to_string().contains("timed out after 100ms"), "{error}");
    assert!(calls.effect_started.load(Ordering::SeqCst));
}
