//! What runs a graph: the `App` handle.
//!
//! The struct and its configuration are here; what the App does is in one file per concern.

mod access;
mod approvals;
mod breakers;
mod controls;
pub(crate) mod follow_up;
pub(crate) mod governance;
#[cfg(feature = "mcp")]
mod mcp;
mod multitask;
pub(crate) mod retention;
mod run;
mod run_controls;
pub(crate) mod scheduler;
mod schedules;
mod submission;
mod submit_with;
mod threads;
mod timers;
mod worker_error;

pub use crate::run::Migration;
pub use multitask::Multitask;
pub use run_controls::RunControls;
pub use submission::Submission;
pub use worker_error::WorkerError;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use agentflow_store::Store;

use crate::core::state::State;
use crate::graph::CompiledGraph;
use crate::run::Setup;
use crate::tool::{OnReject, Policy};

/// What runs a graph: [`App`], the one handle that owns a graph's runtime
/// configuration (store, tool policy, approval TTL, what a rejection does,
/// circuit breakers ([`App::circuit_breaker`]), state migrations) and
/// everything done with it — runs, history, forks, approvals and audit reads.
///
/// A [`CompiledGraph`] is only the plan; [`CompiledGraph::app`] wraps it:
///
/// ```
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
/// # let dir = std::env::temp_dir().join(format!("agentflow-app-doc-{}", std::process::id()));
/// # std::fs::create_dir_all(&dir).unwrap();
/// use std::sync::Arc;
/// use agentflow::RedbStore;
///
/// let store = Arc::new(RedbStore::open(dir.join("runs.redb"))?);
/// let app = counter::graph().app().store(store);
/// let run = app.runner(&()).thread("t-1").run(Count::default()).await?;
/// assert_eq!(run.state.n, 1);
/// // Reads go through the same handle.
/// assert_eq!(app.state("t-1")?.unwrap().state.n, 1);
/// # std::fs::remove_dir_all(&dir).ok();
/// # Ok(())
/// # })
/// # }
/// ```
///
/// A plain in-memory run needs no `App`: [`CompiledGraph::run`] is sugar
/// for `graph.app().run(input, &deps)`.
///
/// A graph with its runtime configuration: the handle that runs it
/// ([`App::runner`], [`App::run`]) and reads and changes its stored threads
/// ([`App::state`], [`App::history`], [`App::fork`], [`App::update_state`],
/// [`App::raise_limits`], [`App::compact`], [`App::audit_log`]) and
/// approvals ([`App::approvals`]), each checked for an actor by the app's
/// access policy ([`App::access`], [`App::acting_as`]; by default every
/// operation is allowed).
///
/// Built with [`CompiledGraph::app`]; cheap to clone (the plan, the store
/// and the policy are shared).
///
/// A durable thread paused at a breakpoint, resumed, then branched and
/// edited by a person, with limits and an event sink:
///
/// ```
/// use std::sync::Arc;
/// use agentflow::prelude::*;
/// use agentflow::{Event, Limits, RedbStore};
/// # use serde::{Deserialize, Serialize};
/// # #[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
/// # struct Count { #[reduce(add)] n: u32 }
/// #[graph(state = Count, start = first)]
/// mod steps {
///     use super::*;
///     #[node(goto = [second])]
///     async fn first(_c: &Count) -> Step<Count> { goto!(second, Count::update().n(1)) }
///     #[node(goto = [END])]
///     async fn second(_c: &Count) -> Step<Count> { goto!(END, Count::update().n(1)) }
/// }
/// # fn main() -> Result<(), agentflow::Error> {
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let app = steps::graph().app().store(Arc::new(RedbStore::in_memory()?));
///
/// // Breakpoint: pause before `second` runs; count the events meanwhile.
/// let mut events = 0;
/// let run = app
///     .runner(&())
///     .thread("t-1")
///     .limits(Limits::none().model_calls(5).tool_calls(5))
///     .interrupt_before(["second"])
///     .on_event(|_e: Event<Count>| events += 1)
///     .run(Count::default())
///     .await?;
/// assert!(matches!(run.outcome, Outcome::Interrupted { .. }));
/// assert_eq!(run.state.n, 1);
/// assert!(events > 0);
///
/// // Resume where it paused (in this or another process).
/// let run = app.runner(&()).thread("t-1").resume().await?;
/// assert_eq!(run.outcome, Outcome::Completed);
/// assert_eq!(run.state.n, 2);
///
/// // Branch back to checkpoint 1 (after `first`), then a person edits the state.
/// app.fork("t-1", 1, "alice")?;
/// assert_eq!(app.state("t-1")?.unwrap().state.n, 1);
/// app.update_state("t-1", Count::update().n(10), "alice")?;
/// assert_eq!(app.state("t-1")?.unwrap().state.n, 11);
/// // History is never rewritten: the fork and the edit are new checkpoints.
/// assert!(app.history("t-1")?.len() >= 4);
/// # Ok(())
/// # })
/// # }
/// ```
pub struct App<S: State, D = ()> {
    /// The plan, store, migrations and gateway, which each run gets its own handle to.
    pub(crate) setup: Setup<S, D>,
}

impl<S: State, D> Clone for App<S, D> {
    fn clone(&self) -> Self {
        App { setup: self.setup.clone() }
    }
}

impl<S: State, D> fmt::Debug for App<S, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("App")
            .field("graph", &self.setup.graph)
            .field("store", &self.setup.store.is_some())
            .field("migrations", &self.setup.migrations.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl<S: State, D> CompiledGraph<S, D> {
    /// This graph with the default runtime configuration: no store, the
    /// default [`RiskPolicy`](crate::tool::RiskPolicy), approvals valid for 24 hours, a rejection
    /// lets the model re-plan, no migrations.
    pub fn app(&self) -> App<S, D> {
        App::new(self.clone())
    }
}

impl<S: State, D> App<S, D> {
    /// `graph` with the default runtime configuration (see [`CompiledGraph::app`]).
    pub fn new(graph: CompiledGraph<S, D>) -> Self {
        App { setup: Setup::new(graph) }
    }

    /// The plan this handle runs.
    pub fn graph(&self) -> &CompiledGraph<S, D> {
        &self.setup.graph
    }

    /// Persists every run that names a thread into `store`.
    ///
    /// A [`RedbStore`](crate::RedbStore) file is open in one process at a
    /// time; share the `Arc` within the process.
    #[must_use]
    pub fn store(mut self, store: Arc<dyn Store>) -> Self {
        self.setup.store = Some(store);
        self
    }

    /// Writes each thread's event log (off by default): every commit a durable run of this app
    /// makes tells what it did, in the same transaction, for a reader that follows the thread
    /// (the server's stream of a thread, `agentflow tail`) through
    /// [`Store::read_events`](agentflow_store::Store::read_events). A run logs, each event in
    /// the commit it tells of:
    ///
    /// - `run.started` (`{"run", "graph", "resumed"}`) with its first commit: a new thread's
    ///   input checkpoint, or whatever a resumed run commits first;
    /// - `step` (`{"run", "step", "checkpoint", "nodes", "updates": [{"node", "instance",
    ///   "update"}]}`) with each super-step's checkpoint: every node's update as stored, less
    ///   the fields marked `#[state(credential)]` (never logged; fields marked `#[state(pii)]`
    ///   are logged, sealed by a store that seals payloads, and masked by readers who may not
    ///   see them);
    /// - `interrupt` (`{"run", "questions": [{"id", "node", "instance", "kind", "question"}],
    ///   "approvals": [{"id", "tool", "node", "instance", "kind"}]}`) with the commit that
    ///   records the thread waiting for a person;
    /// - `run.finished` (`{"run", "status", "detail"}`: the thread's status and status line)
    ///   with the commit that records how the run ended.
    ///
    /// `run` is the run's id in its thread (`<unix ms>-<8 hex digits>`). The events pass the
    /// credential scan of every stored value. Subgraph runs log to their own threads alike.
    /// With the log off, nothing of it is built.
    #[must_use]
    pub fn event_log(mut self, on: bool) -> Self {
        self.setup.event_log = on;
        self
    }

    /// The attached store, if any.
    pub fn backing_store(&self) -> Option<&Arc<dyn Store>> {
        self.setup.store.as_ref()
    }

    /// Sets the policy that decides which tool calls run, wait for a human,
    /// or are denied (default: [`RiskPolicy::default`](crate::tool::RiskPolicy::default)).
    #[must_use]
    pub fn policy(mut self, policy: impl Policy) -> Self {
        Arc::make_mut(&mut self.setup.gateway).policy = Arc::new(policy);
        self
    }

    /// How long an approval request stays valid (default 24 hours).
    #[must_use]
    pub fn approval_ttl(mut self, ttl: Duration) -> Self {
        Arc::make_mut(&mut self.setup.gateway).approval_ttl = ttl;
        self
    }

    /// What a human's rejection does (default: the model re-plans).
    #[must_use]
    pub fn on_reject(mut self, on_reject: OnReject) -> Self {
        Arc::make_mut(&mut self.setup.gateway).on_reject = on_reject;
        self
    }

    /// Registers how to upgrade a stored state (as JSON) from schema version
    /// `from` to `from + 1`. Resuming a thread stored at an older
    /// `#[state(version = N)]` runs the registered steps in order; without
    /// them it is refused.
    #[must_use]
    pub fn migration(
        mut self,
        from: u32,
        migrate: impl Fn(serde_json::Value) -> Result<serde_json::Value, String> + Send + Sync + 'static,
    ) -> Self {
        Arc::make_mut(&mut self.setup.migrations).insert(from, Arc::new(migrate));
        self
    }
}
