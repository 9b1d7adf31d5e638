//! Who runs a command and what they may do: the global `--as`, `--role`, `--tenant` and
//! `--access` flags, read into one [`Guard`] (the library's [`Access`]) that every command is
//! checked through.
//!
//! Without `--access` every operation is allowed (as before these flags); `--tenant` still
//! narrows what the command sees. With `--access FILE` (a role-access policy: operation
//! names to lists of roles) every command needs `--as`, and each operation needs a role the
//! file gives it. A thread of a tenant the actor does not act for reads exactly like a
//! missing one.

use std::path::PathBuf;
use std::sync::Arc;

use agentflow::Store;
use agentflow::access::{Access, AccessError, AccessPolicy, Actor, AllowAll, Operation, RoleAccess};
use agentflow::server::inspect::InspectError;
use agentflow_store::ThreadRecord;
use clap::Args;

use crate::Failure;

/// The global flags naming who acts and under which policy.
#[derive(Args, Debug, Default)]
pub struct AccessArgs {
    /// Who runs the command (recorded in the audit log by the commands that change a thread).
    #[arg(long = "as", env = "AGENTFLOW_AS", global = true, value_name = "USER")]
    pub user: Option<String>,
    /// A role the user holds (repeatable): checked by --access and by the approval authorizer.
    #[arg(long = "role", global = true, value_name = "ROLE")]
    pub roles: Vec<String>,
    /// A tenant the user acts for (repeatable); threads of other tenants read as missing.
    /// None: every tenant.
    #[arg(long = "tenant", global = true, value_name = "TENANT")]
    pub tenants: Vec<String>,
    /// A role-access policy (JSON: `{"fork": ["operator"], ...}`); each operation needs a
    /// role it names. Without it every operation is allowed.
    #[arg(long = "access", env = "AGENTFLOW_ACCESS", global = true, value_name = "FILE")]
    pub access: Option<PathBuf>,
}

/// The checks of one command: the policy, the actor, and whether the actor was named.
#[derive(Clone)]
pub struct Guard {
    access: Access,
    named: bool,
}

/// The policy `--access FILE` names (`AllowAll` without it).
pub fn policy(file: Option<&PathBuf>) -> Result<Arc<dyn AccessPolicy>, Failure> {
    let Some(path) = file else { return Ok(Arc::new(AllowAll)) };
    let shown = path.display();
    let text = std::fs::read_to_string(path)
        .map_err(|e| Failure::usage(format!("--access {shown}: cannot read the access file: {e}")))?;
    let policy = RoleAccess::from_json(&text).map_err(|e| Failure::usage(format!("--access {shown}: {e}")))?;
    Ok(Arc::new(policy))
}

impl Guard {
    /// The guard the flags describe. With `--access`, `--as` is required: the policy checks
    /// the real actor, and a command run without one would be checked for no one.
    pub fn new(args: &AccessArgs) -> Result<Guard, Failure> {
        let policy = policy(args.access.as_ref())?;
        let user = args.user.as_deref().map(str::trim).filter(|u| !u.is_empty());
        if args.access.is_some() && user.is_none() {
            return Err(Failure::usage(
                "--access needs --as USER (or AGENTFLOW_AS): the policy checks the real person or service that runs \
                 the command, by the roles given with --role",
            ));
        }
        let id = match user {
            Some(u) => u.to_string(),
            None => Actor::process().id,
        };
        let mut actor = Actor::new(id, args.roles.iter().cloned());
        if !args.tenants.is_empty() {
            actor = actor.for_tenants(args.tenants.iter().cloned());
        }
        Ok(Guard { access: Access::shared(policy, actor), named: user.is_some() })
    }

    /// The access every check goes through.
    pub fn access(&self) -> &Access {
        &self.access
    }

    /// The actor.
    pub fn actor(&self) -> &Actor {
        self.access.actor()
    }

    /// The policy.
    pub fn policy(&self) -> Arc<dyn AccessPolicy> {
        Arc::clone(self.access.policy())
    }

    /// The actor of a command that records who acted: `--as` is required (usage error).
    pub fn named(&self, command: &str) -> Result<&Actor, Failure> {
        if self.named {
            Ok(self.actor())
        } else {
            Err(Failure::usage(format!(
                "{command} needs --as USER (or AGENTFLOW_AS): who acts is recorded in the audit log"
            )))
        }
    }

    /// Thread `id` if the actor may perform `operation` on it; a thread of another tenant is
    /// not found, as a missing one.
    pub fn thread(&self, store: &dyn Store, operation: Operation, id: &str) -> Result<ThreadRecord, Failure> {
        let record: Result<Option<ThreadRecord>, Refusal> = self.access.lookup(store, operation, id);
        match record {
            Ok(Some(t)) => Ok(t),
            Ok(None) => Err(missing(id)),
            Err(Refusal::Read(e)) => Err(Failure::store(e)),
            Err(Refusal::Denied(e)) => Err(denied(e)),
        }
    }

    /// `Ok` if the actor may list threads; the rows are then filtered with [`Guard::sees`].
    pub fn list(&self) -> Result<(), Failure> {
        self.access.allow(Operation::List, None).map_err(denied)
    }

    /// Whether the actor acts for the thread's tenant.
    pub fn sees(&self, thread: &ThreadRecord) -> bool {
        self.access.sees(thread)
    }

    /// Whether thread `id` is there for the actor (unreadable or missing: not).
    pub fn sees_id(&self, store: &dyn Store, id: &str) -> bool {
        self.access.is_open() || store.thread(id).ok().flatten().is_some_and(|t| self.sees(&t))
    }
}

/// Why a lookup failed: the store, or the policy.
enum Refusal {
    Read(agentflow_store::ReadError),
    Denied(AccessError),
}

impl From<agentflow_store::ReadError> for Refusal {
    fn from(e: agentflow_store::ReadError) -> Self {
        Refusal::Read(e)
    }
}

impl From<AccessError> for Refusal {
    fn from(e: AccessError) -> Self {
        Refusal::Denied(e)
    }
}

/// The message of a thread that is not there (or not there for the actor).
pub fn missing(id: &str) -> Failure {
    InspectError::missing_thread(id).into()
}

/// A refused operation: exit code 1 with the policy's message (a thread of another tenant is
/// said as a missing one).
pub fn denied(e: AccessError) -> Failure {
    match e {
        AccessError::NotVisible { thread, .. } => missing(&thread),
        other => Failure::not_found(other.to_string()),
    }
}
