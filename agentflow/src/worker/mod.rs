//! Workers: run a graph's threads from the store's run queue.

mod failures;
mod follow_up;
mod job;
mod parked;

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use agentflow_store::{QueuedRun, RunControl, RunWait, Settle, Store};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

pub use crate::app::WorkerError;
use failures::StoreFailures;
use job::{End, Job, Stops};

use crate::app::App;
use crate::core::state::State;
use crate::durable::{DEFAULT_LEASE_TTL, Durability, blocking, now_ms, process_tag};
#[cfg(doc)]
use crate::outcome::{Outcome, RunError};

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
/// - A follow-up run ([`App::submit_follow_up`]) takes its thread's queue row in the
///   transaction of the settle that ends the run before it. The worker that claims it restarts
///   the thread (its update applied, the cursor at the start node) in one commit fenced by the
///   claim's lease, then runs it as a resume; a claim after a worker died past the restart
///   finds the restart made and does not apply the update again
///   (`tests/processes/follow_up_kill.rs`). A cancel asked of a follow-up before it started
///   drops it, leaving the thread as it is.
/// - A run submitted with a webhook ([`webhook`](crate::webhook)): the settle that first ends or
///   parks it writes the delivery (the thread's status and state) in the same transaction.
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
    retention: Option<crate::app::retention::RetentionPolicy>,
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
            retention: None,
        }
    }

    /// Applies the graph's retention `policy` (see [`RetentionPolicy`](crate::RetentionPolicy))
    /// while it runs: when it starts, then every [`RetentionPolicy::every`](crate::RetentionPolicy::every).
    /// Default none: the worker removes nothing. Several workers may apply one policy: a purge
    /// or compaction done twice removes nothing more.
    #[must_use]
    pub fn retention(mut self, policy: crate::app::retention::RetentionPolicy) -> Self {
        self.retention = Some(policy);
        self
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
            not_run: OnceLock::new(),
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
                s.scan_runs().map(|runs| {
                    runs.items.iter().any(|r| {
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
        let store = self.app.setup.store.clone().ok_or(WorkerError::NoStore)?;
        let graph = self.app.setup.graph.name();
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
        let mut next_sweep = 0u64;
        // The retention sweep runs beside the loop, one at a time, so heartbeats, controls and
        // claims go on while it purges.
        let mut sweep: Option<tokio::task::JoinHandle<()>> = None;
        loop {
            let stopping = shutdown.is_cancelled();
            if let Some(policy) = self.retention.filter(|_| !stopping && now_ms() >= next_sweep)
                && sweep.as_ref().is_none_or(|s| s.is_finished())
            {
                let (app, who) = (self.app.clone(), self.id.clone());
                sweep = Some(tokio::spawn(async move { app.retention_sweep(policy, &who).await }));
                next_sweep = now_ms().saturating_add(u64::try_from(policy.every.as_millis()).unwrap_or(u64::MAX));
            }
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

#[cfg(test)]
mod tests {
    use crate::durable::process_tag;

    #[test]
    fn holder_ids_name_the_process_and_carry_random_bits() {
        let tag = process_tag();
        assert!(tag.contains(&format!("-pid{}-", std::process::id())), "{tag}");
        let random = tag.rsplit('-').next().unwrap();
        assert_eq!(random.len(), 16, "{tag}");
        assert!(random.chars().all(|c| c.is_ascii_hexdigit()), "{tag}");
        assert_eq!(process_tag(), tag, "one tag per process");
    }
}
