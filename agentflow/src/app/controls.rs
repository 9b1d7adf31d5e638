//! Queued runs, from the App: submitting a run for a [`Worker`], resuming,
//! cancelling or pausing it from any process, and listing the live runs.

use std::sync::Arc;

use agentflow_store::{NewAuditEntry, NewRun, QueueError, QueuedRun, RunControl, RunWait, Store};

use crate::app::App;
use crate::app::WorkerError;
use crate::core::state::State;
use crate::durable::now_ms;
use crate::durable::process_actor;
#[cfg(doc)]
use crate::outcome::Outcome;
#[cfg(doc)]
use crate::worker::Worker;

impl<S: State, D> App<S, D> {
    fn queue_store(&self) -> Result<&Arc<dyn Store>, WorkerError> {
        self.setup.store.as_ref().ok_or(WorkerError::NoStore)
    }

    /// Submits a new run of thread `thread` from `input` for a [`Worker`] (in any process that
    /// shares the store) to claim; blocking. The thread belongs to no one in particular; see
    /// [`App::submit_as`]. A `run.submitted` entry in the thread's audit log, written with the
    /// run, names this process as who asked (see [`App::submit_as`]).
    ///
    /// # Errors
    /// [`WorkerError::ThreadExists`] if the thread exists, [`QueueError::AlreadyQueued`] if it
    /// is queued already.
    pub fn submit(&self, thread: &str, input: &S) -> Result<(), WorkerError> {
        self.submit_as(thread, input, "")
    }

    /// [`App::submit`] for a thread that belongs to `owner` (stored with it); the
    /// `run.submitted` audit entry names `owner` as who asked (this process if `owner` is empty).
    pub fn submit_as(&self, thread: &str, input: &S, owner: &str) -> Result<(), WorkerError> {
        for (what, value) in [("thread id", thread), ("owner", owner)] {
            if value.contains('\0') {
                return Err(WorkerError::NulByte { what, value: value.to_string() });
            }
        }
        let store = self.queue_store()?;
        self.setup.check_owner(owner)?;
        if store.thread(thread)?.is_some() {
            return Err(WorkerError::ThreadExists { thread: thread.to_string() });
        }
        let input = crate::durable::document(input, "the input state")?;
        let at = now_ms();
        let actor = if owner.is_empty() { process_actor() } else { owner.to_string() };
        let detail = serde_json::json!({ "graph": self.setup.graph.name(), "owner": owner });
        let entry = NewAuditEntry::new(at, actor, "run.submitted", detail);
        store.enqueue_run_audited(NewRun::new(thread, self.setup.graph.name(), Some(input), owner, at), entry)?;
        Ok(())
    }

    /// Queues an existing thread to be resumed by a worker (after a pause, a cancel, a
    /// breakpoint, a failure); blocking. A `run.resume_requested` audit entry, written with the
    /// run, names this process as who asked (see [`App::submit_resume_as`]).
    ///
    /// # Errors
    /// [`WorkerError::UnknownThread`]; [`WorkerError::ValueRequired`] for a thread that waits in
    /// `cx.interrupt` for a value no one has given (a worker cannot give it; record it with
    /// [`ApprovalDesk::answer_interrupt`](crate::approval::ApprovalDesk::answer_interrupt), which
    /// the worker's resume then continues with, or use
    /// [`Runner::resume_with`](crate::Runner::resume_with)); [`QueueError::AlreadyQueued`].
    pub fn submit_resume(&self, thread: &str) -> Result<(), WorkerError> {
        self.submit_resume_as(thread, &process_actor())
    }

    /// [`App::submit_resume`], audited as asked by `actor`.
    pub fn submit_resume_as(&self, thread: &str, actor: &str) -> Result<(), WorkerError> {
        let store = self.queue_store()?;
        let record = store.thread(thread)?.ok_or_else(|| WorkerError::UnknownThread { thread: thread.to_string() })?;
        // Waiting in `cx.interrupt` (also a thread an answer of the wrong shape failed there):
        // only an answer lets a worker continue it.
        match crate::approval::answer::waiting_all(&**store, thread) {
            Ok((seq, asks)) => {
                // Answered from another process: the worker's resume continues with the answers,
                // one for every question of the step.
                let answers = crate::approval::answer::recorded_all(&**store, thread, seq, &asks)?;
                if let Some(open) = asks.into_iter().zip(answers).find(|(_, a)| a.is_none()) {
                    return Err(WorkerError::ValueRequired { thread: thread.to_string(), node: open.0.node });
                }
            }
            Err(crate::approval::answer::AnswerError::Read(e)) => return Err(e.into()),
            Err(_) => {}
        }
        let at = now_ms();
        let detail = serde_json::json!({ "graph": self.setup.graph.name(), "status": record.status.as_str() });
        let entry = NewAuditEntry::new(at, actor, "run.resume_requested", detail);
        // Parked for an answer (recording it could not wake the run, or the thread was continued
        // otherwise and now waits for something else): woken in place of a new queued run.
        if store.wake_run_audited(thread, RunWait::Answer, entry.clone())? {
            return Ok(());
        }
        store.enqueue_run_audited(NewRun::new(thread, self.setup.graph.name(), None, &record.owner, at), entry)?;
        Ok(())
    }

    /// Asks, from any process, that queued or running thread `thread` stop at its next step
    /// boundary and leave the queue; the run ends [`Outcome::Cancelled`]. `false` if the thread
    /// is not queued. Blocking. A `run.cancel_requested` audit entry, written with the request,
    /// names this process as who asked (see [`App::cancel_run_as`]).
    pub fn cancel_run(&self, thread: &str) -> Result<bool, WorkerError> {
        self.cancel_run_as(thread, &process_actor())
    }

    /// [`App::cancel_run`], audited as asked by `actor`.
    pub fn cancel_run_as(&self, thread: &str, actor: &str) -> Result<bool, WorkerError> {
        self.control(thread, RunControl::Cancel, actor, "run.cancel_requested")
    }

    /// Asks, from any process, that queued or running thread `thread` pause at its next step
    /// boundary and leave the queue: the run ends [`Outcome::Paused`], the thread's status
    /// becomes [`ThreadStatus::Paused`](agentflow_store::ThreadStatus::Paused) (nothing is undone,
    /// no timer wakes it) and [`App::submit_resume`] continues it with the step after the last
    /// committed one. A run paused before a worker started it is started and paused before its
    /// first step. `false` if the thread is not queued. Blocking. A `run.pause_requested` audit
    /// entry, written with the request, names this process as who asked (see
    /// [`App::pause_run_as`]).
    ///
    /// # Errors
    /// [`WorkerError::NotRunning`], setting nothing, for a thread that waits (status
    /// `interrupted`: for a person; `sleeping`: for its timer): there is no step to pause it
    /// at, and it continues by itself once decided or due ([`App::cancel_run`] stops it for
    /// good). A run that reaches such a wait before the step boundary where the pause would
    /// stop it ends waiting, not paused.
    pub fn pause_run(&self, thread: &str) -> Result<bool, WorkerError> {
        self.pause_run_as(thread, &process_actor())
    }

    /// [`App::pause_run`], audited as asked by `actor`.
    pub fn pause_run_as(&self, thread: &str, actor: &str) -> Result<bool, WorkerError> {
        let record = self.queue_store()?.thread(thread)?;
        if let Some(record) = record
            && matches!(
                record.status,
                agentflow_store::ThreadStatus::Interrupted | agentflow_store::ThreadStatus::Sleeping
            )
        {
            return Err(WorkerError::NotRunning {
                thread: thread.to_string(),
                status: record.status.as_str().to_string(),
            });
        }
        // The run may have parked since the status was read: the store refuses a pause on a
        // parked run in the write that would set it.
        match self.control(thread, RunControl::Pause, actor, "run.pause_requested") {
            Err(WorkerError::Queue(QueueError::Waiting { thread, wait })) => {
                let status = if wait == RunWait::Timer { "sleeping" } else { "interrupted" };
                Err(WorkerError::NotRunning { thread, status: status.to_string() })
            }
            other => other,
        }
    }

    /// Sets `control` on the queued run of `thread` with its audit entry, in one transaction.
    fn control(&self, thread: &str, control: RunControl, actor: &str, kind: &str) -> Result<bool, WorkerError> {
        let detail = serde_json::json!({ "control": control.as_str() });
        let entry = NewAuditEntry::new(now_ms(), actor, kind, detail);
        Ok(self.queue_store()?.control_run_audited(thread, control, entry)?)
    }

    /// Every queued or running thread of the store, with the worker that claimed it, its last
    /// heartbeat and its lease; blocking.
    pub fn live_runs(&self) -> Result<Vec<QueuedRun>, WorkerError> {
        Ok(self.queue_store()?.list_runs()?)
    }
}
