//! A worker whose lease on a claimed thread is lost between the claim and the run's first
//! commit: the commit is refused inside the store, nothing of the run is written, and the
//! worker reports the run as lost (not failed) and leaves the queue row to the new holder.
//! And a worker whose own claim takes back a thread it still runs (the run's lease looked
//! lapsed): the run loses its lease, and the worker runs the thread again at once under the
//! new claim.
//!
//! The lease is taken from under the worker by a store that, right after handing out a claim,
//! lets another holder take the thread's lease (as if the claim's lease had expired: the
//! "thief" asks at a time past its expiry). Everything else is a plain `RedbStore` or
//! `PostgresStore` (skipped with one line without `AGENTFLOW_PG_URL`).

use crate::support::hooked_store;
use crate::support::pg;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use agentflow::prelude::*;
use agentflow::{CancellationToken, RedbStore, Store, Worker};
use agentflow_store::LeaseError;
use hooked_store::Hooked;
use serde::{Deserialize, Serialize};

const LIMIT: Duration = Duration::from_secs(60);
const THIEF: &str = "thief";

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
pub struct Count {
    #[reduce(add)]
    pub n: u64,
}

#[derive(Default)]
pub struct Runs {
    nodes: AtomicU32,
}

#[graph(state = Count, deps = Runs, start = one)]
mod two_steps {
    use super::*;

    #[node(goto = [two])]
    async fn one(_s: &Count, deps: &Runs) -> Step<Count> {
        deps.nodes.fetch_add(1, Ordering::SeqCst);
        goto!(two, Count::update().n(1))
    }

    #[node(goto = [END])]
    async fn two(_s: &Count, deps: &Runs) -> Step<Count> {
        deps.nodes.fetch_add(1, Ordering::SeqCst);
        goto!(END, Count::update().n(1))
    }
}

/// A store whose claims let [`THIEF`] take each claimed thread's lease right after the claim,
/// before the claiming worker wrote anything; `stolen` is set once it did.
fn stealing(inner: Arc<dyn Store>, stolen: Arc<AtomicBool>) -> Hooked {
    let mut store = Hooked::new(inner);
    store.after_claim = Some(Box::new(move |inner: &dyn Store, claims: &[agentflow_store::QueuedRun], now: u64| {
        for claim in claims {
            let expired = claim.lease.as_ref().map_or(now, |l| l.expires_at) + 1;
            let lease = inner.acquire_lease(&claim.thread, THIEF, 600_000, expired);
            assert!(lease.is_ok(), "the thief takes the expired-looking lease: {lease:?}");
            stolen.store(true, Ordering::SeqCst);
        }
    }));
    store
}

async fn lost_between_the_claim_and_the_first_commit(inner: Arc<dyn Store>) {
    let stolen = Arc::new(AtomicBool::new(false));
    let store = Arc::new(stealing(inner, Arc::clone(&stolen)));
    let app = two_steps::graph().app().store(Arc::clone(&store) as Arc<dyn Store>);
    app.submit("t", &Count::default()).unwrap();

    let deps = Arc::new(Runs::default());
    let stop = CancellationToken::new();
    let worker = Worker::new(app.clone(), Arc::clone(&deps)).poll_interval(Duration::from_millis(10));
    let handle = tokio::spawn(worker.run(stop.clone()));
    let began = std::time::Instant::now();
    while !stolen.load(Ordering::SeqCst) {
        assert!(began.elapsed() < LIMIT, "timed out waiting for the claim");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Shutdown lets the claimed run end first, then returns the report.
    stop.cancel();
    let report = tokio::time::timeout(LIMIT, handle).await.expect("the worker stops").unwrap().unwrap();

    // The run's first commit (the input checkpoint) was refused: no thread, no node ran.
    assert_eq!(app.thread("t").unwrap(), None, "nothing of the run was committed");
    assert_eq!(deps.nodes.load(Ordering::SeqCst), 0, "no node ran");
    // Reported as a lost lease, not as a failure.
    assert_eq!((report.claimed, report.lost, report.failed), (1, 1, 0), "{report:?}");
    // The thread's lease is still the thief's: the worker neither released nor overwrote it.
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    let taken = store.inner.acquire_lease("t", "someone-else", 1_000, now);
    assert!(
        matches!(&taken, Err(LeaseError::ThreadBusy { holder, .. }) if holder == THIEF),
        "the lease stays with the holder that took it: {taken:?}"
    );
    // The run is still queued, for whoever holds the thread now.
    assert_eq!(app.live_runs().unwrap().iter().filter(|r| r.thread == "t").count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redb_a_lease_lost_between_the_claim_and_the_first_commit_writes_nothing_and_is_reported_lost() {
    lost_between_the_claim_and_the_first_commit(Arc::new(RedbStore::in_memory().expect("in-memory store"))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_lease_lost_between_the_claim_and_the_first_commit_writes_nothing_and_is_reported_lost() {
    let Some(url) = pg::pg_url() else { return };
    let schema = format!("worker_lease_lost_{}", std::process::id());
    let store =
        agentflow_store::PostgresStore::builder().schema(&schema).open(&url).expect("open the PostgreSQL store");
    lost_between_the_claim_and_the_first_commit(Arc::new(store)).await;
}

// ------------------------------------------------ a claim of a thread the worker still runs

#[derive(Default)]
pub struct Gate {
    open: AtomicBool,
    started: AtomicU32,
}

#[graph(state = Count, deps = Gate, start = wait)]
mod gated {
    use super::*;

    /// Waits until the test opens the gate.
    #[node(goto = [END])]
    async fn wait(_s: &Count, deps: &Gate) -> Step<Count> {
        deps.started.fetch_add(1, Ordering::SeqCst);
        while !deps.open.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        goto!(END, Count::update().n(1))
    }
}

/// A store over `inner` whose claims see the clock `skew` ahead (a lease looks lapsed to them
/// when it is set), and that counts the claims of `thread` in `claims`; `on_reclaim` is cancelled
/// inside the claim that takes `thread` a second time.
fn skewed(
    inner: Arc<dyn Store>,
    thread: &'static str,
    on_reclaim: Option<CancellationToken>,
) -> (Hooked, Arc<AtomicU64>, Arc<AtomicU32>) {
    let (skew, claims) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU32::new(0)));
    let mut store = Hooked::new(inner);
    let clock = Arc::clone(&skew);
    store.claim_clock = Some(Box::new(move |now| now + clock.load(Ordering::SeqCst)));
    let counted = Arc::clone(&claims);
    store.after_claim = Some(Box::new(move |_: &dyn Store, claimed: &[agentflow_store::QueuedRun], _| {
        let mine = claimed.iter().filter(|c| c.thread == thread).count() as u32;
        let before = counted.fetch_add(mine, Ordering::SeqCst);
        if let Some(token) = &on_reclaim
            && before < 2
            && before + mine >= 2
        {
            token.cancel();
        }
    }));
    (store, skew, claims)
}

/// A run's lease lapses while its worker still has it in hand (a renewal that came too late):
/// the worker's next claim takes the thread back (its clock a minute ahead makes the lease look
/// lapsed), which revokes the running run's lease, and the run then ends having lost it. The
/// worker runs the thread under the claim it just made, at once. Before, it dropped that claim
/// ("the running one goes on") and the row sat claimed, unused, until the new lease expired
/// (over a minute here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_reclaims_a_thread_it_runs_runs_it_again_once_the_old_run_lost_its_lease() {
    let (store, skew, claims) = skewed(Arc::new(RedbStore::in_memory().expect("in-memory store")), "g", None);
    let app = gated::graph().app().store(Arc::new(store) as Arc<dyn Store>);
    app.submit("g", &Count::default()).unwrap();
    let deps = Arc::new(Gate::default());
    let stop = CancellationToken::new();
    let worker = Worker::new(app.clone(), Arc::clone(&deps))
        .concurrency(4)
        .lease_ttl(Duration::from_secs(3))
        .poll_interval(Duration::from_millis(10));
    let handle = tokio::spawn(worker.run(stop.clone()));
    let began = std::time::Instant::now();
    while deps.started.load(Ordering::SeqCst) == 0 {
        assert!(began.elapsed() < LIMIT, "timed out waiting for the run to start");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(claims.load(Ordering::SeqCst), 1);
    // The next claim sees the run's lease as lapsed and takes the thread back.
    skew.store(60_000, Ordering::SeqCst);
    while claims.load(Ordering::SeqCst) < 2 {
        assert!(began.elapsed() < LIMIT, "timed out waiting for the claim to take the thread back");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    skew.store(0, Ordering::SeqCst);
    // The old run, revoked, loses its lease at its next renewal (a second); the claim's lease
    // runs over a minute: only a run started under that claim gets to the node again in time.
    let began = std::time::Instant::now();
    while deps.started.load(Ordering::SeqCst) < 2 {
        assert!(began.elapsed() < Duration::from_secs(30), "the thread was left claimed and unused");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    deps.open.store(true, Ordering::SeqCst);
    while !app.live_runs().unwrap().is_empty() {
        assert!(began.elapsed() < LIMIT, "timed out waiting for the run to complete");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop.cancel();
    let report = tokio::time::timeout(LIMIT, handle).await.expect("the worker stops").unwrap().unwrap();
    assert_eq!((report.claimed, report.lost, report.completed, report.failed), (2, 1, 1, 0), "{report:?}");
    assert_eq!(app.state("g").unwrap().unwrap().state.n, 1, "the lost run committed nothing");
}

/// One store failure does not drop a long-lived thread from the queue: a thread claimed many
/// times already (every wake-up claims it again) whose run fails on the store once stays
/// queued, and the next claim finishes it. (The count was the row's claims over its whole
/// life, so the first passing fault of such a thread removed it for good.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_store_failure_does_not_drop_a_thread_claimed_many_times_from_the_queue() {
    let inner: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let app = two_steps::graph().app().store(Arc::clone(&inner));
    app.submit("long", &Count::default()).unwrap();
    // The thread's row was claimed and handed back five times already (as a thread that slept
    // or waited for people five times is).
    for i in 0..5 {
        let at = agentflow::timer::now_ms() + i;
        assert_eq!(inner.claim_runs(two_steps::graph().name(), "earlier", 60_000, at, 1).unwrap().len(), 1);
        assert!(
            inner
                .settle_run("long", "earlier", &agentflow_store::Settle::park(agentflow_store::RunWait::Ready))
                .unwrap()
        );
        inner.release_lease("long", "earlier").unwrap();
    }
    assert_eq!(app.live_runs().unwrap()[0].claims, 5);
    let mut store = Hooked::new(Arc::clone(&inner));
    let failed = Arc::new(AtomicBool::new(false));
    let once = Arc::clone(&failed);
    store.fail_commit = Some(Box::new(move |_| {
        (!once.swap(true, Ordering::SeqCst))
            .then(|| agentflow_store::CommitError::Invalid { thread: "long".into(), reason: "the disk is full".into() })
    }));
    let app = two_steps::graph().app().store(Arc::new(store));
    let deps = Arc::new(Runs::default());
    let stop = CancellationToken::new();
    let worker = Worker::new(app.clone(), Arc::clone(&deps)).poll_interval(Duration::from_millis(10));
    let handle = tokio::spawn(worker.run(stop.clone()));
    let began = std::time::Instant::now();
    while app.thread("long").unwrap().is_none_or(|t| t.status != agentflow::persist::ThreadStatus::Completed) {
        assert!(began.elapsed() < LIMIT, "the thread never completed: {:?}", app.live_runs());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop.cancel();
    let report = handle.await.unwrap().unwrap();
    assert!(failed.load(Ordering::SeqCst));
    assert_eq!((report.failed, report.completed), (1, 1), "{report:?}");
    assert!(app.live_runs().unwrap().is_empty());
}

/// A store that refuses every commit for a while (a restart, a failover): the run that fails on
/// it is claimed again only after a wait (its worker keeps the thread's lease 1 s), by when the
/// fault has passed, and completes. It used to be claimed again at the next poll, failing five
/// times in well under a second, and was taken out of the queue for good.
async fn a_passing_store_fault_is_waited_out(inner: Arc<dyn Store>) {
    let mut store = Hooked::new(Arc::clone(&inner));
    let first_failure = Arc::new(std::sync::Mutex::new(None::<std::time::Instant>));
    let since = Arc::clone(&first_failure);
    store.fail_commit = Some(Box::new(move |_| {
        let mut since = since.lock().unwrap();
        let began = *since.get_or_insert_with(std::time::Instant::now);
        (began.elapsed() < Duration::from_millis(700)).then(|| agentflow_store::CommitError::Invalid {
            thread: "blip".into(),
            reason: "the database restarts".into(),
        })
    }));
    let app = two_steps::graph().app().store(Arc::new(store));
    app.submit("blip", &Count::default()).unwrap();
    let deps = Arc::new(Runs::default());
    let stop = CancellationToken::new();
    let worker = Worker::new(app.clone(), Arc::clone(&deps)).poll_interval(Duration::from_millis(10));
    let handle = tokio::spawn(worker.run(stop.clone()));
    let began = std::time::Instant::now();
    while app.thread("blip").unwrap().is_none_or(|t| t.status != agentflow::persist::ThreadStatus::Completed) {
        assert!(began.elapsed() < Duration::from_secs(20), "the thread never completed: {:?}", app.live_runs());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop.cancel();
    let report = handle.await.unwrap().unwrap();
    assert_eq!((report.claimed, report.failed, report.completed), (2, 1, 1), "{report:?}");
    assert!(app.live_runs().unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redb_a_passing_store_fault_is_waited_out_before_the_run_is_claimed_again() {
    a_passing_store_fault_is_waited_out(Arc::new(RedbStore::in_memory().unwrap())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_passing_store_fault_is_waited_out_before_the_run_is_claimed_again() {
    let Some(url) = pg::pg_url() else { return };
    let schema = format!("worker_store_fault_{}", std::process::id());
    let store =
        agentflow_store::PostgresStore::builder().schema(&schema).open(&url).expect("open the PostgreSQL store");
    a_passing_store_fault_is_waited_out(Arc::new(store)).await;
}

/// A store that keeps refusing the run's commits: after the fifth failure in a row (each claim
/// waiting longer, at most the lease TTL) the run leaves the queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_keeps_failing_on_the_store_leaves_the_queue_after_five_tries() {
    let inner: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    let mut store = Hooked::new(Arc::clone(&inner));
    store.fail_commit = Some(Box::new(move |_| {
        Some(agentflow_store::CommitError::Invalid { thread: "down".into(), reason: "the disk is full".into() })
    }));
    let app = two_steps::graph().app().store(Arc::new(store));
    app.submit("down", &Count::default()).unwrap();
    let deps = Arc::new(Runs::default());
    let stop = CancellationToken::new();
    let worker = Worker::new(app.clone(), Arc::clone(&deps))
        .lease_ttl(Duration::from_secs(1))
        .poll_interval(Duration::from_millis(10));
    let handle = tokio::spawn(worker.run(stop.clone()));
    let began = std::time::Instant::now();
    while !app.live_runs().unwrap().is_empty() {
        assert!(began.elapsed() < Duration::from_secs(30), "the run stayed queued");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let took = began.elapsed();
    stop.cancel();
    let report = handle.await.unwrap().unwrap();
    assert_eq!((report.claimed, report.failed), (5, 5), "{report:?}");
    // Four waits of (at most) the 1 s lease TTL between the five claims.
    assert!(took >= Duration::from_secs(3), "the claims did not wait: {took:?}");
    assert_eq!(deps.nodes.load(Ordering::SeqCst), 0, "nothing ran: the first commit failed each time");
}

/// Set by the test to let the first run's stalled node go on.
static STALL_RELEASE: AtomicBool = AtomicBool::new(false);
/// Whether a run of `stalling` already entered its node (the first one stalls).
static STALL_ENTERED: AtomicBool = AtomicBool::new(false);
/// Charges made by `stalling`'s effect.
static STALL_CHARGES: AtomicU32 = AtomicU32::new(0);

#[graph(state = Count, start = charge)]
mod stalling {
    use super::*;

    /// The first run stalls, then charges; a later run (the model answered otherwise) ends
    /// without charging.
    #[node(goto = [END])]
    async fn charge(_s: &Count, cx: &Ctx<()>) -> Result<Step<Count>, NodeError> {
        if STALL_ENTERED.swap(true, Ordering::SeqCst) {
            return Ok(goto!(END, Count::update().n(1)));
        }
        // A stall of this run's task (a blocking call): the lease lapses, nothing of this run
        // can renew it, while the worker's other tasks go on. (Bounded, so a failed test
        // cannot hold the runtime for good.)
        tokio::task::block_in_place(|| {
            let stalled = std::time::Instant::now();
            while !STALL_RELEASE.load(Ordering::SeqCst) && stalled.elapsed() < Duration::from_secs(20) {
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        cx.effect("charge", |_key| async {
            STALL_CHARGES.fetch_add(1, Ordering::SeqCst);
            Ok::<_, NodeError>(())
        })
        .await?;
        Ok(goto!(END, Count::update().n(1)))
    }
}

/// A run of a worker that stalls past its lease while another executor runs the thread to the
/// end, then the same worker claims the thread again (the lease names that worker again): the
/// stalled run wakes and starts no effect. Its lease is revoked by the worker's own claim; the
/// store's fence alone could not tell it from the claim (one holder id).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_run_whose_worker_claims_its_thread_again_starts_no_effect() {
    const TTL: Duration = Duration::from_millis(300);
    let inner: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
    // The worker's claims see no time past `cap` until the test lifts it: it cannot claim the
    // thread back before the other executor ran it.
    let cap = Arc::new(AtomicU64::new(u64::MAX));
    let mut hooked = Hooked::new(Arc::clone(&inner));
    let clock = Arc::clone(&cap);
    hooked.claim_clock = Some(Box::new(move |now| now.min(clock.load(Ordering::SeqCst))));
    let app = stalling::graph().app().store(Arc::new(hooked));
    app.submit("stall", &Count::default()).unwrap();
    let stop = CancellationToken::new();
    let worker =
        Worker::new(app.clone(), Arc::new(())).concurrency(2).lease_ttl(TTL).poll_interval(Duration::from_millis(10));
    let handle = tokio::spawn(worker.run(stop.clone()));
    let began = std::time::Instant::now();
    while !STALL_ENTERED.load(Ordering::SeqCst) {
        assert!(began.elapsed() < LIMIT, "the worker never ran the thread");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    cap.store(agentflow::timer::now_ms(), Ordering::SeqCst);
    tokio::time::sleep(TTL + Duration::from_millis(100)).await;
    // Another executor takes the lapsed thread and runs it to the end, charging nothing.
    let other = stalling::graph().app().store(Arc::clone(&inner));
    let run = other.runner(&()).thread("stall").resume().await.expect("the lapsed thread is taken over");
    assert_eq!(run.outcome, Outcome::Completed);
    // The worker claims the thread again (its row is still the worker's), its stalled run
    // still running; then the stalled run wakes.
    cap.store(u64::MAX, Ordering::SeqCst);
    while inner.list_runs().unwrap().first().is_some_and(|r| r.claims < 2) {
        assert!(began.elapsed() < LIMIT, "the worker never claimed the thread again");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    STALL_RELEASE.store(true, Ordering::SeqCst);
    while !inner.list_runs().unwrap().is_empty() {
        assert!(began.elapsed() < LIMIT, "the queue row was never settled: {:?}", inner.list_runs());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop.cancel();
    let report = handle.await.unwrap().unwrap();
    assert_eq!(
        STALL_CHARGES.load(Ordering::SeqCst),
        0,
        "the stalled run charged after the thread moved on: {report:?}"
    );
    assert_eq!(report.lost, 1, "{report:?}");
}

// ------------------------------------------------ a claim made before the run's settle

#[derive(Default)]
pub struct Attempts {
    runs: AtomicU32,
}

#[graph(state = Count, deps = Attempts, start = refuse)]
mod refusing {
    use super::*;

    /// Fails for good, every time it runs.
    #[node(goto = [END])]
    async fn refuse(_s: &Count, deps: &Attempts) -> Result<Step<Count>, NodeError> {
        deps.runs.fetch_add(1, Ordering::SeqCst);
        Err(NodeError::fatal("the order was refused"))
    }
}

/// A run fails for good; before its worker settles the row away, the run's lease looks lapsed
/// and the worker's own claim takes the thread back (set aside: the run still ends). That claim
/// is stale: the settle that follows removes the row. The worker used to run the claim anyway,
/// which resumed the failed thread and ran its failing node (and its effects) a second time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_made_before_a_failed_run_settles_does_not_run_the_thread_again() {
    let inner: Arc<dyn Store> = Arc::new(RedbStore::in_memory().expect("in-memory store"));
    let (mut store, skew, claims) = skewed(Arc::clone(&inner), "f", None);
    let (clock, seen) = (Arc::clone(&skew), Arc::clone(&claims));
    let settles = Arc::new(AtomicU32::new(0));
    let settled = Arc::clone(&settles);
    store.before_settle =
        Some(Box::new(move |_: &dyn Store, thread: &str, _: &str, settle: &agentflow_store::Settle| {
            if thread != "f" || settled.fetch_add(1, Ordering::SeqCst) > 0 {
                return;
            }
            assert_eq!(settle.park, None, "the failed run leaves the queue");
            // The worker's next claim sees the run's lease as lapsed and takes the thread back.
            clock.store(60_000, Ordering::SeqCst);
            let began = std::time::Instant::now();
            while seen.load(Ordering::SeqCst) < 2 {
                assert!(began.elapsed() < Duration::from_secs(10), "the worker did not claim the thread back");
                std::thread::sleep(Duration::from_millis(5));
            }
            clock.store(0, Ordering::SeqCst);
        }));
    let app = refusing::graph().app().store(Arc::new(store) as Arc<dyn Store>);
    app.submit("f", &Count::default()).unwrap();
    let deps = Arc::new(Attempts::default());
    let stop = CancellationToken::new();
    let worker = Worker::new(app.clone(), Arc::clone(&deps))
        .concurrency(4)
        .lease_ttl(Duration::from_secs(3))
        .poll_interval(Duration::from_millis(10));
    let handle = tokio::spawn(worker.run(stop.clone()));
    let began = std::time::Instant::now();
    while settles.load(Ordering::SeqCst) == 0 || !app.live_runs().unwrap().is_empty() {
        assert!(began.elapsed() < LIMIT, "timed out waiting for the run to leave the queue");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Time for a claim set aside to be started, had it been.
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.cancel();
    let report = tokio::time::timeout(LIMIT, handle).await.expect("the worker stops").unwrap().unwrap();
    assert_eq!(claims.load(Ordering::SeqCst), 2);
    assert_eq!(deps.runs.load(Ordering::SeqCst), 1, "the failed node ran once");
    assert_eq!((report.claimed, report.failed), (1, 1), "{report:?}");
    let record = inner.thread("f").unwrap().unwrap();
    assert_eq!(record.status, agentflow::persist::ThreadStatus::Failed);
    assert!(inner.list_runs().unwrap().is_empty());
    let now = agentflow::timer::now_ms();
    assert!(inner.acquire_lease("f", "someone-else", 1_000, now).is_ok(), "the thread's lease was let go");
}

/// As the reclaim test above, but the worker is shut down once its claim took the thread back:
/// the old run ends lost, the claim is not run (the worker stops), and its lease is let go at
/// once. It used to be dropped with its lease held: no other worker could claim the run until
/// that lease expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_shut_down_with_a_claim_set_aside_lets_its_lease_go() {
    let inner: Arc<dyn Store> = Arc::new(RedbStore::in_memory().expect("in-memory store"));
    // The worker is shut down as its claim takes the thread back: it is stopping by the time the
    // old run ends, however soon that is.
    let stop = CancellationToken::new();
    let (store, skew, claims) = skewed(Arc::clone(&inner), "g", Some(stop.clone()));
    let app = gated::graph().app().store(Arc::new(store) as Arc<dyn Store>);
    app.submit("g", &Count::default()).unwrap();
    let deps = Arc::new(Gate::default());
    let worker = Worker::new(app.clone(), Arc::clone(&deps))
        .concurrency(4)
        .lease_ttl(Duration::from_secs(3))
        .poll_interval(Duration::from_millis(10));
    let handle = tokio::spawn(worker.run(stop.clone()));
    let began = std::time::Instant::now();
    while deps.started.load(Ordering::SeqCst) == 0 {
        assert!(began.elapsed() < LIMIT, "timed out waiting for the run to start");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    skew.store(60_000, Ordering::SeqCst);
    while claims.load(Ordering::SeqCst) < 2 {
        assert!(began.elapsed() < LIMIT, "timed out waiting for the claim to take the thread back");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    skew.store(0, Ordering::SeqCst);
    let report = tokio::time::timeout(LIMIT, handle).await.expect("the worker stops").unwrap().unwrap();
    assert_eq!((report.claimed, report.lost), (1, 1), "{report:?}");
    assert_eq!(deps.started.load(Ordering::SeqCst), 1, "the claim set aside was not run");
    // Another worker may take the thread now, not a minute later.
    let now = agentflow::timer::now_ms();
    let taken = inner.acquire_lease("g", "someone-else", 1_000, now);
    assert!(taken.is_ok(), "the lease of the claim set aside was let go: {taken:?}");
    assert_eq!(app.live_runs().unwrap().len(), 1, "the run stays queued");
}

// ------------------------------------------------ a run whose task panics

/// While set, a [`Brittle`] state panics as it is decoded (a bug in a user's `Deserialize`).
static BRITTLE: AtomicBool = AtomicBool::new(false);

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct BrittleRaw {
    n: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
#[serde(from = "BrittleRaw")]
pub struct Brittle {
    #[reduce(add)]
    pub n: u64,
}

impl From<BrittleRaw> for Brittle {
    fn from(raw: BrittleRaw) -> Self {
        assert!(!BRITTLE.load(Ordering::SeqCst), "a bug in the state's decoding");
        Brittle { n: raw.n }
    }
}

#[graph(state = Brittle, start = bump)]
mod brittle {
    use super::*;

    #[node(goto = [END])]
    async fn bump(_s: &Brittle) -> Step<Brittle> {
        goto!(END, Brittle::update().n(1))
    }
}

/// A run's task panics before its run settles its row (its queued input does not decode: the
/// state's `Deserialize` panics). The row used to stay queued with the worker's lease held,
/// to be claimed again and panic again every lease TTL; it now leaves the queue and the lease is
/// let go at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_task_panics_leaves_the_queue_and_lets_its_lease_go() {
    let inner: Arc<dyn Store> = Arc::new(RedbStore::in_memory().expect("in-memory store"));
    let app = brittle::graph().app().store(Arc::clone(&inner));
    app.submit("p", &Brittle::default()).unwrap();
    BRITTLE.store(true, Ordering::SeqCst);
    let stop = CancellationToken::new();
    let worker = Worker::new(app.clone(), Arc::new(()))
        .lease_ttl(Duration::from_secs(30))
        .poll_interval(Duration::from_millis(10));
    let handle = tokio::spawn(worker.run(stop.clone()));
    let began = std::time::Instant::now();
    while !app.live_runs().unwrap().is_empty() {
        assert!(began.elapsed() < Duration::from_secs(10), "the row stayed queued: {:?}", app.live_runs());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop.cancel();
    let report = tokio::time::timeout(LIMIT, handle).await.expect("the worker stops").unwrap().unwrap();
    BRITTLE.store(false, Ordering::SeqCst);
    assert_eq!((report.claimed, report.failed), (1, 1), "{report:?}");
    let now = agentflow::timer::now_ms();
    let taken = inner.acquire_lease("p", "someone-else", 1_000, now);
    assert!(taken.is_ok(), "the lease was let go: {taken:?}");
}
