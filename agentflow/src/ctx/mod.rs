//! What a running node can see besides the state: the dependencies, where it
//! is in the run, the run's budgets and cancellation. Each capability of the
//! context (its effect journal, its tools, chat, interrupt, sleep, emit,
//! compensation, subgraphs) has a file of its own here.

mod chat;
mod compensate;
mod effects;
mod emit;
mod gateway;
mod interrupt;
mod moved_calls;
mod sleep;
pub(crate) mod subgraph;
mod tool_approval;
mod tool_breaker;
mod tools;

use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use crate::core::budget::Budget;
use crate::core::budget::Meter;
use crate::core::error::NodeError;
use crate::durable::Journal;
use crate::event::Activity;
use crate::in_flight::Shield;
use crate::interrupt::Signal;
use crate::stream::{Origin, Outlet};
pub(crate) use gateway::Gateway;

use crate::tool::ToolSet;

/// The context handed to a node: `async fn n(s: &S, cx: &Ctx<D>) -> Step<S>`.
///
/// A node may take `deps: &D` instead when it needs nothing else.
pub struct Ctx<'a, D> {
    pub(crate) deps: &'a D,
    pub(crate) node: &'static str,
    pub(crate) step: u32,
    pub(crate) attempt: u32,
    pub(crate) scope: &'a RunScope<'a>,
    pub(crate) journal: Option<&'a Journal>,
    pub(crate) tools: ToolSet,
    /// The graphs the node may run as children.
    pub(crate) subgraphs: &'static [&'static str],
    pub(crate) may_interrupt: bool,
    pub(crate) may_sleep: bool,
    pub(crate) signal: &'a Mutex<Signal>,
    pub(crate) resume: Option<&'a serde_json::Value>,
    /// What this node's `interrupt` returned before its step paused for
    /// something else (see [`crate::interrupt::KeptAnswer`]).
    pub(crate) kept_answer: Option<&'a crate::interrupt::KeptAnswer>,
    /// For an instance of a map worker: its index and its payload.
    pub(crate) payload: Option<(u32, &'a serde_json::Value)>,
    /// The values captured contents must not show (the state's personal and credential field
    /// values when the node started); empty unless contents are captured on spans.
    pub(crate) masked: &'a [String],
}

/// What every node of one run shares.
pub(crate) struct RunScope<'g> {
    pub(crate) cancel: CancellationToken,
    /// Drops the running step's nodes when cancelled; a subgraph's run is stopped with it.
    pub(crate) stop_now: CancellationToken,
    /// How long a stop or a node's time limit waits for a journaled effect in flight.
    pub(crate) stop_grace: std::time::Duration,
    /// The time limit of a node attempt without a `timeout` of its own (a subgraph's nodes
    /// have it too).
    pub(crate) node_time_limit: Option<std::time::Duration>,
    pub(crate) meter: Meter,
    /// The App's tool gateway: policy, approvals' lifetime, rejections, circuit breakers, the
    /// crash test's probe, remote tools. Subgraph runs share it.
    pub(crate) gateway: Arc<Gateway>,
    pub(crate) owner: String,
    /// Journaled effects of the run in flight (see [`Shield`]).
    pub(crate) shield: Shield,
    /// Subgraph runs of this run's nodes in flight: a stop inside a step lets them end first
    /// (for its grace), as it lets effects.
    pub(crate) children_running: Shield,
    /// For a subgraph's run: the shields of the node attempts and runs around it.
    pub(crate) outer_shields: Vec<Shield>,
    pub(crate) activity: Box<dyn Fn(Activity) + Send + Sync + 'g>,
    /// Cancelled (before `cancel`) when the run is paused from outside; a
    /// subgraph's run is paused with it.
    pub(crate) pause: CancellationToken,
    /// Subgraphs running at once in this run: at most [`crate::DEFAULT_PARALLEL`].
    pub(crate) children: tokio::sync::Semaphore,
    /// The run's stream, when it carries model chunks or custom values.
    pub(crate) outlet: Option<Arc<dyn Outlet>>,
    /// For a subgraph's run: the step of the root thread in which it was started, recorded
    /// with its calls' saga entries so a compensation orders the tree's calls as one.
    pub(crate) saga_root_step: Option<u64>,
    /// The run writes its thread's event log; so do its subgraphs' runs, to their threads.
    pub(crate) event_log: bool,
}

impl<D> std::fmt::Debug for Ctx<'_, D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx")
            .field("node", &self.node)
            .field("step", &self.step)
            .field("attempt", &self.attempt)
            .field("thread", &self.thread())
            .finish_non_exhaustive()
    }
}

impl<'a, D> Ctx<'a, D> {
    /// The user's dependencies (models, clients, configuration).
    pub fn deps(&self) -> &'a D {
        self.deps
    }

    /// The name of the running node.
    pub fn node(&self) -> &'static str {
        self.node
    }

    /// The super-step number, from 0.
    pub fn step(&self) -> u32 {
        self.step
    }

    /// The attempt number, from 1; above 1 when the node is being retried.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The thread this run belongs to, when it is persisted.
    pub fn thread(&self) -> Option<&str> {
        self.journal.map(|j| j.thread.as_str())
    }

    /// Whether the run was cancelled. The executor stops at the next step
    /// boundary; a long node may check this (or await [`Ctx::cancelled`]) to stop early.
    pub fn is_cancelled(&self) -> bool {
        self.scope.cancel.is_cancelled()
    }

    /// Completes when the run is cancelled.
    pub async fn cancelled(&self) {
        self.scope.cancel.cancelled().await;
    }

    /// The key under which this node run journals `key`: the instances of a
    /// map worker share a node and a step, so each keys its effects, tool
    /// calls and approvals apart (`key[i]`).
    pub(crate) fn instance_key(&self, key: String) -> String {
        crate::core::instance_key::instance_key(key, self.payload.map(|(i, _)| i))
    }

    /// For an instance of a map worker (`goto!(each(worker, payloads))`):
    /// the index of its payload in the list the sender sent; `None` in a
    /// plain node. Effects journaled by an instance ([`Ctx::effect`]) are
    /// keyed per instance, so instances do not share results.
    pub fn instance(&self) -> Option<u32> {
        self.payload.map(|(i, _)| i)
    }

    /// Where in the run this node is, for the items it streams.
    fn origin(&self) -> Origin {
        Origin { step: self.step, node: self.node, instance: self.instance() }
    }

    /// Records that a budget ran out; the run ends as `BudgetExhausted`.
    pub(crate) fn exhausted(&self, which: Budget) -> NodeError {
        let mut signal = self.signal.lock().unwrap_or_else(|p| p.into_inner());
        signal.exhausted.get_or_insert(which);
        NodeError::fatal(format!("the run's `{which}` budget is exhausted"))
    }
}
