//! Who asks: an [`Actor`], with its roles and the tenants it acts for.

use std::collections::BTreeSet;

/// The tenants an [`Actor`] acts for.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Tenants {
    /// Every thread, of any tenant or of none (the default: embedded use, trusted workers).
    All,
    /// Only the threads of these tenants; threads of no tenant are not among them.
    Only(BTreeSet<String>),
}

/// Who performs an operation: a stable id (recorded in audit entries), the roles an
/// [`AccessPolicy`](super::AccessPolicy) checks, and the tenants it acts for.
///
/// ```
/// use agentflow::access::{Actor, Tenants};
///
/// let alice = Actor::new("alice", ["operator"]).for_tenants(["acme"]);
/// assert!(alice.acts_for(Some("acme")));
/// assert!(!alice.acts_for(Some("globex")));
/// assert!(!alice.acts_for(None));
/// // A name alone has no roles and acts for every tenant.
/// let bob = Actor::from("bob");
/// assert!(bob.roles.is_empty() && bob.tenants == Tenants::All);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Actor {
    /// A stable identity, recorded with what the actor does.
    pub id: String,
    /// What the identity may do, as the policy reads it.
    pub roles: Vec<String>,
    /// The tenants whose threads the actor sees and acts on.
    pub tenants: Tenants,
}

impl Actor {
    /// An actor with these roles, acting for every tenant (see [`Actor::for_tenants`]).
    pub fn new(id: impl Into<String>, roles: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Actor { id: id.into(), roles: roles.into_iter().map(Into::into).collect(), tenants: Tenants::All }
    }

    /// This process, with no roles and every tenant: the default actor of an
    /// [`App`](crate::App), named as the process is in audit entries (`pid@host`).
    pub fn process() -> Self {
        Actor::new(crate::core::process::process_actor(), Vec::<String>::new())
    }

    /// The same actor acting only for `tenants` (none: it sees no tenant's threads).
    #[must_use]
    pub fn for_tenants(mut self, tenants: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.tenants = Tenants::Only(tenants.into_iter().map(Into::into).collect());
        self
    }

    /// Whether the actor acts for a thread of `tenant` (`None`: a thread of no tenant).
    pub fn acts_for(&self, tenant: Option<&str>) -> bool {
        match (&self.tenants, tenant) {
            (Tenants::All, _) => true,
            (Tenants::Only(set), Some(t)) => set.contains(t),
            (Tenants::Only(_), None) => false,
        }
    }

    /// The same actor acting only for the tenants it shares with `outer`: an actor named in a
    /// call to an app that acts for some tenants acts for no others.
    #[must_use]
    pub fn within(mut self, outer: &Tenants) -> Self {
        self.tenants = match (self.tenants, outer) {
            (mine, Tenants::All) => mine,
            (Tenants::All, Tenants::Only(theirs)) => Tenants::Only(theirs.clone()),
            (Tenants::Only(mine), Tenants::Only(theirs)) => Tenants::Only(mine.intersection(theirs).cloned().collect()),
        };
        self
    }

    /// Whether the actor holds `role`.
    pub fn has_role(&self, role: &str) -> bool {
        self.roles.iter().any(|r| r == role)
    }
}

impl From<&str> for Actor {
    /// An actor named `id`, with no roles, acting for every tenant.
    fn from(id: &str) -> Self {
        Actor::new(id, Vec::<String>::new())
    }
}

impl From<String> for Actor {
    /// An actor named `id`, with no roles, acting for every tenant.
    fn from(id: String) -> Self {
        Actor::new(id, Vec::<String>::new())
    }
}

impl From<&String> for Actor {
    /// An actor named `id`, with no roles, acting for every tenant.
    fn from(id: &String) -> Self {
        Actor::from(id.as_str())
    }
}

impl From<&Actor> for Actor {
    fn from(actor: &Actor) -> Self {
        actor.clone()
    }
}
