//! What every run of a graph uses: the plan, the store, the state migrations and the tool
//! gateway (the parts an [`App`](crate::App) is made of and hands each run it starts).

use std::collections::BTreeMap;
use std::sync::Arc;

use agentflow_store::Store;

use crate::core::state::State;
use crate::ctx::Gateway;
use crate::durable::ResumeError;
use crate::graph::CompiledGraph;
use crate::tool::OwnerRequired;

/// Upgrades a stored state (as JSON) from one schema version to the next.
pub type Migration = Arc<dyn Fn(serde_json::Value) -> Result<serde_json::Value, String> + Send + Sync>;

/// A graph with what its runs use: the plan, the store (if any), the state migrations and
/// the tool gateway. An `App` is one of these with the operations on it; a [`Runner`]
/// (crate::Runner) holds its own (the parts are shared).
pub(crate) struct Setup<S: State, D> {
    pub(crate) graph: CompiledGraph<S, D>,
    pub(crate) store: Option<Arc<dyn Store>>,
    pub(crate) migrations: Arc<BTreeMap<u32, Migration>>,
    /// How its tool calls are governed; shared by every run (a builder method changes the
    /// App's own copy).
    pub(crate) gateway: Arc<Gateway>,
    /// Who the app's operations are checked for, and by which policy.
    pub(crate) access: crate::access::Access,
    /// Whether each run's commits write the thread's event log
    /// ([`App::event_log`](crate::App::event_log)); off by default.
    pub(crate) event_log: bool,
    /// How each fire of its cron schedules is checked ([`App::schedule_owners`](crate::App::schedule_owners)).
    pub(crate) fire_check: crate::schedule::FireCheck,
}

impl<S: State, D> Clone for Setup<S, D> {
    fn clone(&self) -> Self {
        Setup {
            graph: self.graph.clone(),
            store: self.store.clone(),
            migrations: Arc::clone(&self.migrations),
            gateway: Arc::clone(&self.gateway),
            access: self.access.clone(),
            event_log: self.event_log,
            fire_check: self.fire_check.clone(),
        }
    }
}

impl<S: State, D> Setup<S, D> {
    /// `graph` with the default runtime configuration: no store, the default gateway, no
    /// migrations.
    pub(crate) fn new(graph: CompiledGraph<S, D>) -> Self {
        Setup {
            graph,
            store: None,
            migrations: Arc::default(),
            gateway: Arc::default(),
            access: crate::access::Access::default(),
            event_log: false,
            fire_check: crate::schedule::FireCheck::default(),
        }
    }

    /// Refuses a persisted run with no owner ([`OwnerRequired`]) when a node of the graph, or
    /// of one of its subgraphs at any level, lists a tool the policy may hold for a human's
    /// approval ([`Policy::may_gate`]). Called before a new thread is created or queued, and
    /// only when its owner is empty: the subgraphs are looked at only then.
    pub(crate) fn check_owner(&self, owner: &str) -> Result<(), OwnerRequired> {
        if !owner.is_empty() {
            return Ok(());
        }
        let policy = &self.gateway.policy;
        let own = crate::graph::tools_at(&self.graph);
        let below = if self.graph.has_subgraphs() { self.graph.tools_below_at() } else { Vec::new() };
        match own.into_iter().chain(below).find(|(_, _, t)| policy.may_gate(t.name(), t.risk())) {
            Some((graph, node, tool)) => Err(OwnerRequired { graph, node, tool: tool.name(), risk: tool.risk() }),
            None => Ok(()),
        }
    }

    /// Runs the registered migrations from `stored` up to `S::VERSION`.
    pub(crate) fn migrate(
        &self,
        thread: &str,
        stored: u32,
        mut state: serde_json::Value,
    ) -> Result<serde_json::Value, ResumeError> {
        let refused =
            || ResumeError::SchemaVersion { thread: thread.into(), state: S::NAME, stored, current: S::VERSION };
        if stored > S::VERSION {
            return Err(refused());
        }
        for from in stored..S::VERSION {
            let step = self.migrations.get(&from).ok_or_else(refused)?;
            state = step(state).map_err(|message| ResumeError::Migration { thread: thread.into(), from, message })?;
        }
        Ok(state)
    }
}
