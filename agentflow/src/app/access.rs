//! Who the App acts for: its access policy, its actor, and the check each of its operations
//! on a stored thread goes through (see [`crate::access`]).

use agentflow_store::ThreadRecord;

use crate::access::{Access, AccessPolicy, Actor, Operation};
use crate::app::App;
use crate::core::state::State;
use crate::durable::{HistoryError, PersistError};

impl<S: State, D> App<S, D> {
    /// Checks every operation of this app against `policy` (default
    /// [`AllowAll`](crate::access::AllowAll)): reads, updates, forks, controls, approvals,
    /// starting and resuming threads. The actor checked is the one a call names (`fork`,
    /// `update_state`, `raise_limits`, the `_as` controls) or else the app's
    /// ([`App::acting_as`]).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use agentflow::access::{Actor, Operation, RoleAccess};
    /// use agentflow::RedbStore;
    /// use agentflow::persist::HistoryError;
    /// # use agentflow::prelude::*;
    /// # use serde::{Deserialize, Serialize};
    /// # #[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
    /// # struct Count { #[reduce(add)] n: u32 }
    /// # #[graph(state = Count, start = bump)]
    /// # mod counter {
    /// #     use super::*;
    /// #     #[node(goto = [END])]
    /// #     async fn bump(_c: &Count) -> Step<Count> { goto!(END, Count::update().n(1)) }
    /// # }
    /// # fn main() -> Result<(), agentflow::Error> {
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let policy = RoleAccess::new()
    ///     .allow(Operation::Start, "agent")
    ///     .allow(Operation::ReadState, "viewer")
    ///     .allow(Operation::UpdateState, "operator");
    /// let app = counter::graph().app().store(Arc::new(RedbStore::in_memory()?)).access(policy);
    ///
    /// let agent = app.acting_as(Actor::new("agent-1", ["agent"]).for_tenants(["acme"]));
    /// agent.runner(&()).thread("t-1").tenant("acme").run(Count::default()).await?;
    ///
    /// // A viewer of acme reads it; a viewer of another tenant does not see it at all.
    /// let vic = app.acting_as(Actor::new("vic", ["viewer"]).for_tenants(["acme"]));
    /// assert_eq!(vic.state("t-1")?.unwrap().state.n, 1);
    /// let eve = app.acting_as(Actor::new("eve", ["viewer"]).for_tenants(["globex"]));
    /// assert!(eve.state("t-1")?.is_none());
    ///
    /// // The viewer may not edit it; an operator may.
    /// let denied = vic.update_state("t-1", Count::update().n(5), &vic.actor().clone());
    /// assert!(matches!(denied, Err(HistoryError::Access(_))));
    /// app.update_state("t-1", Count::update().n(5), Actor::new("olga", ["operator"]))?;
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    #[must_use]
    pub fn access(mut self, policy: impl AccessPolicy) -> Self {
        let actor = self.setup.access.actor().clone();
        self.setup.access = Access::new(policy, actor);
        self
    }

    /// This app acting as `actor`: its reads, controls, runs and approvals are checked for
    /// `actor` and see only the threads of its tenants (among those this app's actor acts for:
    /// an app acting for some tenants never acts for others). Cheap (a clone of the handle).
    /// The default actor is [`Actor::process`]: this process, of every tenant.
    #[must_use]
    pub fn acting_as(&self, actor: impl Into<Actor>) -> Self {
        let mut app = self.clone();
        app.setup.access = self.setup.access.on_behalf_of(actor);
        app
    }

    /// The actor this app's operations are checked for when a call names none.
    pub fn actor(&self) -> &Actor {
        self.setup.access.actor()
    }

    /// Every thread of the store that the app's actor may see, after a check that it may list
    /// threads ([`Operation::List`]).
    pub fn list_threads(&self) -> Result<Vec<ThreadRecord>, HistoryError> {
        let store = self.setup.store.as_ref().ok_or(HistoryError::NoStore)?;
        let access = &self.setup.access;
        access.allow(Operation::List, None)?;
        let mut threads = store.list_threads().map_err(PersistError::from)?;
        threads.retain(|t| access.sees(t));
        Ok(threads)
    }

    /// [`Access::lookup`] for the app's actor, skipped (reading nothing) when every check
    /// passes anyway; `Err(UnknownThread)` when the thread is not there for the actor.
    pub(crate) fn check(&self, operation: Operation, thread: &str) -> Result<(), HistoryError> {
        self.check_for(&self.setup.access, operation, thread)
    }

    /// [`App::check`] for another access.
    pub(crate) fn check_for(&self, access: &Access, operation: Operation, thread: &str) -> Result<(), HistoryError> {
        let store = self.setup.store.as_ref().ok_or(HistoryError::NoStore)?;
        if access.reaches::<HistoryError>(&**store, operation, thread)? {
            Ok(())
        } else {
            Err(HistoryError::UnknownThread { thread: thread.to_string() })
        }
    }

    /// The access of a call that names its actor: that actor, acting only for tenants the
    /// app's actor acts for too.
    pub(crate) fn access_of(&self, actor: impl Into<Actor>) -> Access {
        self.setup.access.on_behalf_of(actor)
    }
}
