//! Retention: how long a graph's finished threads keep their data ([`RetentionPolicy`]), applied
//! by [`App::apply_retention`], which the scheduler and the workers call on their own.

use std::time::Duration;

use std::sync::Arc;

use agentflow_store::{ApprovalStatus, CompactError, PurgeError, Store, ThreadRecord, ThreadStatus};

use crate::access::Operation;
use crate::app::App;
use crate::app::governance::purge_thread;
use crate::core::state::State;
use crate::durable::{HistoryError, PersistError};

/// How long the finished threads of a graph keep their data, applied by the graph's
/// [`Scheduler`](crate::timer::Scheduler) ([`SchedulerConfig::retention`](crate::timer::SchedulerConfig::retention))
/// and [`Worker`](crate::Worker)s ([`Worker::retention`](crate::Worker::retention)),
/// or by a call to [`App::apply_retention`]. A finished thread (completed, failed, cancelled,
/// budget exhausted, compensated) of the graph keeps its newest
/// [`keep_checkpoints`](Self::keep_checkpoints) checkpoints, the older ones compacted away
/// ([`App::compact`]).
///
/// Only a thread that ended well, `completed` or `compensated`, is purged
/// ([`App::purge_thread`]), with its subgraph children, once [`purge_after`](Self::purge_after)
/// has passed since it last changed. A thread that `failed`, was `cancelled` or ran out of
/// budget is never purged by retention (someone may still have to look into it, or resume it
/// with a raised budget): purge it by hand when it is settled. Nor is a thread (or one of its
/// subgraph children) with an approval whose outcome is unknown (`outcome_unknown`: a human
/// must still decide whether its action happened); those are compacted only.
///
/// The audit log outlives the data: a purge keeps every entry (who did what when; details
/// replaced by the purge marker) and the thread's record as a tombstone, and no policy removes
/// them. A legal hold always wins: a held thread, or one with a held subgraph child, is
/// neither compacted nor purged. Each purge is audited in the thread's log, by the app's actor
/// (the process, unless [`App::acting_as`] says otherwise).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetentionPolicy {
    /// How many of its newest checkpoints a finished thread keeps (`None`: all).
    pub keep_checkpoints: Option<usize>,
    /// How long after it last changed a finished thread is purged (`None`: never).
    pub purge_after: Option<Duration>,
    /// How often the scheduler and the workers apply the policy (default 1 minute).
    pub every: Duration,
}

impl Default for RetentionPolicy {
    fn default() -> Self {
        RetentionPolicy { keep_checkpoints: None, purge_after: None, every: Duration::from_secs(60) }
    }
}

impl RetentionPolicy {
    /// A policy that keeps everything; set what it removes with the methods below.
    pub fn new() -> Self {
        RetentionPolicy::default()
    }

    /// Keeps a finished thread's `n` newest checkpoints (at least 1).
    #[must_use]
    pub fn keep_checkpoints(mut self, n: usize) -> Self {
        self.keep_checkpoints = Some(n.max(1));
        self
    }

    /// Purges a finished thread `after` it last changed.
    #[must_use]
    pub fn purge_after(mut self, after: Duration) -> Self {
        self.purge_after = Some(after);
        self
    }

    /// How often the scheduler and the workers apply the policy.
    #[must_use]
    pub fn every(mut self, every: Duration) -> Self {
        self.every = every;
        self
    }
}

/// What one [`App::apply_retention`] did, thread by thread.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetentionReport {
    /// Threads whose older checkpoints were compacted away.
    pub compacted: Vec<String>,
    /// Threads purged (each with its subgraph children).
    pub purged: Vec<String>,
    /// Threads due for compaction or purge but under legal hold (theirs or a child's).
    pub held: Vec<String>,
    /// Threads the policy could not be applied to, with why (a run holds one, a store
    /// failure, reading one of them failed): tried again next time. The sweep goes on with
    /// the other threads.
    pub failed: Vec<(String, String)>,
}

impl<S: State, D> App<S, D> {
    /// Applies `policy` to this graph's finished threads at time `now` (unix millis): see
    /// [`RetentionPolicy`]. The threads of other graphs and subgraph children (which go with
    /// their parent) are left alone. A thread the app's actor may not purge or compact (its
    /// access policy), or one whose records cannot be read, is reported in
    /// [`RetentionReport::failed`] and the sweep goes on; only listing the threads failing
    /// fails the call.
    pub fn apply_retention(&self, policy: &RetentionPolicy, now: u64) -> Result<RetentionReport, HistoryError> {
        let store = self.setup.store.as_ref().ok_or(HistoryError::NoStore)?;
        let mut report = RetentionReport::default();
        let threads = store.scan_threads().map_err(PersistError::from)?.items;
        for t in threads.iter().filter(|t| self.retains(t)) {
            let id = t.id.clone();
            match self.retain_one(store, policy, t, now) {
                Ok(Retained::Kept) => {}
                Ok(Retained::Purged) => report.purged.push(id),
                Ok(Retained::Compacted) => report.compacted.push(id),
                Err(
                    HistoryError::Purge(PurgeError::Held { .. }) | HistoryError::Compact(CompactError::Held { .. }),
                ) => {
                    report.held.push(id);
                }
                Err(e) => report.failed.push((id, e.to_string())),
            }
        }
        Ok(report)
    }

    /// Applies `policy` to thread `t`.
    fn retain_one(
        &self,
        store: &Arc<dyn Store>,
        policy: &RetentionPolicy,
        t: &ThreadRecord,
        now: u64,
    ) -> Result<Retained, HistoryError> {
        let id = t.id.as_str();
        let due = policy.purge_after.is_some_and(|after| {
            now >= t.updated_at.saturating_add(u64::try_from(after.as_millis()).unwrap_or(u64::MAX))
        });
        if due
            && matches!(t.status, ThreadStatus::Completed | ThreadStatus::Compensated)
            && !outcome_unknown(store, id)?
        {
            self.check(Operation::Purge, id)?;
            purge_thread(store, id, &self.actor().id, now)?;
            return Ok(Retained::Purged);
        }
        let Some(keep) = policy.keep_checkpoints else { return Ok(Retained::Kept) };
        if store.list_checkpoints(id).map_err(PersistError::from)?.len() <= keep {
            return Ok(Retained::Kept);
        }
        // The store refuses a held thread (or one under a held thread): `CompactError::Held`.
        self.compact(id, keep)?;
        Ok(Retained::Compacted)
    }

    /// Whether retention looks at `t`: a finished, unpurged thread of this graph (its
    /// fingerprint, or an older version's: same name), not a subgraph child, that the app's
    /// actor sees.
    fn retains(&self, t: &ThreadRecord) -> bool {
        if t.parent.is_some() || !t.status.is_finished() || t.status == ThreadStatus::Purged {
            return false;
        }
        if !self.setup.access.sees(t) {
            return false;
        }
        if t.graph_fingerprint == self.setup.graph.fingerprint() {
            return true;
        }
        let Some(store) = self.setup.store.as_ref() else { return false };
        let name = store
            .graph_description(&t.graph_fingerprint)
            .ok()
            .flatten()
            .and_then(|d| serde_json::from_str::<serde_json::Value>(&d).ok())
            .and_then(|d| d.get("name").and_then(serde_json::Value::as_str).map(str::to_string));
        name.is_some_and(|n| n == self.setup.graph.name())
    }
}

/// What retention did to one thread.
enum Retained {
    Kept,
    Purged,
    Compacted,
}

/// Whether `thread` or one of its subgraph children (every level) has an approval whose
/// outcome is unknown.
fn outcome_unknown(store: &Arc<dyn Store>, thread: &str) -> Result<bool, HistoryError> {
    let mut stack = vec![thread.to_string()];
    while let Some(id) = stack.pop() {
        let approvals = store.list_approvals(&id).map_err(PersistError::from)?;
        if approvals.iter().any(|a| a.status == ApprovalStatus::OutcomeUnknown) {
            return Ok(true);
        }
        stack.extend(store.child_threads(&id).map_err(PersistError::from)?.items.into_iter().map(|c| c.id));
    }
    Ok(false)
}

impl<S: State, D: Send + Sync + 'static> App<S, D> {
    /// [`App::apply_retention`] on a blocking thread at the current time, its outcome logged:
    /// what the scheduler and the workers run every [`RetentionPolicy::every`].
    pub(crate) async fn retention_sweep(&self, policy: RetentionPolicy, who: &str) {
        let app = self.clone();
        let now = crate::core::clock::now_ms();
        match tokio::task::spawn_blocking(move || app.apply_retention(&policy, now)).await {
            Ok(Ok(report)) => {
                for (thread, why) in &report.failed {
                    tracing::warn!(by = who, thread = %thread, error = %why, "retention: could not apply the policy");
                }
                if !report.purged.is_empty() || !report.compacted.is_empty() {
                    tracing::info!(by = who, purged = ?report.purged, compacted = ?report.compacted, "retention applied");
                }
            }
            Ok(Err(e)) => tracing::warn!(by = who, error = %e, "retention: could not list the threads"),
            Err(e) => tracing::warn!(by = who, error = %e, "retention: the sweep panicked"),
        }
    }
}
