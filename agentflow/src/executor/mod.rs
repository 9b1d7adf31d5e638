//! The executor: runs a compiled graph in super-steps (see `exec` for the
//! loop) and reports how each run ended.

mod answers;
mod events;
pub(crate) mod exec;
mod step;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::outcome::{Outcome, Run, RunError};

use events::{Events, Sink};
use exec::Exec;

use crate::app::App;
use crate::budget::{Limits, Meter, ThreadBudget};
use crate::ctx::RunScope;
use crate::event::Event;
use crate::graph::{CompiledGraph, NodeId, Plan};
use crate::interrupt::PendingKind;
use crate::persist::{Checkpointer, DEFAULT_LEASE_TTL, Durability, LeaseHolder, PersistError, Resumed, ThreadStatus};
use crate::state::State;
use crate::stream::{Channel, Modes, RunStream, StreamMode};

impl<S: State, D: Sync> CompiledGraph<S, D> {
    /// Runs the graph in memory from `input` to an [`Outcome`] with default
    /// limits: sugar for `graph.app().run(input, deps)`.
    ///
    /// For a durable thread, a tool policy, breakpoints, limits or events,
    /// build an [`App`] with [`CompiledGraph::app`] and use [`App::runner`].
    pub async fn run(&self, input: S, deps: &D) -> Result<Run<S>, RunError> {
        self.app().run(input, deps).await
    }
}

impl<S: State, D: Sync> App<S, D> {
    /// Runs the graph from `input` to an [`Outcome`] with default limits,
    /// in memory (no thread).
    ///
    /// Use [`App::runner`] to set a thread, a deadline, a cancellation
    /// token, breakpoints or an event sink.
    pub async fn run(&self, input: S, deps: &D) -> Result<Run<S>, RunError> {
        self.runner(deps).run(input).await
    }

    /// A run with options. The runner holds its own handle to the plan,
    /// store and policy (they are shared), so it may outlive `self`.
    pub fn runner<'g>(&self, deps: &'g D) -> Runner<'g, S, D> {
        Runner {
            app: self.clone(),
            deps,
            max_steps: None,
            deadline: None,
            cancel: CancellationToken::new(),
            sink: None,
            thread: None,
            owner: String::new(),
            durability: Durability::default(),
            before: Vec::new(),
            after: Vec::new(),
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
    app: App<S, D>,
    deps: &'g D,
    max_steps: Option<u32>,
    deadline: Option<Instant>,
    cancel: CancellationToken,
    sink: Option<Sink<'g, S>>,
    thread: Option<String>,
    owner: String,
    durability: Durability,
    before: Vec<String>,
    after: Vec<String>,
    limits: Limits,
    lease_ttl: Duration,
    /// The lease holder (a worker's, whose claim took the thread's lease); a new one per run if unset.
    holder: Option<LeaseHolder>,
    /// A subgraph child's run: the leases of the runs above it, which fence what starts its
    /// effects too.
    parent_leases: Option<crate::persist::ParentLeases>,
    /// The stream the run is read as, if it is.
    stream: Option<Arc<Channel<S>>>,
    /// What a stream of this run carries.
    modes: Modes,
    /// How many items a stream of this run buffers.
    stream_buffer: usize,
    /// For a subgraph's run: its parent's stream, which its model chunks and
    /// custom values go to (under the child's place).
    parent_outlet: Option<Arc<dyn crate::stream::Outlet>>,
    /// For a subgraph's run: the shields of the node attempts and runs around it, which its
    /// effects hold off too (a parent node's timeout waits for a child's call in flight).
    outer_shields: Vec<crate::shield::Shield>,
    /// Cancelled (before `cancel`) when the stop is a pause: the run ends `Outcome::Paused`.
    pause: CancellationToken,
    /// For a subgraph's run on a thread: the parent's thread, which a new child thread's record
    /// names.
    child_of: Option<String>,
    /// Drops the running step's nodes when cancelled (a worker's shutdown past its deadline);
    /// the cancel token if unset.
    stop_now: Option<CancellationToken>,
    /// How long a stop that reaches a running step waits for an effect in flight.
    stop_grace: Duration,
    /// The time limit of each node attempt without a `timeout` of its own.
    node_time_limit: Option<Duration>,
    /// For a subgraph's run: the root thread's step that started it (see [`crate::saga`]).
    saga_root_step: Option<u64>,
}

/// How many items a [`RunStream`] holds before the run waits for its reader,
/// unless [`Runner::stream_buffer`] says otherwise.
pub const DEFAULT_STREAM_BUFFER: usize = 64;

impl<'g, S: State, D: Sync> Runner<'g, S, D> {
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

    /// A subgraph's run sends its model chunks and custom values to its
    /// parent's stream, under `level`, and its effects in flight hold off the
    /// timeouts and deadlines of `shields` (its parent's, and theirs).
    pub(crate) fn nested_in(
        mut self,
        parent: Option<Arc<dyn crate::stream::Outlet>>,
        level: String,
        shields: Vec<crate::shield::Shield>,
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

    /// A subgraph's run, started in step `step` of the root thread: its compensable calls are
    /// logged with that step, so the root's compensation orders them among its own.
    pub(crate) fn saga_root_step(mut self, step: u64) -> Self {
        self.saga_root_step = Some(step);
        self
    }

    /// A subgraph's run: what starts its effects is fenced by `parents` too, the leases of the
    /// runs above it, so a parent that lost its thread does not act through its child.
    pub(crate) fn fenced_by_parents(mut self, parents: crate::persist::ParentLeases) -> Self {
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
    /// [`App::raise_limits`], which writes an audit entry.
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
        let value = crate::persist::encode::to_value(&value, "resume", crate::persist::MAX_JSON_DEPTH);
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
        self.before.extend(nodes.into_iter().map(|n| n.as_ref().to_string()));
        self
    }

    /// Pauses after a step in which any of `nodes` ran
    /// ([`Outcome::Interrupted`] with [`PendingKind::After`]).
    pub fn interrupt_after<N: AsRef<str>>(mut self, nodes: impl IntoIterator<Item = N>) -> Self {
        self.after.extend(nodes.into_iter().map(|n| n.as_ref().to_string()));
        self
    }

    /// Runs the graph from `input` until it completes, fails, pauses, runs
    /// out of a budget or is cancelled. With [`Runner::thread`], starts that thread.
    pub async fn run(self, input: S) -> Result<Run<S>, RunError> {
        let app = &self.app;
        check_ttl(self.lease_ttl)?;
        if let Some(thread) = &self.thread {
            check_text("thread id", thread)?;
            check_text("owner", &self.owner)?;
        }
        let checkpointer = match (self.thread.clone(), app.store.clone()) {
            (None, _) => None,
            (Some(_), None) => return Err(RunError::NoStore),
            (Some(thread), Some(store)) => {
                app.check_owner(&self.owner)?;
                let budget = ThreadBudget { limits: self.limits, ..ThreadBudget::default() };
                let (owner, durability, ttl) = (self.owner.clone(), self.durability, self.lease_ttl);
                let (holder, parent) = (self.holder.clone(), self.child_of.clone());
                let id = thread.clone();
                let parents = self.parent_leases.clone().unwrap_or_default();
                let started = Checkpointer::start(
                    app, store, thread, parent, owner, durability, ttl, budget, &input, holder, parents,
                );
                Some(started.await.map_err(|e| first_commit_lost(e, &id))?)
            }
        };
        let start = Resumed::fresh(input, app.graph.start());
        self.drive(start, checkpointer, Vec::new()).await
    }

    /// Continues thread [`Runner::thread`] from its last checkpoint, in this
    /// or another process: after a crash, a failure, a breakpoint or a fork.
    /// Nodes that finished in a step that then stopped are not run again;
    /// their stored writes are used. A thread waiting in `cx.interrupt` needs
    /// [`Runner::resume_with`], unless a person answered it from another
    /// process ([`ApprovalDesk::answer_interrupt`](crate::approval::ApprovalDesk::answer_interrupt),
    /// the approval inbox, `agentflow answer`): then it continues with that
    /// answer, exactly as `resume_with(answer)` would. If that run ends
    /// [`Outcome::Failed`] (a value of the wrong shape), the answer is spent: the
    /// next plain resume asks for a value again, and a person may answer anew.
    pub async fn resume(self) -> Result<Run<S>, RunError> {
        let (checkpointer, start) =
            open(&self.app, self.thread.clone(), self.durability, self.lease_ttl, self.holder.clone()).await?;
        // A thread that stopped while undoing its calls continues undoing them.
        if checkpointer.opened_as == Some(ThreadStatus::Compensating) {
            return self.compensate_only(start, checkpointer).await;
        }
        // A resume whose cancel token is cancelled already ends the thread `cancelled` at its
        // first step boundary, even one that waits for a value or a timer.
        let cancelled = self.cancel.is_cancelled() && !self.pause.is_cancelled();
        if start.interrupts.iter().any(|p| p.kind == PendingKind::Interrupt) && !cancelled {
            // Answered from another process (the inbox, `agentflow answer`): continue with those
            // answers, once every question of the step has its own.
            return self.continue_answered(start, checkpointer, false).await;
        }
        // Woken before its timer is due: nothing runs and nothing is written.
        // (A thread whose step failed is run again now: what it waits for is the failed step's,
        // and no timer of it is armed.)
        if let Some(until) = crate::timer::wake::sleeping_until(&start.interrupts)
            && checkpointer.opened_as == Some(ThreadStatus::Sleeping)
            && crate::persist::now_ms() < until
            && !cancelled
        {
            let usage = checkpointer.budget.usage;
            let outcome = Outcome::Sleeping { thread: checkpointer.thread.clone(), until };
            return Ok(Run {
                outcome,
                state: start.state,
                steps: start.step,
                usage,
                usage_this_run: Default::default(),
            });
        }
        self.drive(start, Some(checkpointer), Vec::new()).await
    }

    /// Resumes a sleeping thread whose timer is due, checked under its
    /// lease; `Ok(None)` when it is not sleeping, not due, or finished.
    pub(crate) async fn resume_due(self) -> Result<Option<Run<S>>, RunError> {
        let opened = open(&self.app, self.thread.clone(), self.durability, self.lease_ttl, self.holder.clone()).await;
        let (checkpointer, start) = match opened {
            Err(RunError::Resume(crate::persist::ResumeError::Finished { .. })) => return Ok(None),
            other => other?,
        };
        let (thread, now) = (checkpointer.thread.clone(), crate::persist::now_ms());
        let store = Arc::clone(checkpointer.store());
        let due = crate::persist::blocking(&store, move |s| crate::timer::wake::still_due(s, &thread, now))
            .await?
            .map_err(PersistError::from)?;
        if !due || crate::timer::wake::wake_time(&start.interrupts).is_none_or(|at| at > now) {
            return Ok(None);
        }
        self.drive(start, Some(checkpointer), Vec::new()).await.map(Some)
    }

    fn node_set(&self, names: &[String]) -> Result<HashSet<NodeId>, RunError> {
        names
            .iter()
            .map(|n| {
                self.app
                    .graph
                    .node_id(n)
                    .ok_or_else(|| RunError::UnknownBreakpoint { node: n.clone(), nodes: self.app.graph.node_names() })
            })
            .collect()
    }

    async fn drive(
        self,
        start: Resumed<S>,
        checkpointer: Option<Checkpointer>,
        resume_values: Vec<answers::ResumeValue>,
    ) -> Result<Run<S>, RunError> {
        let graph = self.app.graph.inner.spec.name;
        let kind = if checkpointer.as_ref().is_some_and(|cp| cp.opened_as.is_some()) { "resume" } else { "start" };
        crate::metrics::run_started(graph, kind);
        let began = Instant::now();
        let result = self.drive_run(start, checkpointer, resume_values).await;
        crate::metrics::run_finished(graph, &result, began.elapsed());
        result
    }

    async fn drive_run(
        self,
        mut start: Resumed<S>,
        mut checkpointer: Option<Checkpointer>,
        resume_values: Vec<answers::ResumeValue>,
    ) -> Result<Run<S>, RunError> {
        if let (Some(cp), Some(parents)) = (checkpointer.as_mut(), &self.parent_leases) {
            cp.fence_parents(parents.clone());
        }
        // A thread's stored limits bound it; this run may only tighten them.
        let (limits, base) = match checkpointer.as_ref() {
            None => (self.limits, Default::default()),
            Some(cp) => {
                if let Some((which, stored, asked)) = self.limits.raises(&cp.budget.limits) {
                    return Err(RunError::LimitRaised { thread: cp.thread.clone(), which, stored, asked });
                }
                (self.limits.tightest(&cp.budget.limits), cp.budget.usage)
            }
        };
        let plan: &Plan<S, D> = &self.app.graph.inner;
        // A runner may lower the graph's bound, never raise it.
        let max_steps = self.max_steps.map_or(plan.default_max_steps, |n| n.min(plan.default_max_steps));
        let config = (|| {
            if max_steps == 0 {
                return Err(RunError::ZeroMaxSteps);
            }
            Ok((self.node_set(&self.before)?, self.node_set(&self.after)?))
        })();
        let (before, after) = config?;
        // The step paused before a node or inside one has passed its breakpoints before nodes
        // already; one paused after a node's step has not begun the next.
        let skip_before = start.interrupts.iter().any(|p| p.kind != PendingKind::After);
        let kept_answers = std::mem::take(&mut start.kept_answers);
        let resumed_interrupts = start.interrupts.clone();
        // The context reaches the stream for model chunks and custom values, and passes it on
        // to subgraphs, which send up every mode the stream carries.
        let outlet = self.stream.clone();
        let events = Arc::new(Events::new(self.sink, self.stream, self.parent_outlet.clone()));
        let activity_events = Arc::clone(&events);
        let gateway = &self.app.gateway;
        let stop_now = self.stop_now.unwrap_or_else(|| self.cancel.clone());
        let scope = RunScope {
            cancel: self.cancel,
            stop_now: stop_now.clone(),
            stop_grace: self.stop_grace,
            node_time_limit: self.node_time_limit,
            meter: Meter::resumed(limits, base),
            policy: Arc::clone(&gateway.policy),
            approval_ttl: gateway.approval_ttl,
            on_reject: gateway.on_reject,
            // A resumed run acts for the owner stored with the thread, not
            // for whoever resumed it (who could then approve its requests).
            owner: checkpointer.as_ref().map_or_else(|| self.owner.clone(), |cp| cp.owner().to_string()),
            shield: crate::shield::Shield::default(),
            children_running: crate::shield::Shield::default(),
            outer_shields: self.outer_shields,
            activity: Box::new(move |a| activity_events.emit(|| Event::Activity(a))),
            pause: self.pause.clone(),
            children: tokio::sync::Semaphore::new(crate::DEFAULT_PARALLEL),
            breakers: Arc::clone(&gateway.breakers),
            outlet: outlet.map(|c| c as Arc<dyn crate::stream::Outlet>).or(self.parent_outlet),
            saga_root_step: self.saga_root_step,
            probe: gateway.probe.clone(),
        };
        let metrics = crate::metrics::RunMetrics::new(plan.spec.name, plan.spec.nodes.iter().map(|n| &n.name));
        let exec = Exec {
            plan,
            deps: self.deps,
            scope,
            events,
            before,
            after,
            resume_values,
            kept_answers,
            resumed_interrupts,
            children_moved: std::sync::Mutex::new(Vec::new()),
            refused_answers: std::sync::Mutex::new(Vec::new()),
            resumed_step: start.step,
            skip_before,
            metrics,
            stop_now,
            stop_grace: self.stop_grace,
            node_time_limit: self.node_time_limit,
            pause: self.pause,
        };
        let span = tracing::info_span!("agentflow.run", graph = plan.spec.name, thread = self.thread.as_deref());
        let result = exec.run_loop(start, max_steps, self.deadline, &mut checkpointer).instrument(span).await;
        let usage = exec.scope.meter.usage();
        let mut run = match result.map_err(|e| lease_lost(e, checkpointer.as_ref())) {
            Ok(run) => run,
            // Another executor has the thread: write nothing more.
            Err(e @ RunError::LeaseLost { .. }) => return Err(e),
            Err(e) => {
                if let Some(cp) = checkpointer.as_mut() {
                    // Best effort: the store already failed once.
                    let _ = cp.finish(ThreadStatus::Failed, e.to_string(), usage).await;
                }
                return Err(e);
            }
        };
        // A run that failed on an answer of the wrong shape waits for a new answer where it was
        // answered (here or in the subgraph it was handed to): not a failure for good, and it
        // undoes nothing.
        let answer_refused = match &run.outcome {
            Outcome::Failed { node, error } if error.class == crate::error::ErrorClass::NeedsInput => {
                exec.refused_answers.lock().unwrap_or_else(|p| p.into_inner()).iter().any(|r| r == node)
            }
            _ => false,
        };
        if let Some(cp) = checkpointer.as_mut()
            && crate::saga::triggers(&run.outcome)
            && !answer_refused
            && crate::saga::has_steps(&cp.store_handle(), &cp.thread).await?
        {
            let reason = run.outcome.to_string();
            cp.finish(ThreadStatus::Compensating, format!("compensating after {reason}"), usage)
                .await
                .map_err(|e| lease_lost(e.into(), Some(cp)))?;
            let events = Arc::clone(&exec.events);
            run.outcome = compensate(&self.app, cp, self.deps, &events, reason).await?;
        }
        if let Some(cp) = checkpointer.as_mut() {
            let status = match &run.outcome {
                Outcome::Completed => ThreadStatus::Completed,
                Outcome::BudgetExhausted { .. } => ThreadStatus::BudgetExhausted,
                Outcome::Failed { .. } => ThreadStatus::Failed,
                Outcome::Cancelled => ThreadStatus::Cancelled,
                Outcome::Paused => ThreadStatus::Paused,
                Outcome::Interrupted { pending, .. } => {
                    // Woken on its own when an approval it waits for expires.
                    cp.wake_at = crate::timer::wake::wake_time(pending);
                    ThreadStatus::Interrupted
                }
                Outcome::Sleeping { until, .. } => {
                    cp.wake_at = Some(*until);
                    ThreadStatus::Sleeping
                }
                other => crate::saga::status_of(other).unwrap_or(ThreadStatus::Failed),
            };
            cp.finish(status, run.outcome.to_string(), usage).await.map_err(|e| lease_lost(e.into(), Some(cp)))?;
        }
        exec.events.emit(|| Event::Finished { outcome: run.outcome.clone(), steps: run.steps });
        Ok(run)
    }
}

impl<S: State, D: Sync> Runner<'_, S, D> {
    /// Continues the compensation of a thread left `compensating`.
    async fn compensate_only(self, start: Resumed<S>, mut cp: Checkpointer) -> Result<Run<S>, RunError> {
        // A subgraph child's compensation is fenced by its parents' leases too.
        if let Some(parents) = &self.parent_leases {
            cp.fence_parents(parents.clone());
        }
        let events = Arc::new(Events::new(self.sink, self.stream, self.parent_outlet.clone()));
        let usage = cp.budget.usage;
        // The compensation keeps the reason it started with (in the audit log).
        let reason = "resumed while compensating".to_string();
        let outcome = compensate(&self.app, &mut cp, self.deps, &events, reason).await?;
        let status = crate::saga::status_of(&outcome).unwrap_or(ThreadStatus::Compensating);
        cp.finish(status, outcome.to_string(), usage).await.map_err(|e| lease_lost(e.into(), Some(&cp)))?;
        events.emit(|| Event::Finished { outcome: outcome.clone(), steps: start.step });
        Ok(Run { outcome, state: start.state, steps: start.step, usage, usage_this_run: Default::default() })
    }
}

/// Runs the compensations of thread `cp` (see [`crate::saga`]).
async fn compensate<S: State, D: Sync>(
    app: &App<S, D>,
    cp: &mut Checkpointer,
    deps: &D,
    events: &Arc<Events<'_, S>>,
    reason: String,
) -> Result<Outcome, RunError> {
    let graph = &app.graph;
    // A subgraph child's calls are compensated with the parent's, so its tools are looked up too.
    let below = std::sync::OnceLock::new();
    let lookup = |name: &str| {
        graph.tool(name).or_else(|| {
            below.get_or_init(|| graph.tools_below_at()).iter().find(|(_, _, t)| t.name() == name).map(|(_, _, t)| *t)
        })
    };
    let activity = |a: crate::event::Activity| events.emit(|| Event::Activity(a));
    // The graph's deps as a tool sees them (`#[graph]` records how); a
    // graph built by hand passes none.
    let deps: &crate::tool::AnyDeps = match graph.inner.erase_deps {
        Some(erase) => erase(deps),
        None => &(),
    };
    // A call of the failed step cut off in an earlier run and not made again (its *started*
    // marker has no result) has an unknown outcome: record it so, before the compensation lists
    // the unknown ones, so a human is asked about it and the outcome names it.
    let seq = cp.journal().seq;
    cp.record_unknown_outcomes(seq).await.map_err(|e| lease_lost(e.into(), Some(cp)))?;
    // So is an approved call cut off mid-way that the step did not make again.
    cp.settle_cut_off_approvals(seq).await.map_err(|e| lease_lost(e.into(), Some(cp)))?;
    let compensator = crate::saga::Compensator {
        store: cp.store_handle(),
        thread: cp.thread.clone(),
        tool: &lookup,
        deps,
        activity: &activity,
        lease: cp.lease(),
        probe: app.gateway.probe.as_deref(),
    };
    let outcome = compensator.run(reason).await;
    outcome.map_err(|e| lease_lost(e.into(), Some(cp)))
}

fn resume_value_error(source: crate::persist::encode::ValueError) -> crate::persist::PersistError {
    crate::persist::PersistError::Value { what: "the resume value", source }
}

/// Opens the thread to resume. A free function, so the future of a resume
/// holds no reference to the (non-`Sync`) runner across an await.
async fn open<S: State, D>(
    app: &App<S, D>,
    thread: Option<String>,
    durability: Durability,
    lease_ttl: Duration,
    holder: Option<LeaseHolder>,
) -> Result<(Checkpointer, Resumed<S>), RunError> {
    check_ttl(lease_ttl)?;
    let (Some(thread), Some(store)) = (thread.clone(), app.store.clone()) else {
        return Err(match thread {
            None => RunError::ResumeNeedsThread,
            Some(_) => RunError::NoStore,
        });
    };
    let graph = app.graph.inner.spec.name;
    let began = Instant::now();
    let opened = Checkpointer::resume(app, store, thread, durability, lease_ttl, holder).await?;
    ::metrics::counter!(crate::metrics::RECOVERIES, "graph" => graph).increment(1);
    ::metrics::histogram!(crate::metrics::RECOVERY_SECONDS, "graph" => graph).record(began.elapsed().as_secs_f64());
    Ok(opened)
}

/// The shortest lease a run accepts: renewals every third of it must be possible.
const MIN_LEASE_TTL: Duration = Duration::from_millis(30);

fn check_ttl(ttl: Duration) -> Result<(), RunError> {
    if ttl < MIN_LEASE_TTL {
        return Err(RunError::LeaseTtlTooShort { min: MIN_LEASE_TTL, asked: ttl });
    }
    Ok(())
}

/// Refuses a new thread's id or owner that holds a NUL byte (PostgreSQL `text` cannot hold
/// one): the same on every store, before anything is written.
fn check_text(what: &'static str, value: &str) -> Result<(), RunError> {
    if value.contains('\0') {
        return Err(RunError::NulByte { what, value: value.to_string() });
    }
    Ok(())
}

/// A new thread's first commit (its input checkpoint) refused because another holder has the
/// thread is a lost lease too: a worker's claim took the lease, and it can be lost before the
/// run writes anything.
fn first_commit_lost(e: RunError, thread: &str) -> RunError {
    use agentflow_store::{CommitError, LeaseError};
    match &e {
        RunError::Persist(
            PersistError::Commit(CommitError::LeaseLost { current, .. })
            | PersistError::Lease(LeaseError::NotHeld { current, .. }),
        ) => RunError::LeaseLost { thread: thread.to_string(), holder: current.as_ref().map(|l| l.holder.clone()) },
        _ => e,
    }
}

/// A commit or renewal refused because another holder has the thread is a lost lease.
fn lease_lost(e: RunError, cp: Option<&Checkpointer>) -> RunError {
    use agentflow_store::{CommitError, LeaseError};
    let (Some(cp), RunError::Persist(p)) = (cp, &e) else { return e };
    match p {
        PersistError::Commit(CommitError::LeaseLost { current, .. })
        | PersistError::Lease(LeaseError::NotHeld { current, .. }) => cp.lease().lost(current.clone()),
        _ => e,
    }
}

/// Runs `write`, bookkeeping after a run whose result stands either way: a failure is logged
/// with `what`, not returned.
async fn best_effort<E: std::fmt::Display + Send + 'static>(
    store: &Arc<dyn agentflow_store::Store>,
    thread: &str,
    what: &'static str,
    write: impl FnOnce(&dyn agentflow_store::Store) -> Result<(), E> + Send + 'static,
) {
    match crate::persist::blocking(store, write).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(thread, error = %e, "{what}"),
        Err(e) => tracing::warn!(thread, error = %e, "{what}"),
    }
}

/// Whether a run ended waiting in `cx.interrupt` (again).
fn asks_again<S>(result: &Result<Run<S>, RunError>) -> bool {
    matches!(result, Ok(Run { outcome: Outcome::Interrupted { pending, .. }, .. })
        if pending.iter().any(|p| p.kind == PendingKind::Interrupt))
}
