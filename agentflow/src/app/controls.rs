//! Queued runs, from the App: submitting a run for a [`Worker`], resuming,
//! cancelling or pausing it from any process, and listing the live runs.

use std::sync::Arc;

use agentflow_store::{IDEMPOTENCY_KEY_TTL_MS, IdempotencyKey, QueuedRun, Store};

use crate::access::{Actor, Operation};
use crate::app::App;
use crate::app::RunControls;
use crate::app::WorkerError;
use crate::app::submission::Submission;
use crate::core::state::State;
use crate::durable::now_ms;
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
        self.submit_keyed(thread, input, owner, None, None)
    }

    /// [`App::submit_as`] for a thread of tenant `tenant`: the worker that runs it creates the
    /// thread for that tenant ([`ThreadRecord::tenant`](agentflow_store::ThreadRecord::tenant),
    /// fixed from then on), and the `run.submitted` audit entry names it.
    ///
    /// # Errors
    /// Those of [`App::submit`], and [`WorkerError::Access`] if the app's actor does not act for
    /// `tenant`.
    pub fn submit_for(&self, thread: &str, input: &S, owner: &str, tenant: &str) -> Result<(), WorkerError> {
        self.submit_keyed(thread, input, owner, Some(tenant), None)
    }

    /// [`App::submit_as`], for `tenant` if one is given, under idempotency `key` if one is given:
    /// the key is kept with the run, in the same transaction, and a submit with a key kept
    /// already (the same request sent again, or another request with the same key) is refused
    /// with [`WorkerError::KeyUsed`], naming the thread the first one started, queueing
    /// nothing. The `run.submitted` audit entry records the key. [`App::submit_with`] without
    /// a webhook.
    pub(crate) fn submit_keyed(
        &self,
        thread: &str,
        input: &S,
        owner: &str,
        tenant: Option<&str>,
        key: Option<IdempotencyKey>,
    ) -> Result<(), WorkerError> {
        let mut submission = Submission::new().owner(owner);
        submission.tenant = tenant.map(str::to_string);
        submission.idempotency = key;
        self.submit_with(thread, input, submission)
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
    /// tenants are listed. A queue row that does not decode is left out and logged (it hides
    /// no other run).
    pub fn live_runs(&self) -> Result<Vec<QueuedRun>, WorkerError> {
        let store = self.queue_store()?;
        let access = &self.setup.access;
        access.allow(Operation::List, None)?;
        let listing = store.scan_runs()?;
        for e in &listing.skipped {
            tracing::warn!(error = %e, "a queued run cannot be read; it is left out of the listing");
        }
        let mut runs = listing.items;
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

/// Where the `run.submitted` audit entry keeps the idempotency key a run was submitted under.
pub(super) const IDEMPOTENCY: &str = "idempotency";

/// How the `run.submitted` audit entry records idempotency key `key`.
pub(super) fn key_detail(key: &IdempotencyKey) -> serde_json::Value {
    serde_json::json!({ "scope": key.scope, "key": key.key, "request": key.request })
}

/// [`WorkerError::KeyUsed`] if existing thread `thread` was submitted under `key` (its scope and
/// key) less than [`IDEMPOTENCY_KEY_TTL_MS`] ago, as its `run.submitted` audit entry records.
pub(super) fn kept_key(
    store: &dyn Store,
    thread: &str,
    key: &IdempotencyKey,
) -> Result<Option<WorkerError>, WorkerError> {
    let now = now_ms();
    let submitted = store.list_audit(thread)?.into_iter().find(|e| e.kind == "run.submitted");
    let Some(entry) = submitted.filter(|e| now.saturating_sub(e.at) < IDEMPOTENCY_KEY_TTL_MS) else { return Ok(None) };
    let kept = &entry.detail[IDEMPOTENCY];
    if kept["scope"] != key.scope.as_str() || kept["key"] != key.key.as_str() {
        return Ok(None);
    }
    Ok(Some(WorkerError::KeyUsed {
        key: key.key.clone(),
        thread: thread.to_string(),
        same_request: kept["request"] == key.request.as_str(),
    }))
}

#[cfg(test)]
mod tests {
    use agentflow_store::{IDEMPOTENCY_KEY_TTL_MS, IdempotencyKey, NewAuditEntry, RedbStore, Store};

    use super::{IDEMPOTENCY, WorkerError, kept_key, key_detail};
    use crate::durable::now_ms;

    #[test]
    fn a_thread_submitted_under_a_key_answers_that_key_until_it_expires() {
        let store = RedbStore::in_memory().unwrap();
        let key = IdempotencyKey::new("alice", "k-1", "digest-1");
        let detail = serde_json::json!({ "graph": "g", "owner": "alice", IDEMPOTENCY: key_detail(&key) });
        store.append_audit("t-1", NewAuditEntry::new(now_ms(), "alice", "run.submitted", detail.clone())).unwrap();
        let used = |key: &IdempotencyKey| match kept_key(&store, "t-1", key).unwrap() {
            Some(WorkerError::KeyUsed { key, thread, same_request }) => Some((key, thread, same_request)),
            None => None,
            Some(other) => panic!("{other}"),
        };
        assert_eq!(used(&key), Some(("k-1".into(), "t-1".into(), true)));
        let other_request = IdempotencyKey::new("alice", "k-1", "digest-2");
        assert_eq!(used(&other_request), Some(("k-1".into(), "t-1".into(), false)));
        // Another caller's key, or another key: not this thread's.
        assert_eq!(used(&IdempotencyKey::new("bob", "k-1", "digest-1")), None);
        assert_eq!(used(&IdempotencyKey::new("alice", "k-2", "digest-1")), None);
        // A thread submitted without a key, or under one kept longer than kept: none.
        let old = now_ms() - IDEMPOTENCY_KEY_TTL_MS - 1;
        store.append_audit("t-2", NewAuditEntry::new(old, "alice", "run.submitted", detail)).unwrap();
        assert!(kept_key(&store, "t-2", &key).unwrap().is_none());
        let plain = serde_json::json!({ "graph": "g", "owner": "alice" });
        store.append_audit("t-3", NewAuditEntry::new(now_ms(), "alice", "run.submitted", plain)).unwrap();
        assert!(kept_key(&store, "t-3", &key).unwrap().is_none());
    }
}
