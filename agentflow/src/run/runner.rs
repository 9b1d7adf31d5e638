//! A run of a graph, configured step by step: the [`Runner`] and its options.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::Setup;
use super::events::Sink;
use crate::core::budget::Limits;
use crate::core::state::State;
use crate::durable::{DEFAULT_LEASE_TTL, Durability, LeaseHolder};
use crate::event::Event;
use crate::graph::CompiledGraph;
#[cfg(doc)]
use crate::interrupt::PendingKind;
#[cfg(doc)]
use crate::outcome::Outcome;
use crate::outcome::{Run, RunError};
use crate::stream::{Channel, Modes, RunStream, StreamMode};

impl<S: State, D: Sync> CompiledGraph<S, D> {
    /// Runs the graph in memory from `input` to an [`Outcome`] with default
    /// limits: sugar for `graph.app().run(input, deps)`.
    ///
    /// For a durable thread, a tool policy, breakpoints, limits or events,
    /// build an [`App`](crate::App) with [`CompiledGraph::app`] and use [`App::runner`](crate::App::runner).
    pub fn run<'g>(&self, input: S, deps: &'g D) -> impl Future<Output = Result<Run<S>, RunError>> + use<'g, S, D> {
        self.app().run(input, deps)
    }
}

/// How long a stop that reaches a running step waits for a journaled effect in flight, unless
/// [`Runner::stop_grace`] says otherwise.
pub const DEFAULT_STOP_GRACE: Duration = Duration::from_secs(10);

/// One run of a graph, configured step by step, started with [`Runner::run`]
/// or continued with [`Runner::resume`] / [`Runner::resume_with`] (or read as
/// a [`RunStream`] with [`Runner::stream`] and its resume counterparts).
///
/// Those futures are `Send` (the deps are shared by reference, so `D: Sync`;
/// a [`Runner::on_event`] sink need only be `Send`): a run can be
/// `tokio::spawn`ed (with the graph and deps in an `Arc`) or awaited in a
/// web handler. Dropping the future, or aborting its task, cancels the run
/// where it stands and releases the thread at once.
#[must_use = "a runner does nothing until `.run(input).await`"]
pub struct Runner<'g, S: State, D> {
    pub(super) setup: Setup<S, D>,
    pub(super) deps: &'g D,
    pub(super) max_steps: Option<u32>,
    pub(super) deadline: Option<Instant>,
    pub(super) cancel: CancellationToken,
    pub(super) sink: Option<Sink<'g, S>>,
    pub(super) thread: Option<String>,
    pub(super) owner: String,
    /// The tenant a new thread belongs to (a resumed one keeps its own).
    pub(super) tenant: Option<Box<str>>,
    pub(super) durability: Durability,
    /// Breakpoints by node name, if any were asked for (boxed: most runs have none).
    pub(super) breakpoints: Option<Box<Breakpoints>>,
    pub(super) limits: Limits,
    pub(super) lease_ttl: Duration,
    /// The lease holder (a worker's, whose claim took the thread's lease); a new one per run if unset.
    pub(super) holder: Option<LeaseHolder>,
    /// A subgraph child's run: the leases of the runs above it, which fence what starts its
    /// effects too.
    pub(super) parent_leases: Option<crate::durable::ParentLeases>,
    /// The stream the run is read as, if it is.
    pub(super) stream: Option<Arc<Channel<S>>>,
    /// What a stream of this run carries.
    pub(super) modes: Modes,
    /// How many items a stream of this run buffers.
    pub(super) stream_buffer: usize,
    /// For a subgraph's run: its parent's stream, which its model chunks and
    /// custom values go to (under the child's place).
    pub(super) parent_outlet: Option<Arc<dyn crate::stream::Outlet>>,
    /// For a subgraph's run: the shields of the node attempts and runs around it, which its
    /// effects hold off too (a parent node's timeout waits for a child's call in flight).
    pub(super) outer_shields: Vec<crate::in_flight::Shield>,
    /// Cancelled (before `cancel`) when the stop is a pause: the run ends `Outcome::Paused`.
    pub(super) pause: CancellationToken,
    /// For a subgraph's run on a thread: the parent's thread, which a new child thread's record
    /// names.
    pub(super) child_of: Option<String>,
    /// Drops the running step's nodes when cancelled (a worker's shutdown past its deadline);
    /// the cancel token if unset.
    pub(super) stop_now: Option<CancellationToken>,
    /// How long a stop that reaches a running step waits for an effect in flight.
    pub(super) stop_grace: Duration,
    /// The time limit of each node attempt without a `timeout` of its own.
    pub(super) node_time_limit: Option<Duration>,
    /// For a subgraph's run: the root thread's step that started it (see [`crate::saga`]).
    pub(super) saga_root_step: Option<u64>,
}

/// The nodes a run pauses before or after ([`Runner::interrupt_before`],
/// [`Runner::interrupt_after`]).
#[derive(Default)]
pub(super) struct Breakpoints {
    pub(super) before: Vec<String>,
    pub(super) after: Vec<String>,
}

/// How many items a [`RunStream`] holds before the run waits for its reader,
/// unless [`Runner::stream_buffer`] says otherwise.
pub const DEFAULT_STREAM_BUFFER: usize = 64;

impl<'g, S: State, D: Sync> Runner<'g, S, D> {
    /// A run of `setup`'s graph with the default options (see [`App::runner`](crate::App::runner)).
    pub(crate) fn new(setup: Setup<S, D>, deps: &'g D) -> Self {
        Runner {
            setup,
            deps,
            max_steps: None,
            deadline: None,
            cancel: CancellationToken::new(),
            sink: None,
            thread: None,
            owner: String::new(),
            tenant: None,
            durability: Durability::default(),
            breakpoints: None,
            limits: Limits::none(),
            lease_ttl: DEFAULT_LEASE_TTL,
            holder: None,
            stream: None,
            modes: Modes::of([StreamMode::Updates]),
            stream_buffer: DEFAULT_STREAM_BUFFER,
            parent_outlet: None,
            outer_shields: Vec::new(),
            pause: CancellationToken::new(),
            child_of: None,
            saga_root_step: None,
            parent_leases: None,
            stop_now: None,
            stop_grace: DEFAULT_STOP_GRACE,
            node_time_limit: None,
        }
    }

    /// Persists the run as thread `id` in the graph's store: one checkpoint
    /// per super-step, so it can be resumed, inspected and forked.
    pub fn thread(mut self, id: impl Into<String>) -> Self {
        self.thread = Some(id.into());
        self
    }

    /// Who the thread belongs to (stored with it).
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = owner.into();
        self
    }

    /// The tenant a new thread belongs to, fixed from then on: its subgraph children belong to
    /// it too, and actors that do not act for it neither see nor touch the thread (see
    /// [`access`](crate::access)). The app's actor must act for it. A resumed thread keeps
    /// the tenant it was created with; this is ignored then.
    pub fn tenant(mut self, tenant: impl Into<String>) -> Self {
        self.tenant = Some(tenant.into().into_boxed_str());
        self
    }

    /// A subgraph's run sends its model chunks and custom values to its
    /// parent's stream, under `level`, and its effects in flight hold off the
    /// timeouts and deadlines of `shields` (its parent's, and theirs).
    pub(crate) fn nested_in(
        mut self,
        parent: Option<Arc<dyn crate::stream::Outlet>>,
        level: String,
        shields: Vec<crate::in_flight::Shield>,
    ) -> Self {
        self.parent_outlet = parent.map(|parent| Arc::new(crate::stream::Nested { parent, level }) as Arc<_>);
        self.outer_shields = shields;
        self
    }

    /// A subgraph's run on a thread: a new thread is a child of thread `parent` (its record says
    /// so; a resumed one keeps what its record says).
    pub(crate) fn child_of(mut self, parent: String) -> Self {
        self.child_of = Some(parent);
        self
    }

    /// A run the app starts for itself, not checked against the app's access policy (which
    /// checked who asked for it when it was asked): a subgraph's child, a worker's claim (the
    /// only runs with a lease holder of their own). A due timer's wake is not checked either.
    pub(super) fn trusted(&self) -> bool {
        self.child_of.is_some() || self.holder.is_some()
    }

    /// A subgraph's run, started in step `step` of the root thread: its compensable calls are
    /// logged with that step, so the root's compensation orders them among its own.
    pub(crate) fn saga_root_step(mut self, step: u64) -> Self {
        self.saga_root_step = Some(step);
        self
    }

    /// A subgraph's run: what starts its effects is fenced by `parents` too, the leases of the
    /// runs above it, so a parent that lost its thread does not act through its child.
    pub(crate) fn fenced_by_parents(mut self, parents: crate::durable::ParentLeases) -> Self {
        self.parent_leases = Some(parents);
        self
    }

    /// When checkpoints reach the disk (default [`Durability::Sync`]).
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// Bounds model calls, tool calls and tokens; running out ends the run as
    /// [`Outcome::BudgetExhausted`], never as completed.
    ///
    /// With [`Runner::thread`] the limits bound the *thread*, counted over
    /// all its runs and processes: [`Runner::run`] stores them with the new
    /// thread, and a resume starts from the thread's stored usage. A resume
    /// may set lower limits (they apply to that run); a limit above the
    /// stored one is refused with [`RunError::LimitRaised`] — raise it with
    /// [`App::raise_limits`](crate::App::raise_limits), which writes an audit entry.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// How long the thread's lease lasts between renewals (default 30 s, at
    /// least 30 ms; a shorter one is [`RunError::LeaseTtlTooShort`]).
    ///
    /// While a step runs the lease is renewed every third of this; if a
    /// renewal finds that another executor took the thread (or the lease
    /// could not be renewed before it expired), the running nodes are
    /// cancelled (their futures dropped), nothing more is committed and the
    /// run ends with [`RunError::LeaseLost`]. Another executor can take a
    /// thread over only once its holder missed renewals for this long —
    /// which includes a node that blocks its runtime thread (no `.await`)
    /// for longer than the TTL.
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        self.lease_ttl = ttl;
        self
    }

    /// Runs under lease holder `holder`, which already holds the thread's lease until `until`
    /// (unix millis; a worker's claim took it): the run takes no lease of its own, its commits
    /// are fenced by `holder`, it renews the lease while it runs and leaves it held when it
    /// ends: `holder` releases it.
    ///
    /// Once `revoked` is set, the run writes and starts nothing more and ends
    /// [`RunError::LeaseLost`] (see [`LeaseHolder::revoked`]).
    pub(crate) fn lease_holder(
        mut self,
        holder: impl Into<String>,
        until: u64,
        revoked: Arc<std::sync::atomic::AtomicBool>,
    ) -> Self {
        self.holder = Some(LeaseHolder { id: holder.into(), until, revoked });
        self
    }

    /// Makes a stop through the cancel token a pause when `pause` was cancelled first: the run
    /// ends [`Outcome::Paused`] (status `paused`, no compensation) instead of cancelled.
    pub(crate) fn pause_token(mut self, pause: CancellationToken) -> Self {
        self.pause = pause;
        self
    }

    /// Drops the running step's nodes when `now` is cancelled, instead of when the cancel token
    /// is: a worker's graceful shutdown stops its runs at their step boundary at once, and in
    /// the step past its deadline.
    pub(crate) fn stop_now_token(mut self, now: CancellationToken) -> Self {
        self.stop_now = Some(now);
        self
    }

    /// How long a stop (a cancel, a pause, a node's time limit or `timeout`) that reaches a
    /// running node lets a journaled effect in flight finish and be journaled before the node is
    /// dropped (default
    /// [`DEFAULT_STOP_GRACE`], 10 s). An effect still running then is dropped too: its journal
    /// shows it started and never ended, so a resume treats its outcome as unknown (see
    /// [`Ctx::effect`](crate::Ctx::effect)).
    pub fn stop_grace(mut self, grace: Duration) -> Self {
        self.stop_grace = grace;
        self
    }

    /// Fails each node attempt that runs longer than `limit`, as a node's own `timeout` does
    /// (a passing failure, retried under the node's `retry` policy; an effect in flight finishes
    /// first), for the nodes without a `timeout` of their own. None by default; a
    /// [`Worker`](crate::Worker) sets its [`Worker::node_time_limit`](crate::Worker::node_time_limit).
    pub fn node_time_limit(mut self, limit: Duration) -> Self {
        self.node_time_limit = Some(limit);
        self
    }

    /// Lowers the super-step bound below the graph's `max_steps`.
    pub fn max_steps(mut self, steps: u32) -> Self {
        self.max_steps = Some(steps);
        self
    }

    /// Ends the run as [`Budget::Deadline`](crate::Budget::Deadline) at this instant, even mid-step.
    pub fn deadline(mut self, at: Instant) -> Self {
        self.deadline = Some(at);
        self
    }

    /// Ends the run as [`Budget::Deadline`](crate::Budget::Deadline) after this much wall-clock time.
    /// A limit too far ahead for the clock to represent (`Duration::MAX`, say) sets no deadline.
    pub fn timeout(mut self, limit: Duration) -> Self {
        self.deadline = Instant::now().checked_add(limit);
        self
    }

    /// Cancelling `token` stops the run ([`Outcome::Cancelled`]): at the next step boundary, or
    /// inside a running step, whose nodes are dropped at their next await (a journaled effect
    /// in flight is let finish first, for up to [`Runner::stop_grace`], and none starts after
    /// the stop; a node that hangs, in a tool or model call without a timeout, is stopped too). Nodes of that step whose writes
    /// were kept (under [`Durability::Sync`](crate::Durability::Sync)) do not run again.
    /// A [`Runner::resume`] with a token cancelled already ends the thread cancelled at its
    /// first step boundary, also when it waits for a value or a timer that is not due.
    /// A cancel that comes once the graph's last step has finished its nodes (as it commits) is
    /// too late: that step's commit records the thread `completed`, the run ends
    /// [`Outcome::Completed`] and nothing is compensated.
    pub fn cancel_token(mut self, token: CancellationToken) -> Self {
        self.cancel = token;
        self
    }

    /// Calls `sink` with every [`Event`] of the run, in order. To read them
    /// as a stream instead (with states, updates, model chunks or custom
    /// values besides), use [`Runner::stream`] with [`StreamMode::Events`]:
    /// the same events, in the same order.
    pub fn on_event(mut self, sink: impl FnMut(Event<S>) + Send + 'g) -> Self {
        self.sink = Some(Box::new(sink));
        self
    }

    /// What [`Runner::stream`] and the stream resumes carry: one or more
    /// [`StreamMode`]s, in one stream (default: [`StreamMode::Updates`]).
    /// [`StreamPart::Done`](crate::StreamPart::Done) always ends it.
    pub fn stream_modes(mut self, modes: impl IntoIterator<Item = StreamMode>) -> Self {
        self.modes = Modes::of(modes);
        self
    }

    /// How many items a stream of this run holds before the run waits for
    /// its reader (default [`DEFAULT_STREAM_BUFFER`], at least 1).
    pub fn stream_buffer(mut self, items: usize) -> Self {
        self.stream_buffer = items.max(1);
        self
    }

    /// Like [`Runner::run`], read as a [`RunStream`] of the modes chosen with
    /// [`Runner::stream_modes`] as the run goes; its last item holds what
    /// `run` would have returned. See [`RunStream`] for how the reader and
    /// the run pace each other and what dropping the stream does.
    ///
    /// ```
    /// use agentflow::prelude::*;
    /// use agentflow::{StreamMode, StreamPart};
    /// # use serde::{Deserialize, Serialize};
    /// # #[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
    /// # struct Count { #[reduce(add)] n: u32 }
    /// #[graph(state = Count, start = one)]
    /// mod count {
    ///     use super::*;
    ///     #[node(goto = [two])]
    ///     async fn one(_s: &Count) -> Step<Count> { goto!(two, Count::update().n(1)) }
    ///     #[node(goto = [END])]
    ///     async fn two(_s: &Count) -> Step<Count> { goto!(END, Count::update().n(2)) }
    /// }
    /// # fn main() {
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let app = count::graph().app();
    /// let mut stream = app.runner(&()).stream_modes([StreamMode::Values, StreamMode::Updates]).stream(Count::default());
    /// let mut seen = Vec::new();
    /// while let Some(item) = stream.next().await {
    ///     match item.part {
    ///         StreamPart::Update { node, .. } => seen.push(format!("{node} ran")),
    ///         StreamPart::Values { step, state } => seen.push(format!("after step {step}: n = {}", state.n)),
    ///         StreamPart::Done(run) => assert_eq!(run.unwrap().outcome, Outcome::Completed),
    ///         _ => {}
    ///     }
    /// }
    /// assert_eq!(seen, ["one ran", "after step 1: n = 1", "two ran", "after step 2: n = 3"]);
    /// # });
    /// # }
    /// ```
    pub fn stream(mut self, input: S) -> RunStream<'g, S> {
        let channel = self.open_stream();
        RunStream::new(channel, Box::pin(self.run(input)))
    }

    /// Like [`Runner::resume`], read as a [`RunStream`] (see [`Runner::stream`]).
    pub fn stream_resume(mut self) -> RunStream<'g, S> {
        let channel = self.open_stream();
        RunStream::new(channel, Box::pin(self.resume()))
    }

    /// Like [`Runner::resume_with`], read as a [`RunStream`] (see [`Runner::stream`]).
    pub fn stream_resume_with<V: serde::Serialize>(mut self, value: V) -> RunStream<'g, S> {
        let channel = self.open_stream();
        let value = crate::core::encode::to_value(&value, "resume", crate::durable::MAX_JSON_DEPTH);
        RunStream::new(channel, Box::pin(async move { self.resume_with(value.map_err(resume_value_error)?).await }))
    }

    fn open_stream(&mut self) -> Arc<Channel<S>> {
        let channel = Arc::new(Channel::new(self.modes, self.stream_buffer));
        self.stream = Some(Arc::clone(&channel));
        channel
    }

    /// Pauses before a step in which any of `nodes` would run
    /// ([`Outcome::Interrupted`] with [`PendingKind::Before`]).
    pub fn interrupt_before<N: AsRef<str>>(mut self, nodes: impl IntoIterator<Item = N>) -> Self {
        let names = nodes.into_iter().map(|n| n.as_ref().to_string());
        self.breakpoints.get_or_insert_with(Box::default).before.extend(names);
        self
    }

    /// Pauses after a step in which any of `nodes` ran
    /// ([`Outcome::Interrupted`] with [`PendingKind::After`]).
    pub fn interrupt_after<N: AsRef<str>>(mut self, nodes: impl IntoIterator<Item = N>) -> Self {
        let names = nodes.into_iter().map(|n| n.as_ref().to_string());
        self.breakpoints.get_or_insert_with(Box::default).after.extend(names);
        self
    }
}

/// An answer to a question as the thread keeps it: refused when it would not read back, or holds
/// text that looks like a credential.
pub(super) fn resume_value<V: serde::Serialize>(value: &V) -> Result<serde_json::Value, crate::durable::PersistError> {
    let value =
        crate::core::encode::to_value(value, "resume", crate::durable::MAX_JSON_DEPTH).map_err(resume_value_error)?;
    crate::durable::refuse_credentials_in(&value, "the resume value", Default::default())?;
    Ok(value)
}

pub(super) fn resume_value_error(source: crate::core::encode::ValueError) -> crate::durable::PersistError {
    crate::durable::PersistError::Value { what: "the resume value", source }
}
