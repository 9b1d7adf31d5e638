//! [`RunControls`]: resuming, cancelling and pausing queued runs on a store, checked for an
//! actor: what [`App::submit_resume_as`], [`App::cancel_run_as`] and [`App::pause_run_as`] do,
//! for tools that open a store without the graph's types (the `agentflow` CLI, its inbox).

use std::sync::Arc;

use agentflow_store::{NewAuditEntry, NewRun, QueueError, RunControl, RunWait, Store, ThreadRecord, ThreadStatus};

use crate::access::{Access, Operation};
#[cfg(doc)]
use crate::app::App;
use crate::app::WorkerError;
use crate::durable::{now_ms, release_parked};

/// The audit entry kind of a resume asked for ([`RunControls::submit_resume`]).
pub(crate) const RESUME_REQUESTED: &str = "run.resume_requested";

/// The key, in a [`RESUME_REQUESTED`] entry that queued a new run (the thread's run before it
/// had left the queue: failed, cancelled, paused, ...), of the thread's latest checkpoint then
/// (`null`: none): the run continues from it or from a later one.
pub(crate) const RESUMED_FROM: &str = "checkpoint";

/// Resumes, cancels and pauses the queued runs of a store for one actor, each checked by the
/// actor's [`Access`] and audited under its id. A thread of a tenant the actor does not act
/// for is treated as one that does not exist.
#[derive(Clone)]
pub struct RunControls {
    store: Arc<dyn Store>,
    access: Access,
}

impl std::fmt::Debug for RunControls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunControls").field("access", &self.access).finish_non_exhaustive()
    }
}

impl RunControls {
    /// Controls on `store`, checked and audited for `access`'s actor.
    pub fn new(store: Arc<dyn Store>, access: Access) -> Self {
        RunControls { store, access }
    }

    /// Queues thread `thread` to be resumed by a worker of graph `graph` (`None`: the graph
    /// the store's description of the thread's graph names); see [`App::submit_resume`].
    pub fn submit_resume(&self, thread: &str, graph: Option<&str>) -> Result<(), WorkerError> {
        let record = self
            .access
            .lookup::<WorkerError>(&*self.store, Operation::Resume, thread)?
            .ok_or_else(|| WorkerError::UnknownThread { thread: thread.to_string() })?;
        let graph = match graph {
            Some(g) => g.to_string(),
            None => self.graph_name(&record)?,
        };
        let store = &*self.store;
        // Waiting in `cx.interrupt` (also a thread an answer of the wrong shape failed there):
        // only an answer lets a worker continue it.
        match crate::approval::answer::waiting_all(store, thread) {
            Ok((seq, asks)) => {
                // Answered from another process: the worker's resume continues with the answers,
                // one for every question of the step.
                let answers = crate::approval::answer::recorded_all(store, thread, seq, &asks)?;
                if let Some(open) = asks.into_iter().zip(answers).find(|(_, a)| a.is_none()) {
                    return Err(WorkerError::ValueRequired { thread: thread.to_string(), node: open.0.node });
                }
            }
            Err(crate::approval::answer::AnswerError::Read(e)) => return Err(e.into()),
            Err(_) => {}
        }
        let at = now_ms();
        let detail = serde_json::json!({ "graph": graph, "status": record.status.as_str() });
        let entry = NewAuditEntry::new(at, &self.access.actor().id, RESUME_REQUESTED, detail);
        // Parked for an answer (recording it could not wake the run, or the thread was continued
        // otherwise and now waits for something else): woken in place of a new queued run.
        if store.wake_run_audited(thread, RunWait::Answer, entry.clone())? {
            return Ok(());
        }
        // Held for the follow-ups queued behind it (stopped at a breakpoint, paused): woken, so
        // the thread goes on and they run once its run ended.
        if store.wake_run_audited(thread, RunWait::Held, entry.clone())? {
            return Ok(());
        }
        // A new run, queued: where it continues from, which a rollback while it runs goes back
        // to and no further (see `App::submit_follow_up`).
        let mut entry = entry;
        entry.detail[RESUMED_FROM] = store.latest_checkpoint(thread)?.map(|c| c.seq).into();
        match store.enqueue_run_audited(NewRun::new(thread, &graph, None, &record.owner, at), entry.clone()) {
            // Its queued run is parked (a build refused to move the thread): claimable now.
            Err(QueueError::AlreadyQueued { .. }) if release_parked(store, thread)? => {
                store.append_audit(thread, entry).map_err(QueueError::from)?;
                Ok(())
            }
            other => Ok(other?),
        }
    }

    /// The name of the thread's graph in the store's description of it.
    fn graph_name(&self, record: &ThreadRecord) -> Result<String, WorkerError> {
        let description = self.store.graph_description(&record.graph_fingerprint)?;
        description
            .as_deref()
            .and_then(|d| serde_json::from_str::<serde_json::Value>(d).ok())
            .and_then(|d| d.get("name").and_then(serde_json::Value::as_str).map(str::to_string))
            .ok_or_else(|| WorkerError::GraphUnknown { thread: record.id.clone() })
    }

    /// Whether the actor may perform `operation` on the queued or running run of `thread`,
    /// with the thread's record when it has one: `None` when neither the thread nor a queued
    /// run of it is there for the actor. A run submitted for a new thread that no worker has
    /// started yet has no record: its queue row says its tenant.
    fn controllable(&self, operation: Operation, thread: &str) -> Result<Option<Option<ThreadRecord>>, WorkerError> {
        if self.store.thread(thread)?.is_some() {
            return Ok(self.access.lookup::<WorkerError>(&*self.store, operation, thread)?.map(Some));
        }
        if self.access.is_open() {
            return Ok(Some(None));
        }
        let Some(queued) = self.store.scan_runs()?.items.into_iter().find(|r| r.thread == thread) else {
            return Ok(None);
        };
        if !self.access.actor().acts_for(queued.tenant.as_deref()) {
            return Ok(None);
        }
        self.access.allow(operation, Some(thread))?;
        Ok(Some(None))
    }

    /// Asks that queued or running thread `thread` stop for good; see [`App::cancel_run`].
    /// `false` if it is not queued (or not there for the actor).
    pub fn cancel_run(&self, thread: &str) -> Result<bool, WorkerError> {
        if self.controllable(Operation::Cancel, thread)?.is_none() {
            return Ok(false);
        }
        self.control(thread, RunControl::Cancel, "run.cancel_requested")
    }

    /// Asks that queued or running thread `thread` pause at its next step boundary; see
    /// [`App::pause_run`]. `false` if it is not queued (or not there for the actor).
    pub fn pause_run(&self, thread: &str) -> Result<bool, WorkerError> {
        let Some(record) = self.controllable(Operation::Pause, thread)? else { return Ok(false) };
        if let Some(record) = record
            && matches!(record.status, ThreadStatus::Interrupted | ThreadStatus::Sleeping)
        {
            return Err(WorkerError::NotRunning {
                thread: thread.to_string(),
                status: record.status.as_str().to_string(),
            });
        }
        // The run may have parked since the status was read: the store refuses a pause on a
        // parked run in the write that would set it.
        match self.control(thread, RunControl::Pause, "run.pause_requested") {
            Err(WorkerError::Queue(QueueError::Waiting { thread, wait })) => {
                let status = if wait == RunWait::Timer { "sleeping" } else { "interrupted" };
                Err(WorkerError::NotRunning { thread, status: status.to_string() })
            }
            other => other,
        }
    }

    /// Sets `control` on the queued run of `thread` with its audit entry, in one transaction.
    fn control(&self, thread: &str, control: RunControl, kind: &str) -> Result<bool, WorkerError> {
        let detail = serde_json::json!({ "control": control.as_str() });
        let entry = NewAuditEntry::new(now_ms(), &self.access.actor().id, kind, detail);
        let set = self.store.control_run_audited(thread, control, entry)?;
        if set {
            // Parked: a worker takes the request now, not when the parking ends.
            release_parked(&*self.store, thread)?;
        }
        Ok(set)
    }
}
