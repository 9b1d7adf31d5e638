//! [`App::submit_with`]: a new thread's run submitted with every option of a [`Submission`].

use agentflow_store::{NewAuditEntry, NewRun, QueueError};

use crate::app::App;
use crate::app::WorkerError;
use crate::app::controls::{IDEMPOTENCY, kept_key, key_detail};
use crate::app::submission::Submission;
use crate::core::state::State;
use crate::durable::{now_ms, process_actor};
use crate::secret::mask_url;
#[cfg(doc)]
use crate::worker::Worker;

impl<S: State, D> App<S, D> {
    /// [`App::submit`] with every option of [`Submission`]: a new run of thread `thread` from
    /// `input` for a [`Worker`] to claim, for the submission's owner and tenant, under its
    /// idempotency key, telling its webhook when the run first stops. Blocking.
    ///
    /// # Errors
    /// Those of [`App::submit_for`], and [`WorkerError::KeyUsed`] for a key kept already.
    pub fn submit_with(&self, thread: &str, input: &S, submission: Submission) -> Result<(), WorkerError> {
        let Submission { owner, tenant, webhook, idempotency } = submission;
        for (what, value) in
            [("thread id", thread), ("owner", &owner), ("tenant", tenant.as_deref().unwrap_or_default())]
        {
            if value.contains('\0') {
                return Err(WorkerError::NulByte { what, value: value.to_string() });
            }
        }
        if crate::schedule::is_reserved_thread_id(thread) {
            return Err(WorkerError::ReservedThreadId { thread: thread.to_string() });
        }
        let store = self.setup.store.as_ref().ok_or(WorkerError::NoStore)?;
        self.setup.access.check_start(thread, tenant.as_deref())?;
        self.setup.check_owner(&owner)?;
        if store.thread(thread)?.is_some() {
            // The same thread asked for again under the key that started it: a retry.
            if let Some(key) = &idempotency
                && let Some(used) = kept_key(store.as_ref(), thread, key)?
            {
                return Err(used);
            }
            return Err(WorkerError::ThreadExists { thread: thread.to_string() });
        }
        crate::durable::check_sealed::<S>(store.as_ref())?;
        let input = crate::durable::state_document(input, "the input state", crate::durable::Allowed::of::<S>())?;
        let at = now_ms();
        let actor = if owner.is_empty() { process_actor() } else { owner.clone() };
        let graph = self.setup.graph.name();
        let mut detail = serde_json::json!({ "graph": graph, "owner": owner });
        let mut run = NewRun::new(thread, graph, Some(input), &owner, at);
        if let Some(url) = webhook {
            // Named masked: the URL may carry a token.
            detail["webhook"] = mask_url(&url).into();
            run = run.with_webhook(url);
        }
        if let Some(tenant) = tenant {
            detail["tenant"] = tenant.as_str().into();
            run = run.with_tenant(tenant);
        }
        if let Some(key) = idempotency {
            // Recorded so a retry of this one is told apart (`kept_key`).
            detail[IDEMPOTENCY] = key_detail(&key);
            run = run.with_idempotency(key);
        }
        let entry = NewAuditEntry::new(at, actor, "run.submitted", detail);
        store.enqueue_run_audited(run, entry).map_err(|e| match e {
            QueueError::KeyUsed { key, thread, same_request } => WorkerError::KeyUsed { key, thread, same_request },
            e => WorkerError::Queue(e),
        })
    }
}
