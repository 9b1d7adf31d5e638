//! A claimed follow-up run ([`App::submit_follow_up`](crate::App::submit_follow_up)): its
//! worker restarts the thread (the follow-up's input applied, the cursor at the start node;
//! see `durable::restart`) under the claim's lease, then runs it as a resume. A thread an
//! older version of the graph wrote is moved to the current one first
//! (`durable::graph_migration`).

use std::sync::Arc;

use agentflow_store::{CommitError, LeaseError, NewAuditEntry, QueuedRun, RunControl, ThreadRecord};
use tokio_util::sync::CancellationToken;

use super::job::{End, Job, OTHER_BUILD_RETRY, Then};
use super::parked::{REFUSED_RETRY, refused_for_good};
use crate::core::state::State;
use crate::durable::restart::{
    FOLLOW_UP_FAILED, FOLLOW_UP_FAILED_STATUS, Restart, Restarted, follow_up_mark, restart_thread, restarted_at,
};
use crate::durable::{
    HistoryError, PersistError, ResumeError, StoredRelease, ThreadError, Versions, blocking, migrate_thread, now_ms,
    stored_release,
};

/// How long a follow-up of a thread being undone waits, parked, before it is claimed again
/// (unless the thread is taken meanwhile: a resume continuing the compensation).
const COMPENSATING_RETRY: std::time::Duration = std::time::Duration::from_secs(5 * 60);

impl<S: State, D: Send + Sync + 'static> Job<S, D> {
    /// Runs follow-up `claim`: a cancel asked before its restart drops it (the thread is left as
    /// it is), one asked after it ends the thread `cancelled`; otherwise the thread is restarted,
    /// once (a claim after the follow-up parked, or after a worker died past the restart, finds
    /// it made, and goes on even under a newer version of the graph), and resumed. A pause asked
    /// before it started stops it at its first step boundary, after the restart.
    pub(super) async fn run_follow_up(&self, claim: &QueuedRun) -> (End, Then) {
        match claim.control {
            // Cancelled before its restart: it leaves the queue, the thread as it is. Cancelled
            // after it (the follow-up parked, or its worker died past the restart): the thread
            // is resumed already cancelled, as any cancelled claim, and ends `cancelled`.
            Some(RunControl::Cancel) => {
                self.stops.ask(RunControl::Cancel);
                match self.is_restarted(claim).await {
                    Ok(false) => {
                        let why = "the follow-up was cancelled before it ran; the thread is as it was";
                        let _ = self.not_run.set(("cancelled", why.to_string()));
                        return (End::Controlled, Then::Remove);
                    }
                    Ok(true) => {}
                    Err(end) => return end,
                }
                // A fresh pause token: a cancel wins over this worker's shutdown asking for a pause.
                let runner = self.runner(claim, self.stops.token.clone(), CancellationToken::new());
                let result = runner.resume().await;
                return self.ended(claim, result).await;
            }
            Some(control) => self.stops.ask(control),
            None => {}
        }
        if let Err(end) = self.restart(claim).await {
            return end;
        }
        let result = self.runner(claim, self.stops.token.clone(), self.stops.pause.clone()).resume().await;
        self.ended(claim, result).await
    }

    /// Whether follow-up `claim` restarted its thread already; `Err` with how the run ends when
    /// the thread's history cannot be read.
    async fn is_restarted(&self, claim: &QueuedRun) -> Result<bool, (End, Then)> {
        let Some(update) = claim.input.as_deref() else { return Ok(false) };
        let (thread, mark) = (claim.thread.clone(), follow_up_mark(claim.enqueued_at, update));
        match blocking(&self.store, move |s| s.list_checkpoints(&thread)).await {
            Ok(Ok(checkpoints)) => Ok(restarted_at(&checkpoints, &mark).is_some()),
            Ok(Err(e)) => Err(self.store_failure(claim, &PersistError::from(e))),
            Err(e) => Err(self.store_failure(claim, &e)),
        }
    }

    /// Writes the restart of follow-up `claim`'s thread, fenced by the claim's lease; `Err`
    /// with how the run ends when it cannot.
    ///
    /// A claim after the restart was written (the follow-up parked, or its worker died past
    /// it) goes on with the run the restart began, even on another version of the graph: the
    /// resume moves the thread through the declared migrations as any resume does. A restart not
    /// written yet is refused for its input or for a thread of another graph; a thread an older
    /// version of this graph wrote is moved to this one first (finished or waiting), and one a
    /// newer version wrote leaves the follow-up queued for a worker of that version.
    async fn restart(&self, claim: &QueuedRun) -> Result<(), (End, Then)> {
        let thread = claim.thread.clone();
        let Some(update) = claim.input.clone() else {
            return Err(self.failed(claim, "the follow-up run has no input".to_string()).await);
        };
        if !self.is_restarted(claim).await? {
            match self.fit(&thread, &update).await {
                Fit::Runs => {}
                Fit::Moves(record) => self.move_thread(claim, &record).await?,
                Fit::Newer(why) => {
                    tracing::warn!(thread = %claim.thread, why, "a follow-up this build cannot run; retried later");
                    return Err((End::Failed, Then::Backoff(OTHER_BUILD_RETRY)));
                }
                Fit::Refused(why) => return Err(self.failed(claim, why).await),
                Fit::Store(e) => return Err(self.store_failure(claim, &e)),
            }
        }
        let graph = &self.app.setup.graph;
        let start = graph.node_name(graph.start());
        let mark = follow_up_mark(claim.enqueued_at, &update);
        let (store, holder, rollback) = (Arc::clone(&self.store), self.holder.clone(), claim.fork_from);
        let restarted = blocking(&self.store, move |_| {
            let restart = Restart { thread: &thread, holder: &holder, update, rollback, start, actor: &holder, mark };
            restart_thread(&store, restart)
        })
        .await;
        match restarted {
            Ok(Ok(Restarted::Now(seq) | Restarted::Already(seq))) => {
                tracing::debug!(thread = %claim.thread, seq, "a follow-up run restarted its thread");
                Ok(())
            }
            Ok(Err(HistoryError::Persist(
                PersistError::Commit(CommitError::LeaseLost { .. }) | PersistError::Lease(LeaseError::NotHeld { .. }),
            ))) => Err((End::Lost, Then::Nothing)),
            Ok(Err(HistoryError::Persist(e @ (PersistError::Commit(_) | PersistError::Read(_))))) => {
                Err(self.store_failure(claim, &e))
            }
            Err(e) => Err(self.store_failure(claim, &e)),
            // The thread is being undone (its compensation waits for a person or a retry): the
            // follow-up waits for the compensation to end, parked, so that whoever continues
            // the compensation (a resume) takes the thread at once.
            Ok(Err(e @ HistoryError::Undone { status: "compensating", .. })) => {
                tracing::info!(thread = %claim.thread, error = %e, "a follow-up waits for its thread's compensation");
                Err((End::Failed, Then::Parked(COMPENSATING_RETRY, e.to_string())))
            }
            Ok(Err(e)) => Err(self.failed(claim, format!("the follow-up could not restart its thread: {e}")).await),
        }
    }

    /// Whether a follow-up with input `update` can restart `thread`: moved first when an older
    /// version of this graph wrote it; left queued when a newer version did, or another build of
    /// this version (a rolling deploy: a worker of that build takes it, as it takes a resume, see
    /// `durable::stored_release`); refused when the thread runs another graph or the input is not
    /// an update of this graph's state, the thread left as it is.
    async fn fit(&self, thread: &str, update: &[u8]) -> Fit {
        let graph = &self.app.setup.graph;
        let (t, fingerprint) = (thread.to_string(), graph.fingerprint().to_string());
        let other =
            blocking(&self.store, move |s| s.thread(&t).map(|r| r.filter(|r| r.graph_fingerprint != fingerprint)));
        let fit = match other.await {
            Ok(Ok(Some(record))) => {
                let (t, stored_fp, release) = (thread.to_string(), record.graph_fingerprint.clone(), *graph.release());
                match blocking(&self.store, move |s| stored_release(s, &t, &stored_fp, &release)).await {
                    Ok(Ok(StoredRelease::Older(_))) => Fit::Moves(record),
                    Ok(Ok(StoredRelease::Newer(stored))) => {
                        return Fit::Newer(format!(
                            "the thread is on version {stored} of graph `{}`, this worker's is {}",
                            graph.release().id,
                            graph.version()
                        ));
                    }
                    Ok(Ok(StoredRelease::SameVersion)) => {
                        return Fit::Newer(format!(
                            "the thread runs another build of version {} of graph `{}` (fingerprint {}, this \
                             worker's {})",
                            graph.version(),
                            graph.release().id,
                            record.graph_fingerprint,
                            graph.fingerprint()
                        ));
                    }
                    Ok(Ok(StoredRelease::OtherGraph(_))) => {
                        return Fit::Refused(format!(
                            "the thread runs another graph (fingerprint {}, this worker's {}); the thread is left \
                             as it is",
                            record.graph_fingerprint,
                            graph.fingerprint()
                        ));
                    }
                    Ok(Err(e)) => return Fit::Store(PersistError::from(e)),
                    Err(e) => return Fit::Store(e),
                }
            }
            _ => Fit::Runs,
        };
        // The input is this build's to decode: checked only once the thread is this build's.
        if let Err(e) = serde_json::from_slice::<S::Update>(update) {
            // serde's message quotes the value: say only where it went wrong.
            let why = crate::secret::describe_decode_error(&e);
            return Fit::Refused(format!("the follow-up's input does not decode as the graph's update: {why}"));
        }
        fit
    }

    /// Moves `record`, stored by an older version of the graph, to this one before the
    /// follow-up restarts it: the same commit (fenced by the claim's lease) and `graph.migrated`
    /// audit entry as a resume's. `Err` with how the run ends when it cannot: left queued for a
    /// later build when the declared migrations do not carry it, as a resume is.
    async fn move_thread(&self, claim: &QueuedRun, record: &ThreadRecord) -> Result<(), (End, Then)> {
        let setup = &self.app.setup;
        let tool_risk = |name: &str| setup.graph.tool(name).map(|t| t.risk().to_string());
        let versions = Versions { release: setup.graph.release(), tool_risk: &tool_risk };
        match migrate_thread::<S>(setup, &versions, &self.store, &self.holder, record).await {
            Ok(()) => Ok(()),
            Err(
                ThreadError::Persist(
                    PersistError::Commit(CommitError::LeaseLost { .. })
                    | PersistError::Lease(LeaseError::NotHeld { .. }),
                )
                | ThreadError::LeaseLost { .. }
                | ThreadError::Busy { .. },
            ) => Err((End::Lost, Then::Nothing)),
            Err(ThreadError::Persist(e)) => Err(self.store_failure(claim, &e)),
            Err(ThreadError::Resume(e)) if refused_for_good(&e) => {
                tracing::warn!(thread = %claim.thread, error = %e, "a follow-up's thread this build refuses for good; parked");
                Err((End::Failed, Then::Parked(REFUSED_RETRY, e.to_string())))
            }
            Err(ThreadError::Resume(
                e @ (ResumeError::GraphNewer { .. }
                | ResumeError::GraphChanged { .. }
                | ResumeError::NodeUnmapped { .. }),
            )) => {
                tracing::warn!(thread = %claim.thread, error = %e, "a follow-up's thread this build cannot move; retried later");
                Err((End::Failed, Then::Backoff(OTHER_BUILD_RETRY)))
            }
            Err(e) => {
                let why =
                    format!("the follow-up could not move its thread to this version: {}", crate::RunError::from(e));
                Err(self.failed(claim, why).await)
            }
        }
    }

    /// Follow-up `claim` cannot run (`why`): it leaves the queue, the thread as it was, with a
    /// `run.follow_up_failed` audit entry in the thread's log saying why (what submitted it was
    /// answered already).
    async fn failed(&self, claim: &QueuedRun, why: String) -> (End, Then) {
        tracing::warn!(thread = %claim.thread, why, "a follow-up run leaves the queue without running");
        let _ = self.not_run.set((FOLLOW_UP_FAILED_STATUS, why.clone()));
        let detail = serde_json::json!({
            "reason": why,
            "submitted_at": claim.enqueued_at,
            "rollback": claim.fork_from.is_some(),
        });
        let entry = NewAuditEntry::new(now_ms(), &self.holder, FOLLOW_UP_FAILED, detail);
        let thread = claim.thread.clone();
        match blocking(&self.store, move |s| s.append_audit(&thread, entry)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::warn!(thread = %claim.thread, error = %e, "could not audit a failed follow-up run"),
            Err(e) => tracing::warn!(thread = %claim.thread, error = %e, "could not audit a failed follow-up run"),
        }
        (End::Failed, Then::Remove)
    }
}

/// Whether a follow-up not restarted yet can restart its thread.
enum Fit {
    /// The thread runs this graph's build.
    Runs,
    /// An older version of the graph wrote it: moved to this one first.
    Moves(ThreadRecord),
    /// A newer version wrote it, or another build of this version (why): left queued for a
    /// build that runs it.
    Newer(String),
    /// It cannot run (why): it leaves the queue, audited.
    Refused(String),
    /// The store failed: it stays queued for another try.
    Store(PersistError),
}
