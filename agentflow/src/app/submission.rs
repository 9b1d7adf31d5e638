//! The options of a new thread's run submitted with all of them at once ([`Submission`]): who
//! it belongs to, its tenant, its idempotency key and its completion webhook.

use agentflow_store::IdempotencyKey;

#[cfg(doc)]
use crate::app::{App, WorkerError};

/// The options of a new thread's run ([`App::submit_with`]).
///
/// ```
/// use agentflow::Submission;
/// let submission = Submission::new()
///     .owner("agent:support")
///     .tenant("acme")
///     .webhook("https://hooks.example.com/agentflow/done");
/// assert_eq!(submission.tenant.as_deref(), Some("acme"));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Submission {
    /// Who the thread belongs to (empty: no one in particular; the audit entry then names this
    /// process).
    pub owner: String,
    /// The tenant the thread is created for.
    pub tenant: Option<String>,
    /// A URL told when the run first stops (ends, or waits for a person or its timer); see
    /// [`webhook`](crate::webhook). The caller checks it (the server refuses URLs its operator
    /// did not allow).
    pub webhook: Option<String>,
    /// The start's idempotency key: a submit under a key kept already is refused with
    /// [`WorkerError::KeyUsed`], naming the thread the first one started.
    pub idempotency: Option<IdempotencyKey>,
}

impl Submission {
    /// No owner, no tenant, no webhook, no key.
    pub fn new() -> Self {
        Submission::default()
    }

    /// The same, for a thread owned by `owner`.
    #[must_use]
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = owner.into();
        self
    }

    /// The same, for a thread of `tenant`.
    #[must_use]
    pub fn tenant(mut self, tenant: impl Into<String>) -> Self {
        self.tenant = Some(tenant.into());
        self
    }

    /// The same, telling `url` when the run first stops.
    #[must_use]
    pub fn webhook(mut self, url: impl Into<String>) -> Self {
        self.webhook = Some(url.into());
        self
    }

    /// The same, under idempotency key `key`.
    #[must_use]
    pub fn idempotency(mut self, key: IdempotencyKey) -> Self {
        self.idempotency = Some(key);
        self
    }
}
