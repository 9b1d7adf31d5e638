//! A follow-up queued behind a thread that is compensating waits for the compensation to end:
//! a cancel asked of the thread meanwhile (it is being undone already) does not let the
//! follow-up run over the half-undone order.

use crate::saga_shop::*;
use crate::support::temp::temp_dir as tempdir;
use agentflow::persist::ThreadStatus;
use agentflow::prelude::*;
use agentflow::{CancellationToken, Multitask, RedbStore, Store, Worker};
use agentflow_store::{QueuedRun, RunWait};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

const THREAD: &str = "order-f";

/// A shop whose refunds are down, and an app with thread [`THREAD`] run outside the queue and
/// left compensating (its refund failed).
async fn compensating(tag: &str) -> (std::path::PathBuf, Arc<dyn Store>, Arc<Shop>, App<Checkout, Shop>) {
    let dir = tempdir(tag);
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let shop = Arc::new(Shop::new(&dir));
    shop.refunds_down.store(true, Ordering::SeqCst);
    let app = app(Arc::clone(&store));
    let run = app.runner(&*shop).thread(THREAD).owner("agent:shop").run(Checkout::default()).await.unwrap();
    assert!(matches!(run.outcome, Outcome::CompensationFailed { .. }), "{}", run.outcome);
    assert_eq!(store.thread(THREAD).unwrap().unwrap().status, ThreadStatus::Compensating);
    (dir, store, shop, app)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_of_a_compensating_thread_does_not_let_its_follow_up_run() {
    let (dir, store, shop, app) = compensating("compensating-follow-up").await;
    let status = || store.thread(THREAD).unwrap().unwrap().status;
    let shipped = count(&lines(&dir, "calls.log"), "ship");

    // Queued behind a run held for the compensating thread.
    app.submit_follow_up(THREAD, &Checkout::update().shipped(false), Multitask::Enqueue, "ops").unwrap();
    let row = || -> Option<QueuedRun> { store.scan_runs().unwrap().items.into_iter().find(|r| r.thread == THREAD) };
    assert_eq!(row().map(|r| (r.wait, r.follow_up)), Some((RunWait::Held, false)));
    // A cancel makes the held run claimable.
    assert!(app.cancel_run(THREAD).unwrap());
    let stop = CancellationToken::new();
    let worker = Worker::new(app.clone(), Arc::clone(&shop)).poll_interval(Duration::from_millis(10));
    let handle = tokio::spawn(worker.run(stop.clone()));
    let deadline = Instant::now() + Duration::from_secs(60);
    // Until a worker claimed it and settled it.
    while row().is_some_and(|r| !r.follow_up && (r.claims == 0 || r.control.is_some() || r.lease.is_some())) {
        assert!(Instant::now() < deadline, "no worker took the held run: {:?}", row());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop.cancel();
    handle.await.unwrap().unwrap();
    // Held again: the follow-up still waits, the thread is still compensating.
    let held = row().expect("the held run stays queued");
    assert_eq!((held.wait, held.follow_up, held.control), (RunWait::Held, false, None), "{held:?}");
    assert_eq!(store.list_follow_ups(THREAD).unwrap().len(), 1);
    assert_eq!(status(), ThreadStatus::Compensating);
    assert_eq!(count(&lines(&dir, "calls.log"), "ship"), shipped, "the graph did not run again");
}

/// An `interrupt` follow-up of a thread that is compensating outside the queue (its run was not
/// queued) does not restart it over the half-undone order: it is queued as `enqueue` queues it,
/// behind a run held for the thread, so a resume still continues the compensation, and the
/// follow-up runs once the compensation ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_follow_up_waits_for_the_compensation_of_a_thread_outside_the_queue() {
    let (dir, store, shop, app) = compensating("compensating-interrupt").await;
    let status = || store.thread(THREAD).unwrap().unwrap().status;
    let refunds = || count(&lines(&dir, "calls.log"), "refund_payment");
    let tried = refunds();

    app.submit_follow_up(THREAD, &Checkout::update().shipped(false), Multitask::Interrupt, "ops").unwrap();
    let row = || -> Option<QueuedRun> { store.scan_runs().unwrap().items.into_iter().find(|r| r.thread == THREAD) };
    assert_eq!(row().map(|r| (r.wait, r.follow_up)), Some((RunWait::Held, false)), "held for the thread");
    assert_eq!(store.list_follow_ups(THREAD).unwrap().len(), 1);
    assert_eq!(status(), ThreadStatus::Compensating);
    // The compensation is continued by a resume: the refunds work again.
    shop.refunds_down.store(false, Ordering::SeqCst);
    app.submit_resume(THREAD).unwrap();
    let stop = CancellationToken::new();
    let worker = Worker::new(app.clone(), Arc::clone(&shop)).poll_interval(Duration::from_millis(10));
    let handle = tokio::spawn(worker.run(stop.clone()));
    let deadline = Instant::now() + Duration::from_secs(60);
    while row().is_some() || !store.list_follow_ups(THREAD).unwrap().is_empty() {
        assert!(Instant::now() < deadline, "the thread's runs did not end: {:?}", row());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop.cancel();
    handle.await.unwrap().unwrap();
    assert!(refunds() > tried, "the compensation went on");
    let kinds: Vec<String> = store.list_audit(THREAD).unwrap().into_iter().map(|e| e.kind).collect();
    let compensated = kinds.iter().position(|k| k.contains("compensat")).expect("the compensation ended");
    let restarted = kinds.iter().position(|k| k == "run.follow_up").expect("the follow-up ran");
    assert!(compensated < restarted, "{kinds:?}");
}
