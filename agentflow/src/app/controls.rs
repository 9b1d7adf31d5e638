//! Queued runs, from the App: submitting a run for a [`Worker`], resuming,
//! cancelling or pausing it from any process, and listing the live runs.

use std::sync::Arc;

use agentflow_store::{NewAuditEntry, NewRun, QueuedRun, Store};

use crate::access::{Actor, Operation};
use crate::app::App;
use crate::app::RunControls;
use crate::app::WorkerError;
use crate::core::state::State;
use crate::durable::now_ms;
use crate::durable::process_actor;
#[cfg(doc)]
use crate::outcome::Outcome;
#[cfg(doc)]
use crate::worker::Worker;
#[cfg(doc)]
use agentflow_store::QueueError;

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
        self.submit_queued(thread, input, owner, None)
    }

    /// [`App::submit_as`] for a thread of tenant `tenant`: the worker that runs it creates the
    /// thread for that tenant ([`ThreadRecord::tenant`](agentflow_store::ThreadRecord::tenant),
    /// fixed from then on), and the `run.submitted` audit entry names it.
    ///
    /// # Errors
    /// Those of [`App::submit`], and [`WorkerError::Access`] if the app's actor does not act for
    /// `tenant`.
    pub fn submit_for(&self, thread: &str, input: &S, owner: &str, tenant: &str) -> Result<(), WorkerError> {
        self.submit_queued(thread, input, owner, Some(tenant))
    }

    /// [`App::submit_as`], for `tenant` if one is given.
    fn submit_queued(&self, thread: &str, input: &S, owner: &str, tenant: Option<&str>) -> Result<(), WorkerError> {
        for (what, value) in [("thread id", thread), ("owner", owner), ("tenant", tenant.unwrap_or_default())] {
            if value.contains('\0') {
                return Err(WorkerError::NulByte { what, value: value.to_string() });
            }
        }
        let store = self.queue_store()?;
        self.setup.access.check_start(thread, tenant)?;
        self.setup.check_owner(owner)?;
        if store.thread(thread)?.is_some() {
            return Err(WorkerError::ThreadExists { thread: thread.to_string() });
        }
        crate::durable::check_sealed::<S>(store.as_ref())?;
        let input = crate::durable::state_document(input, "the input state", crate::durable::Allowed::of::<S>())?;
        let at = now_ms();
        let actor = if owner.is_empty() { process_actor() } else { owner.to_string() };
        let mut detail = serde_json::json!({ "graph": self.setup.graph.name(), "owner": owner });
        let mut run = NewRun::new(thread, self.setup.graph.name(), Some(input), owner, at);
        if let Some(tenant) = tenant {
            detail["tenant"] = tenant.into();
            run = run.with_tenant(tenant);
        }
        let entry = NewAuditEntry::new(at, actor, "run.submitted", detail);
        store.enqueue_run_audited(run, entry)?;
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
        self.submit_resume_as(thread, self.actor())
    }

    /// [`App::submit_resume`], checked for and audited as asked by `actor`
    /// ([`Operation::Resume`]).
    pub fn submit_resume_as(&self, thread: &str, actor: impl Into<Actor>) -> Result<(), WorkerError> {
        self.controls_for(actor)?.submit_resume(thread, Some(self.setup.graph.name()))
    }

    /// Asks, from any process, that queued or running thread `thread` stop at its next step
    /// boundary and leave the queue; the run ends [`Outcome::Cancelled`]. `false` if the thread
    /// is not queued. Blocking. A `run.cancel_requested` audit entry, written with the request,
    /// names this process as who asked (see [`App::cancel_run_as`]).
    pub fn cancel_run(&self, thread: &str) -> Result<bool, WorkerError> {
        self.cancel_run_as(thread, self.actor())
    }

    /// [`App::cancel_run`], checked for and audited as asked by `actor` ([`Operation::Cancel`]).
    pub fn cancel_run_as(&self, thread: &str, actor: impl Into<Actor>) -> Result<bool, WorkerError> {
        self.controls_for(actor)?.cancel_run(thread)
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
        self.pause_run_as(thread, self.actor())
    }

    /// [`App::pause_run`], checked for and audited as asked by `actor` ([`Operation::Pause`]).
    pub fn pause_run_as(&self, thread: &str, actor: impl Into<Actor>) -> Result<bool, WorkerError> {
        self.controls_for(actor)?.pause_run(thread)
    }

    /// The run controls of this app's store for `actor`, checked by the app's policy.
    pub fn run_controls(&self, actor: impl Into<Actor>) -> Result<RunControls, WorkerError> {
        self.controls_for(actor)
    }

    fn controls_for(&self, actor: impl Into<Actor>) -> Result<RunControls, WorkerError> {
        Ok(RunControls::new(Arc::clone(self.queue_store()?), self.access_of(actor)))
    }

    /// Every queued or running thread of the store, with the worker that claimed it, its last
    /// heartbeat and its lease; blocking.
    ///
    /// Checked for the app's actor ([`Operation::List`]); only the runs of threads of its
    /// tenants are listed.
    pub fn live_runs(&self) -> Result<Vec<QueuedRun>, WorkerError> {
        let store = self.queue_store()?;
        let access = &self.setup.access;
        access.allow(Operation::List, None)?;
        let mut runs = store.list_runs()?;
        if !access.is_open() {
            let mut kept = Vec::with_capacity(runs.len());
            for run in runs {
                // A run submitted for a new thread no worker has started has no record yet: its
                // queue row says its tenant.
                let tenant = match store.thread(&run.thread)? {
                    Some(t) => t.tenant,
                    None => run.tenant.clone(),
                };
                if access.actor().acts_for(tenant.as_deref()) {
                    kept.push(run);
                }
            }
            runs = kept;
        }
        Ok(runs)
    }
}
