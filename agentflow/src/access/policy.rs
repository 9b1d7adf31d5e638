//! What decides: an [`AccessPolicy`], open ([`AllowAll`]) or by role ([`RoleAccess`]).

use std::collections::{BTreeMap, BTreeSet};

use super::actor::Actor;
use super::operation::Operation;

/// Decides whether an actor may perform an operation on a thread. Tenants are checked before
/// the policy is asked (see [`Access`](super::Access)): a policy sees only threads of the
/// actor's tenants.
pub trait AccessPolicy: Send + Sync + 'static {
    /// `Ok` if `actor` may perform `operation` on thread `thread` (`None`: an operation on no
    /// one thread, as listing), else why not, phrased to be read after "may not ...: ".
    fn permits(&self, actor: &Actor, operation: Operation, thread: Option<&str>) -> Result<(), String>;

    /// Whether the policy allows every operation to every actor, so a check of an actor of
    /// every tenant can be skipped without reading the thread (default `false`).
    fn allows_all(&self) -> bool {
        false
    }
}

/// Every actor may perform every operation on the threads of its tenants: the default of an
/// [`App`](crate::App), where the process that embeds the library is trusted.
#[derive(Debug, Clone, Copy, Default)]
pub struct AllowAll;

impl AccessPolicy for AllowAll {
    fn permits(&self, _actor: &Actor, _operation: Operation, _thread: Option<&str>) -> Result<(), String> {
        Ok(())
    }

    fn allows_all(&self) -> bool {
        true
    }
}

/// A role for each operation: an actor may perform an operation when it holds one of the roles
/// the operation is given. An operation given no role is denied to everyone.
///
/// ```
/// use agentflow::access::{AccessPolicy, Actor, Operation, RoleAccess};
///
/// let policy = RoleAccess::new()
///     .allow(Operation::ReadState, "viewer")
///     .allow(Operation::ReadState, "operator")
///     .allow(Operation::Fork, "operator");
/// let viewer = Actor::new("vic", ["viewer"]);
/// assert!(policy.permits(&viewer, Operation::ReadState, Some("t-1")).is_ok());
/// let why = policy.permits(&viewer, Operation::Fork, Some("t-1")).unwrap_err();
/// assert_eq!(why, "only the `operator` role may (give `vic` that role, or ask someone who has it)");
///
/// // The same policy as a JSON file: operation name -> roles.
/// let same = RoleAccess::from_json(r#"{"read_state": ["viewer", "operator"], "fork": ["operator"]}"#)?;
/// assert!(same.permits(&viewer, Operation::Fork, None).is_err());
/// # Ok::<(), agentflow::access::RoleAccessError>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RoleAccess {
    roles: BTreeMap<Operation, BTreeSet<String>>,
}

/// A role-access file that cannot be read as one.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RoleAccessError {
    /// Not a JSON object of operation names to lists of roles.
    #[error(
        "not a role-access policy ({0}); expected a JSON object of operation names to lists of roles, as \
         {{\"read_state\": [\"viewer\"], \"fork\": [\"operator\"]}}"
    )]
    NotAPolicy(String),
    /// A key that names no operation.
    #[error("{0}")]
    UnknownOperation(String),
}

impl RoleAccess {
    /// No operation is allowed yet.
    pub fn new() -> Self {
        RoleAccess::default()
    }

    /// Holders of `role` may perform `operation` (in addition to the roles given it already).
    #[must_use]
    pub fn allow(mut self, operation: Operation, role: impl Into<String>) -> Self {
        self.roles.entry(operation).or_default().insert(role.into());
        self
    }

    /// The roles that may perform `operation`, sorted.
    pub fn roles_for(&self, operation: Operation) -> Vec<&str> {
        self.roles.get(&operation).map(|r| r.iter().map(String::as_str).collect()).unwrap_or_default()
    }

    /// Reads a policy written as JSON: `{"operation": ["role", ...], ...}`, operations by their
    /// [`Operation::as_str`] names. An unknown operation name is refused, naming the known ones.
    pub fn from_json(text: &str) -> Result<Self, RoleAccessError> {
        let map: BTreeMap<String, Vec<String>> =
            serde_json::from_str(text).map_err(|e| RoleAccessError::NotAPolicy(e.to_string()))?;
        let mut policy = RoleAccess::new();
        for (name, roles) in map {
            let operation: Operation = name.parse().map_err(RoleAccessError::UnknownOperation)?;
            // An operation named with no roles stays denied: it is listed, so it is known.
            policy.roles.entry(operation).or_default();
            for role in roles {
                policy = policy.allow(operation, role);
            }
        }
        Ok(policy)
    }
}

impl AccessPolicy for RoleAccess {
    fn permits(&self, actor: &Actor, operation: Operation, _thread: Option<&str>) -> Result<(), String> {
        let roles = self.roles_for(operation);
        if roles.iter().any(|r| actor.has_role(r)) {
            return Ok(());
        }
        let who = &actor.id;
        Err(match roles.as_slice() {
            [] => format!("the access policy gives `{operation}` to no role (add a role for it to the policy)"),
            [one] => format!("only the `{one}` role may (give `{who}` that role, or ask someone who has it)"),
            many => {
                let names: Vec<String> = many.iter().map(|r| format!("`{r}`")).collect();
                format!(
                    "only the roles {} may (give `{who}` one of them, or ask someone who has one)",
                    names.join(", ")
                )
            }
        })
    }
}
