//! The check every operation goes through: [`Access`], a policy and the actor who asks.

use std::fmt;
use std::sync::Arc;

use agentflow_store::{ReadError, Store, ThreadRecord};

use super::actor::Actor;
use super::operation::Operation;
use super::policy::{AccessPolicy, AllowAll};

/// Why an operation was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AccessError {
    /// The policy does not let the actor perform the operation.
    #[error("`{actor}` may not {what}: {reason}", what = operation.describe())]
    Denied {
        /// Who asked.
        actor: String,
        /// What was asked.
        operation: Operation,
        /// The thread, if the operation was on one.
        thread: Option<String>,
        /// The policy's reason.
        reason: String,
    },
    /// The thread belongs to a tenant the actor does not act for. Said as a thread that is not
    /// there: whether it exists is not revealed.
    #[error("no thread `{thread}` that `{actor}` may see")]
    NotVisible {
        /// Who asked.
        actor: String,
        /// The thread asked for.
        thread: String,
    },
}

/// An [`AccessPolicy`] and the [`Actor`] it checks: what every operation on stored threads is
/// checked through, by the [`App`](crate::App), the approval desk, the CLI and the inbox.
///
/// ```
/// use agentflow::access::{Access, AccessError, Actor, Operation, RoleAccess};
/// use agentflow::persist::ThreadRecord;
///
/// let policy = RoleAccess::new().allow(Operation::ReadState, "viewer");
/// let vic = Access::new(policy, Actor::new("vic", ["viewer"]).for_tenants(["acme"]));
/// let ours = ThreadRecord::new("t-1", "agent", "fp", 1, 0).with_tenant("acme");
/// let theirs = ThreadRecord::new("t-2", "agent", "fp", 1, 0).with_tenant("globex");
/// assert!(vic.check(Operation::ReadState, &ours).is_ok());
/// assert!(matches!(vic.check(Operation::Fork, &ours), Err(AccessError::Denied { .. })));
/// assert!(matches!(vic.check(Operation::ReadState, &theirs), Err(AccessError::NotVisible { .. })));
/// assert!(!vic.sees(&theirs));
/// ```
#[derive(Clone)]
pub struct Access(
    // One pointer: every run's handle holds a copy of its app's access.
    Arc<Pair>,
);

/// The policy and the actor it checks.
struct Pair {
    policy: Arc<dyn AccessPolicy>,
    actor: Actor,
}

impl fmt::Debug for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Access").field("actor", &self.0.actor).finish_non_exhaustive()
    }
}

impl Default for Access {
    /// [`AllowAll`] for [`Actor::process`].
    fn default() -> Self {
        // One for the process, shared: an app is made for every plain in-memory run.
        static PROCESS: std::sync::OnceLock<Access> = std::sync::OnceLock::new();
        PROCESS.get_or_init(|| Access::new(AllowAll, Actor::process())).clone()
    }
}

impl Access {
    /// `actor`, checked by `policy`.
    pub fn new(policy: impl AccessPolicy, actor: Actor) -> Self {
        Access::shared(Arc::new(policy), actor)
    }

    /// `actor`, checked by a shared `policy`.
    pub fn shared(policy: Arc<dyn AccessPolicy>, actor: Actor) -> Self {
        Access(Arc::new(Pair { policy, actor }))
    }

    /// The same policy checking another actor.
    #[must_use]
    pub fn as_actor(&self, actor: impl Into<Actor>) -> Self {
        Access::shared(Arc::clone(&self.0.policy), actor.into())
    }

    /// The same policy checking `actor` on this access's behalf: acting only for the tenants
    /// both act for (see [`Actor::within`]). What an app checks for an actor a call names.
    #[must_use]
    pub fn on_behalf_of(&self, actor: impl Into<Actor>) -> Self {
        self.as_actor(actor.into().within(&self.0.actor.tenants))
    }

    /// The actor checked.
    pub fn actor(&self) -> &Actor {
        &self.0.actor
    }

    /// The policy.
    pub fn policy(&self) -> &Arc<dyn AccessPolicy> {
        &self.0.policy
    }

    /// Whether every check passes without looking at the thread: an open policy
    /// ([`AccessPolicy::allows_all`]) and an actor of every tenant.
    pub fn is_open(&self) -> bool {
        self.0.policy.allows_all() && self.0.actor.tenants == super::actor::Tenants::All
    }

    /// Whether the actor acts for the thread's tenant: a listing shows it, an operation may
    /// name it.
    pub fn sees(&self, thread: &ThreadRecord) -> bool {
        self.0.actor.acts_for(thread.tenant.as_deref())
    }

    /// `Ok` if the actor may perform `operation` on `thread`: the actor acts for its tenant
    /// ([`AccessError::NotVisible`] if not), and the policy allows it ([`AccessError::Denied`]).
    pub fn check(&self, operation: Operation, thread: &ThreadRecord) -> Result<(), AccessError> {
        if !self.sees(thread) {
            return Err(AccessError::NotVisible { actor: self.0.actor.id.clone(), thread: thread.id.clone() });
        }
        self.allow(operation, Some(&thread.id))
    }

    /// Thread `thread`'s record if the actor may perform `operation` on it: `None` when it is
    /// not there for the actor (missing, or of a tenant it does not act for: the two are not
    /// told apart), the policy's refusal as an error. The one lookup every surface makes.
    pub fn lookup<E: From<ReadError> + From<AccessError>>(
        &self,
        store: &dyn Store,
        operation: Operation,
        thread: &str,
    ) -> Result<Option<ThreadRecord>, E> {
        match store.thread(thread)? {
            Some(record) if self.sees(&record) => {
                self.check(operation, &record)?;
                Ok(Some(record))
            }
            _ => Ok(None),
        }
    }

    /// [`Access::lookup`] for a caller that needs no record: `true` without reading anything
    /// when every check passes anyway ([`Access::is_open`]).
    pub fn reaches<E: From<ReadError> + From<AccessError>>(
        &self,
        store: &dyn Store,
        operation: Operation,
        thread: &str,
    ) -> Result<bool, E> {
        Ok(self.is_open() || self.lookup::<E>(store, operation, thread)?.is_some())
    }

    /// `Ok` if the actor may start thread `thread` of `tenant` (`None`: no tenant).
    pub fn check_start(&self, thread: &str, tenant: Option<&str>) -> Result<(), AccessError> {
        if !self.0.actor.acts_for(tenant) {
            return Err(AccessError::Denied {
                actor: self.0.actor.id.clone(),
                operation: Operation::Start,
                thread: Some(thread.to_string()),
                reason: match tenant {
                    Some(t) => format!("it does not act for tenant `{t}`"),
                    None => "it acts for named tenants only, and the thread would have none".to_string(),
                },
            });
        }
        self.allow(Operation::Start, Some(thread))
    }

    /// `Ok` if the policy lets the actor perform `operation`, tenants aside (a listing, whose
    /// rows are then filtered with [`Access::sees`]).
    pub fn allow(&self, operation: Operation, thread: Option<&str>) -> Result<(), AccessError> {
        self.0.policy.permits(&self.0.actor, operation, thread).map_err(|reason| AccessError::Denied {
            actor: self.0.actor.id.clone(),
            operation,
            thread: thread.map(str::to_string),
            reason,
        })
    }
}
