//! The [`Scheduler`]: resumes threads whose timers are due.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentflow_store::{QueueError, Timer};
use futures_util::FutureExt;
use tokio::sync::{Semaphore, broadcast};
use tokio_util::sync::CancellationToken;

use super::App;
use super::retention::RetentionPolicy;
use crate::core::state::State;
use crate::durable::blocking;
use crate::outcome::Outcome;
use crate::schedule::ScheduleError;

use crate::durable::wake::now_ms;

/// How a [`Scheduler`] polls and how much it runs at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct SchedulerConfig {
    /// The longest the scheduler waits before looking at the store again
    /// (default 50 ms). It also wakes exactly at the next timer it knows of;
    /// this bounds how late it notices a timer set after its last look.
    pub poll: Duration,
    /// How many woken threads run at once (default 64).
    pub concurrency: usize,
    /// How many due timers one look reads (default 256).
    pub batch: usize,
    /// After a due thread was not resumed (the resume failed, another
    /// executor holds the thread, ..), how long before it is tried again
    /// (default 1 s).
    pub retry_after: Duration,
    /// The graph's retention policy, applied every [`RetentionPolicy::every`] (default none:
    /// the scheduler removes nothing). (Appended last.)
    pub retention: Option<RetentionPolicy>,
    /// How often the scheduler looks for the graph's due cron schedules and fires them
    /// ([`App::fire_due_schedules`]; default 1 s). A schedule fires at most this late. (Appended
    /// last.)
    pub schedules_every: Duration,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            poll: Duration::from_millis(50),
            concurrency: 64,
            batch: 256,
            retry_after: Duration::from_secs(1),
            retention: None,
            schedules_every: Duration::from_secs(1),
        }
    }
}

impl SchedulerConfig {
    /// Sets [`SchedulerConfig::poll`].
    #[must_use]
    pub fn poll(mut self, poll: Duration) -> Self {
        self.poll = poll;
        self
    }

    /// Sets [`SchedulerConfig::retention`]: the scheduler applies `policy` to the graph's
    /// finished threads (first when it starts, then every [`RetentionPolicy::every`]).
    #[must_use]
    pub fn retention(mut self, policy: RetentionPolicy) -> Self {
        self.retention = Some(policy);
        self
    }

    /// Sets [`SchedulerConfig::schedules_every`] (at least 1 ms).
    #[must_use]
    pub fn schedules_every(mut self, every: Duration) -> Self {
        self.schedules_every = every.max(Duration::from_millis(1));
        self
    }

    /// Sets [`SchedulerConfig::concurrency`] (at least 1).
    #[must_use]
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }
}

/// A thread the scheduler woke, and how its resumed run ended.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Woken {
    /// The thread.
    pub thread: String,
    /// The resumed run's outcome, or its error as text.
    pub result: Result<Outcome, String>,
}

/// Resumes waiting threads when their timers are due: a tokio task over
/// the store's timer index ([`Store::due_timers`](crate::Store::due_timers)). A thread has a timer
/// while it sleeps ([`Outcome::Sleeping`]) and while it waits for an
/// approval (at the approval's expiry: resumed then, the call resolves as an
/// `APPROVAL_EXPIRED` observation the node or model can route on).
///
/// Started with [`App::scheduler`] (or [`App::scheduler_with`]); stopped with
/// [`Scheduler::shutdown`] or by dropping it (which stops the loop; runs in
/// flight finish on their own).
///
/// Guarantees, as the tests show:
/// - A thread is resumed once it is due (`now >= until`), never before.
/// - Each due thread is resumed by one executor: the resume takes the
///   thread's lease, and only then checks that the thread is still sleeping
///   with a due timer. Another scheduler (in this or another process, on the
///   same PostgreSQL store) that saw the same timer finds the thread busy or
///   already moved on, and leaves it.
/// - Timers live in the store: a scheduler started after a restart fires the
///   overdue ones at once.
///
/// Wake-up lag is bounded by [`SchedulerConfig::poll`] for timers set after
/// the scheduler's last look, and by the store's read time otherwise.
///
/// It also fires the graph's due cron schedules ([`App::schedule`]), every
/// [`SchedulerConfig::schedules_every`], beside the timers: each fire queues a run for a
/// [`Worker`](crate::Worker), once across every scheduler that shares the store (see
/// [`crate::schedule`]). On a store that keeps no schedules it stops looking after the first
/// answer saying so.
///
/// The scheduler resumes the due threads of this graph. A thread of another
/// graph in the same store (its stored graph description names another
/// graph: a subgraph's child thread, or a graph with a scheduler of its own)
/// is left to that graph, quietly, and looked at again after
/// [`SchedulerConfig::retry_after`]. A thread of an older version of this
/// graph fails to resume
/// ([`ResumeError::GraphChanged`](crate::persist::ResumeError::GraphChanged),
/// logged) and is tried again after `retry_after`.
pub struct Scheduler {
    cancel: CancellationToken,
    task: Option<tokio::task::JoinHandle<()>>,
    woken: broadcast::Sender<Woken>,
    first: Mutex<Option<broadcast::Receiver<Woken>>>,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler").field("running", &!self.cancel.is_cancelled()).finish_non_exhaustive()
    }
}

/// A subscription to the threads a [`Scheduler`] wakes.
#[derive(Debug)]
pub struct WokenStream {
    rx: broadcast::Receiver<Woken>,
}

impl WokenStream {
    /// The next thread woken; `None` once the scheduler stopped. A
    /// subscriber that falls more than 1024 wake-ups behind skips the oldest.
    pub async fn next(&mut self) -> Option<Woken> {
        loop {
            match self.rx.recv().await {
                Ok(w) => return Some(w),
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }

    /// Waits until `thread` is woken; `None` if the scheduler stopped first.
    pub async fn wait_for(&mut self, thread: &str) -> Option<Woken> {
        while let Some(w) = self.next().await {
            if w.thread == thread {
                return Some(w);
            }
        }
        None
    }
}

impl Scheduler {
    /// Starts the loop that resumes `app`'s sleeping threads (what
    /// [`App::scheduler_with`] does).
    pub(crate) fn start<S: State, D: Send + Sync + 'static>(
        app: App<S, D>,
        deps: Arc<D>,
        config: SchedulerConfig,
    ) -> Scheduler {
        let cancel = CancellationToken::new();
        let (woken, first) = broadcast::channel(1024);
        let looped = Loop {
            app,
            deps,
            config,
            cancel: cancel.clone(),
            woken: woken.clone(),
            running: Arc::new(Mutex::new(HashSet::new())),
            backoff: HashMap::new(),
        };
        let task = tokio::spawn(async move {
            // Said where it happens: nothing else would show that sleeping threads stopped waking.
            if let Err(panic) = std::panic::AssertUnwindSafe(looped.run()).catch_unwind().await {
                let message = crate::run::node::panic_message(panic.as_ref());
                tracing::error!(
                    panic = message,
                    "the timer scheduler stopped: its loop panicked; no sleeping thread is woken until a scheduler starts again"
                );
            }
        });
        Scheduler { cancel, task: Some(task), woken, first: Mutex::new(Some(first)) }
    }

    /// Wake-ups from now on. The first call sees every wake-up since the
    /// scheduler started; later calls, those after the call.
    pub fn subscribe(&self) -> WokenStream {
        let first = self.first.lock().unwrap_or_else(|p| p.into_inner()).take();
        WokenStream { rx: first.unwrap_or_else(|| self.woken.subscribe()) }
    }

    /// Stops the loop and waits for it; the runs it started finish first.
    pub async fn shutdown(mut self) {
        self.cancel.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

struct Loop<S: State, D> {
    app: App<S, D>,
    deps: Arc<D>,
    config: SchedulerConfig,
    cancel: CancellationToken,
    woken: broadcast::Sender<Woken>,
    /// Threads this scheduler is resuming now.
    running: Arc<Mutex<HashSet<String>>>,
    /// Threads whose resume failed, and when to try them again (unix ms).
    backoff: HashMap<String, u64>,
}

impl<S: State, D: Send + Sync + 'static> Loop<S, D> {
    async fn run(mut self) {
        let Some(store) = self.app.setup.store.clone() else { return };
        // A semaphore holds at most `MAX_PERMITS`: a larger figure means "no limit" just as well.
        let permits = Arc::new(Semaphore::new(self.config.concurrency.clamp(1, Semaphore::MAX_PERMITS)));
        let mut tasks = tokio::task::JoinSet::new();
        let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel::<(String, bool)>();
        let mut next_sweep = 0u64;
        // The retention sweep runs beside the loop, one at a time, so timers fire while it purges.
        let mut sweep: Option<tokio::task::JoinHandle<()>> = None;
        // The cron schedules fire beside the loop too, one look at a time.
        let mut schedules = Schedules::default();
        loop {
            schedules.look(&self.app, self.config.schedules_every);
            if let Some(policy) = self.config.retention
                && now_ms() >= next_sweep
                && sweep.as_ref().is_none_or(|s| s.is_finished())
            {
                let app = self.app.clone();
                sweep = Some(tokio::spawn(async move { app.retention_sweep(policy, "scheduler").await }));
                next_sweep = now_ms().saturating_add(u64::try_from(policy.every.as_millis()).unwrap_or(u64::MAX));
            }
            let now = now_ms();
            self.backoff.retain(|_, at| *at > now);
            // Look at one more than is in flight, so the next timer is known
            // even while the earliest ones are still running.
            let busy = self.running.lock().unwrap_or_else(|p| p.into_inner()).len() + self.backoff.len();
            let limit = self.config.batch.max(1).saturating_add(busy);
            let timers = match blocking(&store, move |s| s.due_timers(u64::MAX, limit)).await {
                Ok(Ok(timers)) => timers,
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "scheduler: could not read the timers");
                    Vec::new()
                }
                Err(e) => {
                    tracing::warn!(error = %e, "scheduler: could not read the timers");
                    Vec::new()
                }
            };
            let mut next: Option<u64> = None;
            for Timer { wake_at, thread } in timers {
                if self.backoff.contains_key(&thread)
                    || self.running.lock().unwrap_or_else(|p| p.into_inner()).contains(&thread)
                {
                    continue;
                }
                if wake_at > now_ms() {
                    next = Some(wake_at);
                    break;
                }
                let Ok(permit) = Arc::clone(&permits).acquire_owned().await else { return };
                self.running.lock().unwrap_or_else(|p| p.into_inner()).insert(thread.clone());
                let (app, deps, woken, running) =
                    (self.app.clone(), Arc::clone(&self.deps), self.woken.clone(), Arc::clone(&self.running));
                let done = done_tx.clone();
                tasks.spawn(async move {
                    let result = app.wake_due(&thread, &deps).await;
                    running.lock().unwrap_or_else(|p| p.into_inner()).remove(&thread);
                    drop(permit);
                    // Not resumed (failed, busy elsewhere, no longer due): not
                    // tried again before `retry_after`, so the loop never spins on it.
                    let failed = !matches!(result, Ok(Some(_)));
                    match result {
                        Ok(Some(run)) => drop(woken.send(Woken { thread: thread.clone(), result: Ok(run.outcome) })),
                        Ok(None) => {}
                        Err(e) => {
                            tracing::warn!(thread = %thread, error = %e, "scheduler: could not resume a due thread");
                            drop(woken.send(Woken { thread: thread.clone(), result: Err(e.to_string()) }));
                        }
                    }
                    let _ = done.send((thread, failed));
                });
            }
            let wait = next.map_or(self.config.poll, |at| {
                Duration::from_millis(at.saturating_sub(now_ms())).min(self.config.poll)
            });
            tokio::select! {
                () = self.cancel.cancelled() => break,
                () = tokio::time::sleep(wait) => {}
                Some((thread, failed)) = done_rx.recv() => {
                    if failed {
                        let retry = u64::try_from(self.config.retry_after.as_millis()).unwrap_or(u64::MAX);
                        self.backoff.insert(thread, now_ms().saturating_add(retry));
                    }
                }
            }
            while let Some(joined) = tasks.try_join_next() {
                if let Err(e) = joined {
                    tracing::warn!(error = %e, "scheduler: a resume task panicked");
                }
            }
        }
        while tasks.join_next().await.is_some() {}
    }
}

/// The scheduler's looks at the graph's cron schedules, each on the blocking pool, one at a time.
#[derive(Default)]
struct Schedules {
    /// The look under way, if any.
    firing: Option<tokio::task::JoinHandle<Result<Vec<String>, ScheduleError>>>,
    /// When to look next (unix ms).
    next: u64,
    /// The store keeps no schedules: not looked at again.
    unsupported: bool,
}

impl Schedules {
    /// Notes how the last look ended, and starts the next one when it is time.
    fn look<S: State, D: Send + Sync + 'static>(&mut self, app: &App<S, D>, every: Duration) {
        if let Some(done) = self.firing.take_if(|f| f.is_finished()) {
            // Finished: `now_or_never` takes its result without waiting.
            match done.now_or_never() {
                Some(Ok(Ok(threads))) if !threads.is_empty() => {
                    tracing::debug!(threads = ?threads, "scheduler: fired cron schedules");
                }
                Some(Ok(Ok(_))) | None => {}
                Some(Ok(Err(ScheduleError::Queue(QueueError::Unsupported { detail })))) => {
                    tracing::debug!(detail = %detail, "scheduler: the store keeps no cron schedules");
                    self.unsupported = true;
                }
                Some(Ok(Err(e))) => tracing::warn!(error = %e, "scheduler: could not fire the cron schedules"),
                Some(Err(e)) => tracing::warn!(error = %e, "scheduler: the cron schedules' look panicked"),
            }
        }
        let now = now_ms();
        if self.unsupported || self.firing.is_some() || now < self.next || app.setup.store.is_none() {
            return;
        }
        let app = app.clone();
        self.firing = Some(tokio::task::spawn_blocking(move || app.fire_due_schedules(now)));
        self.next = now.saturating_add(u64::try_from(every.as_millis()).unwrap_or(u64::MAX));
    }
}
