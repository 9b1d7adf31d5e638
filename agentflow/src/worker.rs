//! Workers: run a graph's threads from the store's run queue.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use agentflow_store::{QueueError, QueuedRun, RunControl, RunWait, Settle, Store};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::app::App;
use crate::interrupt::{Pending, PendingKind};
use crate::outcome::{Outcome, RunError};
use crate::persist::{DEFAULT_LEASE_TTL, Durability, PersistError, ResumeError, blocking, now_ms, process_tag};
use crate::state::State;

/// A claimed run that fails on the store this many times in a row, in one worker, is taken out
/// of the queue. (Not [`QueuedRun::claims`]: a long-lived thread is claimed again at every
/// wake-up, and one passing store fault must not drop it.)
const MAX_CLAIMS_ON_STORE_ERRORS: u32 = 5;

/// How long a run that failed on the store waits before it is claimed again: the first time,
/// then twice as long each time in a row (1, 2, 4, 8 s: about 15 s from the first failure to
/// the fifth, which takes it out of the queue), at most the worker's lease TTL. A passing fault
/// of the store (a restart, a failover) then has time to pass.
const STORE_FAILURE_BACKOFF: Duration = Duration::from_secs(1);

/// The wait after the `failures`-th store failure in a row (see [`STORE_FAILURE_BACKOFF`]).
fn store_failure_backoff(failures: u32, ttl: Duration) -> Duration {
    let doubled = STORE_FAILURE_BACKOFF.saturating_mul(1u32 << failures.saturating_sub(1).min(16));
    doubled.min(ttl)
}

/// How many times in a row each thread's run failed on the store in this worker, the thread
/// not moving on in between: by where the thread stood at the last failure (its newest
/// checkpoint, if it could be read) and the count. A failure where the thread stands elsewhere
/// (a run, here or in another worker, moved it on) starts the count again; a run that ends
/// otherwise here clears it. (Over consecutive claims alone, a thread failing for good in two
/// workers taking turns would never reach the limit.)
#[derive(Clone, Default)]
struct StoreFailures(Arc<std::sync::Mutex<HashMap<String, Standing>>>);

/// Where a thread stood at its last store failure in this worker, and how many in a row.
type Standing = (Option<u64>, u32);

impl StoreFailures {
    /// Counts a failure of `thread`'s run, the thread standing at checkpoint `at`; returns how
    /// many in a row.
    fn failed(&self, thread: &str, at: Option<u64>) -> u32 {
        let mut counts = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let (last, count) = counts.entry(thread.to_string()).or_default();
        *count = if *count > 0 && *last == at { count.saturating_add(1) } else { 1 };
        *last = at;
        *count
    }

    /// `thread`'s run ended otherwise than failing on the store.
    fn clear(&self, thread: &str) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).remove(thread);
    }
}

/// Submitting, controlling or working on queued runs failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkerError {
    /// The app has no store to queue runs in.
    #[error("queued runs need a store; attach one with `graph.app().store(store)`")]
    NoStore,
    /// `submit` for a thread that exists already.
    #[error("thread `{thread}` already exists; continue it with `app.submit_resume(thread)` or pick a new thread id")]
    ThreadExists {
        /// The thread.
        thread: String,
    },
    /// `submit_resume` for a thread that does not exist.
    #[error("thread `{thread}` does not exist; start it with `app.submit(thread, input)`")]
    UnknownThread {
        /// The thread.
        thread: String,
    },
    /// The run queue refused or failed.
    #[error(transparent)]
    Queue(#[from] QueueError),
    /// Reading or encoding failed.
    #[error(transparent)]
    Persist(#[from] PersistError),
    /// `submit_resume` for a thread that waits in `cx.interrupt` for a person's value, which a
    /// worker cannot give. (Appended last.)
    #[error(
        "thread `{thread}` waits at node `{node}` for a value; answer it (the approval inbox, `agentflow answer`, `ApprovalDesk::answer_interrupt`: a run a worker parked is then woken, otherwise submit it again), continue it with `app.runner(deps).thread(..).resume_with(value)`, or cancel it with `app.cancel_run`"
    )]
    ValueRequired {
        /// The thread.
        thread: String,
        /// The node that asked.
        node: String,
    },
    /// `pause_run` for a thread that is not running: it waits for a person (`interrupted`) or
    /// for its timer (`sleeping`), so there is no step to pause it at. (Appended last.)
    #[error(
        "thread `{thread}` is {status}, not running: there is nothing to pause; it continues once decided or due, or stop it for good with `app.cancel_run`"
    )]
    NotRunning {
        /// The thread.
        thread: String,
        /// Its status (`interrupted` or `sleeping`).
        status: String,
    },
    /// `submit` for a thread id or owner that holds a NUL byte, which no store keeps (refused
    /// on every store alike, before anything is queued). (Appended last.)
    #[error("the {what} {value:?} contains a NUL byte, which a store cannot keep; choose one without it")]
    NulByte {
        /// What holds it: `thread id` or `owner`.
        what: &'static str,
        /// The value given.
        value: String,
    },
    /// `submit` with no owner for a graph (or a subgraph of it) that lists a tool the policy may
    /// hold for a human's approval: submit with [`App::submit_as`]. Nothing is queued.
    /// (Appended last.)
    #[error(transparent)]
    OwnerRequired(#[from] crate::tool::OwnerRequired),
}

impl From<agentflow_store::ReadError> for WorkerError {
    fn from(e: agentflow_store::ReadError) -> Self {
        WorkerError::Persist(e.into())
    }
}

/// How a worker's runs ended, counted over [`Worker::run`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerReport {
    /// Runs claimed.
    pub claimed: u64,
    /// Runs that completed.
    pub completed: u64,
    /// Runs that paused (for an approval they stay queued, parked).
    pub interrupted: u64,
    /// Runs that failed, ran out of a budget, or could not be run.
    pub failed: u64,
    /// Runs stopped by a cancel or pause request.
    pub controlled: u64,
    /// Runs whose lease was lost to another worker (nothing of them was committed after that).
    pub lost: u64,
    /// Runs stopped by this worker's shutdown (left queued for another worker).
    pub stopped: u64,
    /// Runs that ended sleeping on a durable timer ([`Outcome::Sleeping`]): they stay queued,
    /// parked until the timer is due, and a worker claims them again then.
    pub sleeping: u64,
}

/// How one run ended, for the report.
enum End {
    Completed,
    Interrupted,
    Failed,
    Controlled,
    Lost,
    Stopped,
    Sleeping,
}

/// Runs a graph's queued threads: claims them from the store, runs up to
/// [`Worker::concurrency`] at once, and renews their leases while they run.
///
/// Workers: run a graph's threads from the store's run queue instead of from `main`.
///
/// Any process that opens the store submits a run ([`App::submit`]); a [`Worker`], in this
/// process or another, claims it, runs it, and renews its lease while it runs. Controls come
/// from any process too: [`App::cancel_run`] and [`App::pause_run`] stop a thread at its next
/// step boundary, an approval decided with the [`ApprovalDesk`](crate::approval::ApprovalDesk)
/// makes its parked thread claimable again, and [`App::live_runs`] lists the queued and
/// running threads with their worker and last heartbeat.
///
/// ```
/// # use agentflow::prelude::*;
/// # use serde::{Deserialize, Serialize};
/// # #[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
/// # struct Count { #[reduce(add)] n: u32 }
/// # #[graph(state = Count, start = bump)]
/// # mod counter {
/// #     use super::*;
/// #     #[node(goto = [END])]
/// #     async fn bump(_c: &Count) -> Step<Count> { goto!(END, Count::update().n(1)) }
/// # }
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(async {
/// use std::sync::Arc;
/// use agentflow::{CancellationToken, RedbStore};
/// use agentflow::Worker;
///
/// let app = counter::graph().app().store(Arc::new(RedbStore::in_memory()?));
/// app.submit("t-1", &Count::default())?;
///
/// let stop = CancellationToken::new();
/// let worker = tokio::spawn(Worker::new(app.clone(), Arc::new(())).concurrency(4).run(stop.clone()));
/// while !app.live_runs()?.is_empty() {
///     tokio::time::sleep(std::time::Duration::from_millis(5)).await;
/// }
/// stop.cancel();
/// let report = worker.await??;
/// assert_eq!(report.completed, 1);
/// assert_eq!(app.state("t-1")?.unwrap().state.n, 1);
/// # Ok(())
/// # })
/// # }
/// ```
///
/// # Guarantees
/// - A queued run is claimed by one worker at a time: the claim takes the thread's lease in the
///   same store transaction ([`Store::claim_runs`]).
///   The run goes on under that lease (renewed while it runs) and takes none of its own; the
///   queue row is settled and the lease released together ([`Store::settle_run_and_release`]).
///   On PostgreSQL a new thread's run of `n` steps costs `n + 3` write transactions: the claim, the input
///   checkpoint, one per step and the settle (`tests/workers/worker_commits.rs`), besides the
///   heartbeat, written once a second while the worker runs anything.
/// - Every commit of a run is fenced by its worker's lease: once the lease expired or another
///   worker took the thread, the commit is refused inside the store's transaction and the run
///   ends with [`RunError::LeaseLost`] without writing anything (see [`Runner::lease_ttl`](crate::Runner::lease_ttl)),
///   also a lease lost between the claim and the run's first commit (the new thread's input
///   checkpoint): the worker counts it in [`WorkerReport::lost`] and leaves the queue row to the
///   new holder (`tests/workers/worker_lease_lost.rs`).
/// - A worker that dies leaves its runs queued; once their leases expire another worker claims
///   them and resumes each thread from its last checkpoint.
/// - Graceful shutdown (cancelling the token given to [`Worker::run`]) lets each running step
///   finish and commit, for up to [`Worker::shutdown_deadline`] (a step still running then is
///   stopped inside), then pauses the runs there (status `paused` until another worker
///   claims them; nothing is undone), releases their leases and leaves them queued for
///   another worker.
/// - A cancel or pause request reaches a running step: its nodes are dropped at their next
///   await (a journaled effect in flight is let finish first, for up to the runner's
///   [`stop_grace`](crate::Runner::stop_grace), and none starts after the request), so a node
///   that hangs frees its slot. Each node
///   attempt has a time limit ([`Worker::node_time_limit`], 10 minutes by default).
/// - A pause request ([`App::pause_run`]) stops the run (inside its step, as above) with the
///   thread `paused`; [`App::submit_resume`] continues it at that step, whose nodes that had
///   not finished run again (under [`Durability::Sync`], the default; under `Async` and `Exit`
///   a step stopped inside runs all its nodes again).
///
/// - A run that ends sleeping on a durable timer ([`Outcome::Sleeping`]) stays queued, parked
///   ([`RunWait::Timer`]) with no lease held, and a worker claims it again once the timer is
///   due and resumes it: workers need no [`Scheduler`](crate::timer::Scheduler). (One that
///   runs on the same store may wake the thread first; the worker then finds it moved on.)
/// - A run that ends waiting for approvals stays queued, parked ([`RunWait::Approval`]), and a
///   worker claims it again once they are decided, or once the first of them expires (an
///   [`App::approval_ttl`]): the resumed node's call then resolves as `APPROVAL_EXPIRED`, as
///   with a [`Scheduler`](crate::timer::Scheduler).
/// - A cancel request ends the thread `cancelled` even if nobody runs it (a worker claims it
///   and resumes it already cancelled), even if it comes while the worker shuts down (the
///   cancel wins over the shutdown's pause), and even if it comes as the run stops to wait,
///   after the worker last read its requests: the queue row stays claimable for it
///   ([`Settle`]), in the same write that would have parked it (`tests/workers/worker_waits.rs`).
/// - A run asked to pause that reaches a wait (a person, its timer) before the step boundary
///   where the pause would stop it stays parked for what it waits for, in that one write.
/// - A run that ends waiting for a person's value (`cx.interrupt`) stays queued, parked
///   ([`RunWait::Answer`]), and a worker claims it again once the value is recorded
///   ([`ApprovalDesk::answer_interrupt`](crate::approval::ApprovalDesk::answer_interrupt), the
///   approval inbox, `agentflow answer`) and continues it with that value; a run that fails
///   after taking the answer (a value of the wrong shape, say) spends it, and the run stays
///   parked for the next answer. If the thread is continued otherwise meanwhile
///   ([`Runner::resume_with`](crate::Runner::resume_with)), the parked run is claimed once the
///   thread is neither `interrupted` nor `failed` (the worker finds it finished, or continues
///   it); if that direct run stops for something else or fails, the parked run stays until
///   [`App::submit_resume`] wakes it or [`App::cancel_run`] ends it.
/// - A run that fails on the store (a commit refused, the database away) stays queued and is
///   claimed again after 1 s, then 2, 4 and 8 s (its worker holds the thread's lease that
///   long); the fifth failure in a row takes it out of the queue. A shutdown, a pause or a
///   cancel that comes during the graph's last step is too late: that step's commit records the
///   thread `completed` and the run leaves the queue (`tests/workers/worker_stop_races.rs`).
///
/// Any number of workers may share a `PostgresStore` (`agentflow-store`, feature `postgres`), in
/// one process or many; a [`RedbStore`](crate::RedbStore) is open in one process at a time,
/// so its workers all run in that process (which is enough to run threads concurrently).
/// Workers claim the runs whose graph name is this app's graph name. The guarantees are above.
pub struct Worker<S: State, D> {
    app: App<S, D>,
    deps: Arc<D>,
    concurrency: usize,
    lease_ttl: Duration,
    poll: Duration,
    heartbeat: Duration,
    durability: Durability,
    id: String,
    store_failures: StoreFailures,
    node_time_limit: Option<Duration>,
    shutdown_deadline: Duration,
    stop_grace: Duration,
}

/// The time limit of a node attempt run by a [`Worker`], unless [`Worker::node_time_limit`]
/// says otherwise: 10 minutes.
pub const DEFAULT_NODE_TIME_LIMIT: Duration = Duration::from_secs(600);

/// How long a [`Worker`]'s graceful shutdown lets running steps finish, unless
/// [`Worker::shutdown_deadline`] says otherwise: 30 seconds.
pub const DEFAULT_SHUTDOWN_DEADLINE: Duration = Duration::from_secs(30);

impl<S: State, D> std::fmt::Debug for Worker<S, D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("id", &self.id)
            .field("concurrency", &self.concurrency)
            .field("lease_ttl", &self.lease_ttl)
            .finish_non_exhaustive()
    }
}

impl<S: State, D: Send + Sync + 'static> Worker<S, D> {
    /// A worker for `app`'s graph with `deps`: one run at a time, 30 s leases, polling the
    /// queue and reading control requests every 50 ms, a heartbeat every second,
    /// [`Durability::Sync`], and an id unique across processes and machines
    /// (host name, pid, start time, random bits).
    pub fn new(app: App<S, D>, deps: Arc<D>) -> Self {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Worker {
            app,
            deps,
            concurrency: 1,
            lease_ttl: DEFAULT_LEASE_TTL,
            poll: Duration::from_millis(50),
            heartbeat: Duration::from_secs(1),
            durability: Durability::default(),
            id: format!("worker-{}-w{n}", process_tag()),
            store_failures: StoreFailures::default(),
            node_time_limit: Some(DEFAULT_NODE_TIME_LIMIT),
            shutdown_deadline: DEFAULT_SHUTDOWN_DEADLINE,
            stop_grace: crate::DEFAULT_STOP_GRACE,
        }
    }

    /// Most runs this worker runs at once (default 1, at least 1).
    #[must_use]
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }

    /// The lease of each claimed thread (default 30 s): renewed every third of it while the run
    /// runs. A worker that stops renewing (it died, or was paused) loses its threads to another
    /// worker this long after its last renewal.
    #[must_use]
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        self.lease_ttl = ttl;
        self
    }

    /// How often an idle worker looks for runs, and how often it reads the control requests of
    /// its runs (default 50 ms; a read, no write: [`Store::run_controls`]).
    #[must_use]
    pub fn poll_interval(mut self, every: Duration) -> Self {
        self.poll = every.max(Duration::from_millis(1));
        self
    }

    /// How often, while it runs anything, the worker writes its heartbeat (`heartbeat_at` of its
    /// runs, shown by [`App::live_runs`]; [`Store::heartbeat_runs`], which reads the control
    /// requests too): default 1 s, never more often than the poll interval. A heartbeat is a
    /// write (a commit on PostgreSQL), so it is kept apart from the frequent control reads; a
    /// worker's liveness for taking its threads over is its leases, not its heartbeat.
    #[must_use]
    pub fn heartbeat_interval(mut self, every: Duration) -> Self {
        self.heartbeat = every;
        self
    }

    /// The time limit of each node attempt of the runs this worker runs (default
    /// [`DEFAULT_NODE_TIME_LIMIT`], 10 minutes; `None`: no limit), for the nodes without a
    /// `timeout` of their own (`#[node(timeout = 30s)]`, which wins). It acts as that timeout
    /// does: the attempt fails as a passing failure, retried under the node's `retry` policy,
    /// and an effect in flight finishes first (for up to [`Worker::stop_grace`]). A node that
    /// runs subgraphs is not limited itself: their nodes are. So a node that hangs (a tool or
    /// model call without a timeout) frees its worker slot instead of holding it, and its
    /// lease, for good; the thread ends failed once its retries are spent. Plain in-process
    /// runs have no such limit unless
    /// [`Runner::node_time_limit`](crate::Runner::node_time_limit) sets one.
    #[must_use]
    pub fn node_time_limit(mut self, limit: Option<Duration>) -> Self {
        self.node_time_limit = limit;
        self
    }

    /// How long a graceful shutdown (cancelling the token given to [`Worker::run`]) lets each
    /// running step finish and commit (default [`DEFAULT_SHUTDOWN_DEADLINE`], 30 s). The runs
    /// stop at their next step boundary; a step still running at the deadline is stopped
    /// inside, its nodes dropped at their next await (a journaled effect in flight is let finish
    /// first, for up to the runner's [`stop_grace`](crate::Runner::stop_grace)). Either way the
    /// thread is left `paused` and queued for another worker.
    #[must_use]
    pub fn shutdown_deadline(mut self, deadline: Duration) -> Self {
        self.shutdown_deadline = deadline;
        self
    }

    /// How long a stop inside a step (a cancel or pause request, the shutdown deadline, a node
    /// time limit) lets a journaled effect in flight finish and be journaled before the node is
    /// dropped (default [`DEFAULT_STOP_GRACE`](crate::DEFAULT_STOP_GRACE), 10 s; see
    /// [`Runner::stop_grace`](crate::Runner::stop_grace)).
    #[must_use]
    pub fn stop_grace(mut self, grace: Duration) -> Self {
        self.stop_grace = grace;
        self
    }

    /// When the runs' checkpoints reach the disk (default [`Durability::Sync`]).
    #[must_use]
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// The worker's id: the lease holder of every thread it runs, as shown by
    /// [`App::live_runs`].
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Starts a run of `claim` on this worker's tasks.
    fn start(
        &self,
        store: &Arc<dyn Store>,
        claim: QueuedRun,
        tasks: &mut JoinSet<(String, End)>,
        running: &mut HashMap<String, Stops>,
        ids: &mut HashMap<tokio::task::Id, String>,
    ) {
        let stops = Stops::default();
        running.insert(claim.thread.clone(), stops.clone());
        let job = Job {
            app: self.app.clone(),
            deps: Arc::clone(&self.deps),
            store: Arc::clone(store),
            holder: self.id.clone(),
            ttl: self.lease_ttl,
            durability: self.durability,
            node_time_limit: self.node_time_limit,
            stop_grace: self.stop_grace,
            stops,
            store_failures: self.store_failures.clone(),
            acted_on: OnceLock::new(),
            cancelled_now: std::sync::atomic::AtomicBool::new(false),
        };
        let (thread, claim_thread) = (claim.thread.clone(), claim.thread.clone());
        let handle = tasks.spawn(async move { (thread, job.run(claim).await) });
        ids.insert(handle.id(), claim_thread);
    }

    /// What becomes of `claim`, a claim of a thread this worker was still running (set aside
    /// until the run that held the thread ended as `end`).
    ///
    /// - The run ended lost (its lease lapsed and the claim took the thread back): nothing was
    ///   settled and the claim holds the thread's lease. It is run now; a worker that stops lets
    ///   the lease go instead, so another worker claims the run at once, not one TTL later.
    /// - The run settled its row or left it queued (which let go of the claim's lease too: one
    ///   holder id). A claim made before that settle is stale: run, it would take up a thread
    ///   that failed, was cancelled or paused again. It is run only if its row is still queued
    ///   as this claim left it, ready (a parked run whose wait is met, a cancel the settle
    ///   kept), under the lease taken again; a row settled away, parked again, queued anew
    ///   since, or waiting out a store failure's backoff is left alone.
    #[allow(clippy::too_many_arguments)]
    async fn after_reclaim(
        &self,
        store: &Arc<dyn Store>,
        mut claim: QueuedRun,
        end: &End,
        stopping: bool,
        ttl_ms: u64,
        report: &mut WorkerReport,
        tasks: &mut JoinSet<(String, End)>,
        running: &mut HashMap<String, Stops>,
        ids: &mut HashMap<tokio::task::Id, String>,
    ) {
        let (t, holder) = (claim.thread.clone(), self.id.clone());
        if stopping {
            if matches!(end, End::Lost) {
                // Taken over meanwhile: not ours to release.
                let _ = blocking(store, move |s| s.release_lease(&t, &holder)).await;
            }
            return;
        }
        if !matches!(end, End::Lost) {
            // Still the row this claim took (not one queued anew since), and let go by the run
            // that ended (a lease still held is a store failure's backoff, which it waits out).
            let (thread, me, claims) = (t.clone(), holder.clone(), claim.claims);
            let now = now_ms();
            let queued = blocking(store, move |s| {
                s.list_runs().map(|runs| {
                    runs.iter().any(|r| {
                        r.thread == thread
                            && r.wait == RunWait::Ready
                            && r.holder.as_deref() == Some(me.as_str())
                            && r.claims == claims
                            && r.lease.as_ref().is_none_or(|l| l.expires_at <= now)
                    })
                })
            })
            .await;
            if !matches!(queued, Ok(Ok(true))) {
                return;
            }
        }
        // Taken again (the ended run let it go as it settled); a worker that claimed the row in
        // between keeps it.
        let lease = blocking(store, move |s| s.acquire_lease(&t, &holder, ttl_ms, now_ms())).await;
        if let Ok(Ok(lease)) = lease {
            claim.lease = Some(lease);
            report.claimed += 1;
            self.start(store, claim, tasks, running, ids);
        }
    }

    /// Claims and runs queued runs until `shutdown` is cancelled, then lets each running step
    /// finish and commit, stops the runs there, releases their leases (the runs stay queued)
    /// and returns what it did.
    ///
    /// # Errors
    /// [`WorkerError::NoStore`] without a store; a store failure while claiming is logged and
    /// retried at the next poll, not returned.
    pub async fn run(self, shutdown: CancellationToken) -> Result<WorkerReport, WorkerError> {
        let store = self.app.store.clone().ok_or(WorkerError::NoStore)?;
        let graph = self.app.graph.name();
        let ttl_ms = u64::try_from(self.lease_ttl.as_millis()).unwrap_or(u64::MAX);
        let mut report = WorkerReport::default();
        let mut tasks: JoinSet<(String, End)> = JoinSet::new();
        let mut running: HashMap<String, Stops> = HashMap::new();
        let mut ids: HashMap<tokio::task::Id, String> = HashMap::new();
        // Claims of threads this worker was still running when they were claimed again.
        let mut reclaimed: HashMap<String, QueuedRun> = HashMap::new();
        let mut last_beat = tokio::time::Instant::now();
        let mut last_look = last_beat;
        let mut stop_began: Option<tokio::time::Instant> = None;
        loop {
            let stopping = shutdown.is_cancelled();
            if stopping {
                if tasks.is_empty() {
                    break;
                }
                let began = *stop_began.get_or_insert_with(tokio::time::Instant::now);
                // Each run stops at its next step boundary, paused (not cancelled: nothing is
                // undone) and left queued for another worker; past the deadline, inside its step.
                // Stopping twice is harmless.
                let late = began.elapsed() >= self.shutdown_deadline;
                for stops in running.values() {
                    stops.pause.cancel();
                    stops.token.cancel();
                    if late {
                        stops.now.cancel();
                    }
                }
            }
            if last_look.elapsed() >= self.poll && !running.is_empty() {
                last_look = tokio::time::Instant::now();
                let holder = self.id.clone();
                // The heartbeat (a write) answers the control requests too; between two, a read does.
                let beat = last_beat.elapsed() >= self.heartbeat.max(self.poll);
                if beat {
                    last_beat = last_look;
                }
                let looked = blocking(&store, move |s| {
                    if beat { s.heartbeat_runs(&holder, now_ms()) } else { s.run_controls(&holder, now_ms()) }
                })
                .await;
                match looked {
                    Ok(Ok(controls)) => {
                        for (thread, control) in controls {
                            if let Some(stops) = running.get(&thread) {
                                stops.ask(control);
                            }
                        }
                    }
                    Ok(Err(e)) => tracing::warn!(worker = %self.id, error = %e, "heartbeat failed"),
                    Err(e) => tracing::warn!(worker = %self.id, error = %e, "heartbeat failed"),
                }
            }
            let free = self.concurrency.saturating_sub(running.len());
            let mut claimed_any = false;
            if !stopping && free > 0 {
                let holder = self.id.clone();
                let claims = blocking(&store, move |s| s.claim_runs(graph, &holder, ttl_ms, now_ms(), free)).await;
                match claims {
                    Ok(Ok(claims)) => {
                        for claim in claims {
                            claimed_any = true;
                            if let Some(stops) = running.get(&claim.thread) {
                                // Its lease lapsed while this worker still runs it (a renewal came
                                // too late, a stall) and the claim took it back. Another executor
                                // may have run the thread in between, and the store's fence cannot
                                // tell this run from the claim (one holder id): the running one is
                                // revoked, writes and starts nothing more, and ends lost; the
                                // claim is run then (or when the run parks), not left unused
                                // until its lease expires.
                                stops.revoked.store(true, std::sync::atomic::Ordering::SeqCst);
                                reclaimed.insert(claim.thread.clone(), claim);
                                continue;
                            }
                            report.claimed += 1;
                            self.start(&store, claim, &mut tasks, &mut running, &mut ids);
                        }
                    }
                    Ok(Err(e)) => tracing::warn!(worker = %self.id, error = %e, "could not claim runs"),
                    Err(e) => tracing::warn!(worker = %self.id, error = %e, "could not claim runs"),
                }
            }
            if claimed_any && running.len() < self.concurrency {
                // More may be waiting: claim again at once.
                continue;
            }
            tokio::select! {
                // Wakes the loop, which stops the runs at its top.
                () = shutdown.cancelled(), if !stopping => {}
                Some(joined) = tasks.join_next_with_id() => {
                    let (thread, end) = match joined {
                        Ok((id, done)) => {
                            ids.remove(&id);
                            done
                        }
                        Err(e) => {
                            tracing::error!(worker = %self.id, error = %e, "a run's task failed");
                            if let Some(thread) = ids.remove(&e.id()) {
                                running.remove(&thread);
                                reclaimed.remove(&thread);
                                // It panicked before settling its row: the row leaves the queue,
                                // a cancel pending included (claimed again, it would panic again)
                                // and the thread's lease is let go (that of a claim set aside
                                // too: one holder id).
                                let holder = self.id.clone();
                                let settle = Settle::remove().handled(Some(RunControl::Cancel));
                                let settled =
                                    blocking(&store, move |s| s.settle_run_and_release(&thread, &holder, &settle))
                                .await;
                                if !matches!(settled, Ok(Ok(_))) {
                                    tracing::warn!(worker = %self.id, "could not remove the row of a run whose task failed");
                                }
                            }
                            report.failed += 1;
                            continue;
                        }
                    };
                    running.remove(&thread);
                    // A claim set aside while the run still ran.
                    if let Some(claim) = reclaimed.remove(&thread) {
                        self.after_reclaim(&store, claim, &end, stopping, ttl_ms, &mut report, &mut tasks, &mut running, &mut ids)
                            .await;
                    }
                    match end {
                        End::Completed => report.completed += 1,
                        End::Interrupted => report.interrupted += 1,
                        End::Failed => report.failed += 1,
                        End::Controlled => report.controlled += 1,
                        End::Lost => report.lost += 1,
                        End::Stopped => report.stopped += 1,
                        End::Sleeping => report.sleeping += 1,
                    }
                }
                () = tokio::time::sleep(self.poll) => {}
            }
        }
        Ok(report)
    }
}

/// How a running run is stopped at its next step boundary.
#[derive(Clone, Default)]
struct Stops {
    /// Stops the run.
    token: CancellationToken,
    /// Cancelled before `token` when the stop is a pause (a pause request, or this worker's
    /// shutdown): the run ends `Outcome::Paused`, nothing undone.
    pause: CancellationToken,
    /// Drops the running step's nodes: a control request, or a shutdown past its deadline.
    now: CancellationToken,
    /// The control request that stopped the run, if one did (else: shutdown).
    asked: Arc<OnceLock<RunControl>>,
    /// Set when this worker's own claim took the thread again while the run still ran (its
    /// lease had lapsed): the run writes and starts nothing more (another executor may have
    /// run the thread in between, and the store's fence knows one holder id) and ends lost;
    /// the claim is run then.
    revoked: Arc<std::sync::atomic::AtomicBool>,
}

impl Stops {
    /// Stops the run as `control` asks (the first request wins).
    fn ask(&self, control: RunControl) {
        if *self.asked.get_or_init(|| control) == RunControl::Pause {
            self.pause.cancel();
        }
        self.token.cancel();
        // A request reaches the running nodes at once, a hung one included.
        self.now.cancel();
    }
}

/// One claimed run, owned by its task.
struct Job<S: State, D> {
    app: App<S, D>,
    deps: Arc<D>,
    store: Arc<dyn Store>,
    holder: String,
    ttl: Duration,
    durability: Durability,
    node_time_limit: Option<Duration>,
    stop_grace: Duration,
    stops: Stops,
    store_failures: StoreFailures,
    /// The control request the run's end was decided on (read once, when it ended): the one
    /// its queue row is settled as having handled. One read later by a heartbeat is not: the
    /// store keeps it for the next claim.
    acted_on: OnceLock<Option<RunControl>>,
    /// [`Job::cancel_now`] ran: what it left (a compensation that waits for a person, parked)
    /// is not cancelled again.
    cancelled_now: std::sync::atomic::AtomicBool,
}

/// What a worker does with a run's queue row once the run ended.
enum Then {
    /// Remove it: the run ended.
    Remove,
    /// Keep it, parked until what it waits for is there (no approval of the thread waits, the
    /// thread's timer is due, or an answer woke it).
    Park(RunWait),
    /// Keep it, parked until none of these approvals (the records its pause waits on) waits
    /// for a human, or its thread's timer is due.
    AwaitApprovals(Vec<String>),
    /// Leave it queued for another worker (shutdown).
    Leave,
    /// Leave it queued, claimable again after this wait (a store failure): the lease is kept
    /// that long instead of let go.
    Backoff(Duration),
    /// Nothing: another worker took the thread.
    Nothing,
}

impl<S: State, D: Send + Sync + 'static> Job<S, D> {
    async fn run(self, claim: QueuedRun) -> End {
        let (end, then) = self.run_claimed(&claim).await;
        let then = match then {
            // A store failure: the run stays queued for another try, unless it keeps failing.
            Then::Leave if matches!(end, End::Failed) => {
                let t = claim.thread.clone();
                let at = blocking(&self.store, move |s| s.latest_checkpoint(&t)).await;
                let at = at.ok().and_then(Result::ok).flatten().map(|cp| cp.seq);
                let failures = self.store_failures.failed(&claim.thread, at);
                if failures >= MAX_CLAIMS_ON_STORE_ERRORS {
                    tracing::warn!(thread = %claim.thread, failures, "a run that keeps failing on the store leaves the queue");
                    self.store_failures.clear(&claim.thread);
                    Then::Remove
                } else {
                    Then::Backoff(store_failure_backoff(failures, self.ttl))
                }
            }
            then => {
                self.store_failures.clear(&claim.thread);
                then
            }
        };
        self.finish(&claim, then).await;
        end
    }

    /// A runner for the claimed thread, under the claim's lease.
    fn runner<'a>(
        &'a self,
        claim: &QueuedRun,
        cancel: CancellationToken,
        pause: CancellationToken,
    ) -> crate::Runner<'a, S, D> {
        let until = claim.lease.as_ref().map_or(0, |l| l.expires_at);
        let runner = self
            .app
            .runner(&*self.deps)
            .thread(claim.thread.clone())
            .owner(claim.owner.clone())
            .durability(self.durability)
            .lease_ttl(self.ttl)
            .cancel_token(cancel)
            .pause_token(pause)
            .stop_now_token(self.stops.now.clone())
            .stop_grace(self.stop_grace)
            .lease_holder(self.holder.clone(), until, Arc::clone(&self.stops.revoked));
        match self.node_time_limit {
            Some(limit) => runner.node_time_limit(limit),
            None => runner,
        }
    }

    async fn run_claimed(&self, claim: &QueuedRun) -> (End, Then) {
        let thread = claim.thread.clone();
        match claim.control {
            // Cancelled while nobody ran it: a thread that exists is resumed already cancelled,
            // so it ends `cancelled` at its first step boundary (its calls undone as a cancel
            // undoes them); a thread never started just leaves the queue.
            Some(RunControl::Cancel) => {
                self.stops.ask(RunControl::Cancel);
                // A fresh pause token: a cancel wins over this worker's shutdown asking for a pause.
                let runner = self.runner(claim, self.stops.token.clone(), CancellationToken::new());
                return match runner.resume().await {
                    Err(RunError::Resume(ResumeError::UnknownThread { .. })) => (End::Controlled, Then::Remove),
                    result => self.ended(claim, result).await,
                };
            }
            // Paused while nobody ran it: the run stops at its first step boundary, before any
            // step, so the thread (created first if it is new) is left `paused`.
            Some(control) => self.stops.ask(control),
            None => {}
        }
        let result = match &claim.input {
            Some(input) => match serde_json::from_slice::<S>(input) {
                Ok(input) => {
                    match self.runner(claim, self.stops.token.clone(), self.stops.pause.clone()).run(input).await {
                        // Started by a worker that stopped or died since: continued from its last step.
                        Err(RunError::ThreadExists { .. }) => {
                            self.runner(claim, self.stops.token.clone(), self.stops.pause.clone()).resume().await
                        }
                        other => other,
                    }
                }
                Err(e) => {
                    tracing::error!(thread = %thread, error = %e, "the queued input does not decode as the graph's state");
                    return (End::Failed, Then::Remove);
                }
            },
            None => self.runner(claim, self.stops.token.clone(), self.stops.pause.clone()).resume().await,
        };
        self.ended(claim, result).await
    }

    /// What a run's end means for the report and the queue row.
    async fn ended(&self, claim: &QueuedRun, result: Result<crate::outcome::Run<S>, RunError>) -> (End, Then) {
        let asked = *self.acted_on.get_or_init(|| self.stops.asked.get().copied());
        let (end, then) = self.end_of(claim, result, asked).await;
        match then {
            // Waiting (for people, a value, its timer), but a cancel was asked: the cancel wins
            // (unless the cancelled run is what waits: its compensation, for a person).
            Then::Park(_) | Then::AwaitApprovals(_)
                if asked == Some(RunControl::Cancel)
                    && !self.cancelled_now.load(std::sync::atomic::Ordering::SeqCst) =>
            {
                self.cancel_now(claim).await
            }
            then => (end, then),
        }
    }

    /// [`Job::ended`] before a cancel asked of a waiting run is applied; `asked` is the control
    /// request the run was asked, if any.
    async fn end_of(
        &self,
        claim: &QueuedRun,
        result: Result<crate::outcome::Run<S>, RunError>,
        asked: Option<RunControl>,
    ) -> (End, Then) {
        let thread = &claim.thread;
        match result {
            Ok(run) => match run.outcome {
                Outcome::Completed => (End::Completed, Then::Remove),
                Outcome::Cancelled | Outcome::Paused if asked.is_none() => (End::Stopped, Then::Leave),
                // A cancel request that came after this worker's shutdown had asked the run to
                // pause: the cancel wins, the paused thread is cancelled now.
                Outcome::Paused if asked == Some(RunControl::Cancel) => self.cancel_now(claim).await,
                Outcome::Cancelled | Outcome::Paused => (End::Controlled, Then::Remove),
                // Cancelled as asked, its calls undone.
                Outcome::Compensated { .. } if asked == Some(RunControl::Cancel) => (End::Controlled, Then::Remove),
                // Waiting (for people, a breakpoint, its timer), but a cancel was asked: the
                // cancel wins. (A step that failed or ran out of budget as the cancel came ends
                // the run cancelled itself.)
                Outcome::Sleeping { .. } | Outcome::Interrupted { .. } if asked == Some(RunControl::Cancel) => {
                    self.cancel_now(claim).await
                }
                // Waiting for a human (an approval, or a call cut off mid-way to settle): parked,
                // even if decided meanwhile (then it is claimable at once).
                Outcome::Interrupted { pending, .. }
                    if pending
                        .iter()
                        .any(|p| matches!(p.kind, PendingKind::Approval | PendingKind::OutcomeUnknown)) =>
                {
                    (End::Interrupted, awaiting(&pending))
                }
                // Waiting for a person's value (`cx.interrupt`): parked until an answer is
                // recorded (`ApprovalDesk::answer_interrupt` wakes it), then claimed and continued
                // with that answer.
                Outcome::Interrupted { pending, .. } if pending.iter().any(|p| p.kind == PendingKind::Interrupt) => {
                    (End::Interrupted, Then::Park(RunWait::Answer))
                }
                Outcome::Interrupted { .. } => (End::Interrupted, Then::Remove),
                // A durable timer: parked until it is due, then claimed and resumed by a worker.
                Outcome::Sleeping { .. } => (End::Sleeping, Then::Park(RunWait::Timer)),
                // The run failed after taking an answer (a value of the wrong shape, say): the
                // thread waits where it was answered, the answer is spent, and a person may
                // answer again, which wakes the parked run.
                Outcome::Failed { .. } if self.still_waits_in_interrupt(thread).await => {
                    (End::Failed, Then::Park(RunWait::Answer))
                }
                _ => (End::Failed, Then::Remove),
            },
            Err(RunError::LeaseLost { .. } | RunError::ThreadBusy { .. }) => (End::Lost, Then::Nothing),
            Err(RunError::Resume(ResumeError::Finished { .. })) => (End::Completed, Then::Remove),
            // It waits for a person's value (`cx.interrupt`), which a worker cannot give: not a
            // failure; parked until an answer is recorded, as above.
            Err(RunError::ValueRequired { .. }) => (End::Interrupted, Then::Park(RunWait::Answer)),
            Err(RunError::Persist(e)) => self.store_failure(claim, &e),
            Err(e) => {
                tracing::warn!(thread = %thread, error = %e, "a queued run could not be run; it leaves the queue");
                (End::Failed, Then::Remove)
            }
        }
    }

    /// Whether `thread` (which just ended `failed`) still waits in `cx.interrupt`; `false` when
    /// that cannot be read.
    async fn still_waits_in_interrupt(&self, thread: &str) -> bool {
        let t = thread.to_string();
        matches!(blocking(&self.store, move |s| crate::answer::waiting(s, &t).is_ok()).await, Ok(true))
    }

    /// Resumes the claimed thread already cancelled, so it ends `cancelled` at its first step
    /// boundary: a cancel request that came when the run had stopped for something else.
    async fn cancel_now(&self, claim: &QueuedRun) -> (End, Then) {
        self.cancelled_now.store(true, std::sync::atomic::Ordering::SeqCst);
        let cancel = CancellationToken::new();
        cancel.cancel();
        match Box::pin(self.runner(claim, cancel, CancellationToken::new()).resume()).await {
            // Cancelled, its calls undone if it made any.
            Ok(run) if matches!(run.outcome, Outcome::Cancelled | Outcome::Compensated { .. }) => {
                (End::Controlled, Then::Remove)
            }
            // Its compensation waits for a person (a call cut off mid-way to settle): parked for
            // that, as any run is, so the decision wakes it and the compensation goes on.
            Ok(run) if matches!(&run.outcome, Outcome::Interrupted { .. }) => {
                Box::pin(self.end_of(claim, Ok(run), None)).await
            }
            Err(RunError::LeaseLost { .. } | RunError::ThreadBusy { .. }) => (End::Lost, Then::Nothing),
            Err(RunError::Persist(e)) => self.store_failure(claim, &e),
            other => {
                let how = match other {
                    Ok(run) => run.outcome.to_string(),
                    Err(e) => e.to_string(),
                };
                tracing::warn!(thread = %claim.thread, how, "a stopped run could not be cancelled");
                (End::Controlled, Then::Remove)
            }
        }
    }

    /// A store failure: the run stays queued for another try (see [`MAX_CLAIMS_ON_STORE_ERRORS`]).
    fn store_failure(&self, claim: &QueuedRun, e: &PersistError) -> (End, Then) {
        tracing::warn!(thread = %claim.thread, error = %e, claims = claim.claims, "a queued run failed on the store");
        (End::Failed, Then::Leave)
    }

    /// Updates the queue row as `then` says and releases the lease, in one store call (one
    /// commit on PostgreSQL, [`Store::settle_run_and_release`]). The run left the lease held,
    /// so no other worker claims the thread between the run's end and the queue update; if the
    /// lease was lost meanwhile, the row is the new holder's and is left alone.
    ///
    /// The control request this worker acted on goes with it ([`Settle::handled`]): a cancel
    /// asked since (after the last read of the row's requests) keeps the row claimable, so the
    /// next claim ends the thread cancelled; a pause is moot once the run stopped (a run asked
    /// to pause that reached a wait first stays parked for what it waits for).
    async fn finish(&self, claim: &QueuedRun, then: Then) {
        let thread = claim.thread.as_str();
        let settle = match then {
            Then::Nothing => return,
            Then::Leave => {
                let (t, holder) = (thread.to_string(), self.holder.clone());
                // Taken over meanwhile: not ours to release; otherwise it expires by itself.
                let _ = blocking(&self.store, move |s| s.release_lease(&t, &holder)).await;
                return;
            }
            Then::Backoff(wait) => {
                let (t, holder) = (thread.to_string(), self.holder.clone());
                let wait = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
                // The lease, held that long more, keeps every worker from claiming the run until
                // then. Taken over meanwhile: not ours; a renewal that fails (the store is still
                // failing) leaves the lease to expire when it would have.
                let _ = blocking(&self.store, move |s| s.renew_lease(&t, &holder, wait, now_ms())).await;
                return;
            }
            Then::Remove => Settle::remove(),
            Then::Park(wait) => Settle::park(wait),
            Then::AwaitApprovals(awaits) => Settle::await_approvals(awaits),
        };
        // What the run's end was decided on; a run that ended before that (a claim it could not
        // start) handled what it was asked so far.
        let handled = match self.acted_on.get() {
            Some(acted_on) => *acted_on,
            None => self.stops.asked.get().copied(),
        };
        let settle = settle.handled(handled);
        let (t, holder) = (thread.to_string(), self.holder.clone());
        // `settle_run_and_release` changes the row only while it is still this worker's claim:
        // a worker that claimed the thread since (its lease had expired) owns the row, and its
        // lease is left alone.
        // Parked for an answer: one recorded after the run stopped but before the row was
        // parked found no row to wake, so this worker wakes it (an answer recorded after the
        // park wakes it itself).
        // If that cannot be read, it is woken anyway: a needless wake costs one claim (the run
        // finds no answer and parks again), a missed one would leave the run parked for good.
        let answer = settle.park == Some(RunWait::Answer);
        let settled = blocking(&self.store, move |s| -> Result<(), agentflow_store::BoxError> {
            if s.settle_run_and_release(&t, &holder, &settle)?
                && answer
                && crate::answer::answered_now(s, &t).unwrap_or(true)
            {
                s.wake_run(&t, RunWait::Answer)?;
            }
            Ok(())
        });
        match settled.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(thread = %thread, error = %e, "could not update the run queue"),
            Err(e) => tracing::warn!(thread = %thread, error = %e, "could not update the run queue"),
        }
    }
}

/// Who asked, when a control does not say: this process (host name, pid, start time, random
/// bits), as `process:<tag>`.
pub(crate) fn process_actor() -> String {
    format!("process:{}", process_tag())
}

/// How a run paused for people is parked: until the approvals its pause names (requests and
/// records of unknown outcomes, its own or its subgraph children's) are decided. A record it
/// does not wait on (left from an earlier step for a human to settle) then does not hold it.
/// A pause on such an item without a record id waits on every record of the thread instead.
fn awaiting(pending: &[Pending]) -> Then {
    let mut awaits = Vec::new();
    for p in pending.iter().filter(|p| matches!(p.kind, PendingKind::Approval | PendingKind::OutcomeUnknown)) {
        match p.payload.get("approval").and_then(serde_json::Value::as_str) {
            Some(id) => awaits.push(id.to_string()),
            None => return Then::Park(RunWait::Approval),
        }
    }
    if awaits.is_empty() { Then::Park(RunWait::Approval) } else { Then::AwaitApprovals(awaits) }
}

#[cfg(test)]
mod tests {
    use crate::persist::process_tag;

    #[test]
    fn holder_ids_name_the_process_and_carry_random_bits() {
        let tag = process_tag();
        assert!(tag.contains(&format!("-pid{}-", std::process::id())), "{tag}");
        let random = tag.rsplit('-').next().unwrap();
        assert_eq!(random.len(), 16, "{tag}");
        assert!(random.chars().all(|c| c.is_ascii_hexdigit()), "{tag}");
        assert_eq!(process_tag(), tag, "one tag per process");
    }

    /// Store failures count in a row while the thread stands still: one where it moved on (a
    /// run elsewhere committed a step) starts the count again, whoever claimed in between.
    #[test]
    fn store_failures_count_while_the_thread_stands_still() {
        use super::StoreFailures;
        let failures = StoreFailures::default();
        assert_eq!([Some(3), Some(3), Some(3)].map(|at| failures.failed("t", at)), [1, 2, 3]);
        assert_eq!(failures.failed("t", Some(4)), 1, "the thread moved on");
        assert_eq!([None, None].map(|at| failures.failed("u", at)), [1, 2], "unreadable: still standing");
        failures.clear("t");
        assert_eq!(failures.failed("t", Some(4)), 1);
    }

    #[test]
    fn a_pause_for_people_parks_on_the_records_it_names() {
        use super::{Then, awaiting};
        use crate::interrupt::{Pending, PendingKind};
        use agentflow_store::RunWait;
        let pending = |kind, payload| Pending { node: "n".into(), instance: None, kind, payload };
        let asked = pending(PendingKind::Approval, serde_json::json!({ "approval": "apr-1" }));
        let unknown = pending(PendingKind::OutcomeUnknown, serde_json::json!({ "approval": "unk-2" }));
        let value = pending(PendingKind::Interrupt, serde_json::json!("name?"));
        let named = |then| match then {
            Then::AwaitApprovals(ids) => Some(ids),
            Then::Park(RunWait::Approval) => None,
            _ => panic!("parked otherwise"),
        };
        assert_eq!(named(awaiting(&[asked.clone(), value, unknown])), Some(vec!["apr-1".into(), "unk-2".into()]));
        // One it cannot name: every waiting record of the thread holds the run, as before.
        let unnamed = pending(PendingKind::Approval, serde_json::json!({}));
        assert_eq!(named(awaiting(&[asked, unnamed])), None);
    }
}
