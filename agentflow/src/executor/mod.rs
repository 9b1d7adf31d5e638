//! The executor: runs a compiled graph in super-steps.
//!
//! The model is bulk-synchronous, as in Pregel: the nodes active in step N
//! all read the state as it was after step N-1 and run concurrently; their
//! updates are merged through the reducers, in declaration order, only after
//! all of them finished, and become visible in step N+1. The next active set
//! is the union of their routes, so a node several branches route to (a join)
//! runs once.

mod outcome;
mod retry;
mod step;

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use futures_util::future::join_all;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

pub use outcome::{Budget, Outcome, Run, RunError};
pub use retry::RetryPolicy;

use crate::context::Ctx;
use crate::error::{ErrorClass, NodeError};
use crate::event::Event;
use crate::graph::{CompiledGraph, NodeId, Plan};
use crate::persist::{Checkpointer, Durability, Journal, PersistError, Resumed, ThreadStatus};
use crate::state::State;
use crate::step::Step;

type Sink<'g, S> = Box<dyn FnMut(Event<S>) + Send + 'g>;

impl<S: State, D: Sync> CompiledGraph<S, D> {
    /// Runs the graph from `input` to an [`Outcome`] with default limits.
    ///
    /// Use [`CompiledGraph::runner`] to set a deadline, a cancellation token
    /// or an event sink.
    pub async fn run(&self, input: S, deps: &D) -> Result<Run<S>, RunError> {
        self.runner(deps).run(input).await
    }

    /// A run with options: limits, cancellation, events.
    pub fn runner<'g>(&'g self, deps: &'g D) -> Runner<'g, S, D> {
        Runner {
            graph: self,
            deps,
            max_steps: None,
            deadline: None,
            cancel: CancellationToken::new(),
            sink: None,
            thread: None,
            owner: String::new(),
            durability: Durability::default(),
        }
    }
}

/// One run of a graph, configured step by step, started with [`Runner::run`].
#[must_use = "a runner does nothing until `.run(input).await`"]
pub struct Runner<'g, S: State, D> {
    graph: &'g CompiledGraph<S, D>,
    deps: &'g D,
    max_steps: Option<u32>,
    deadline: Option<Instant>,
    cancel: CancellationToken,
    sink: Option<Sink<'g, S>>,
    thread: Option<String>,
    owner: String,
    durability: Durability,
}

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

    /// When checkpoints reach the disk (default [`Durability::Sync`]).
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// Lowers the super-step bound below the graph's `max_steps`.
    pub fn max_steps(mut self, steps: u32) -> Self {
        self.max_steps = Some(steps);
        self
    }

    /// Ends the run as [`Budget::Deadline`] at this instant, even mid-step.
    pub fn deadline(mut self, at: Instant) -> Self {
        self.deadline = Some(at);
        self
    }

    /// Ends the run as [`Budget::Deadline`] after this much wall-clock time.
    pub fn timeout(self, limit: Duration) -> Self {
        self.deadline(Instant::now() + limit)
    }

    /// Cancelling `token` stops the run at the next step boundary ([`Outcome::Cancelled`]).
    pub fn cancel_token(mut self, token: CancellationToken) -> Self {
        self.cancel = token;
        self
    }

    /// Calls `sink` with every [`Event`] of the run, in order. To consume the
    /// events as a stream, send them into a channel here.
    pub fn on_event(mut self, sink: impl FnMut(Event<S>) + Send + 'g) -> Self {
        self.sink = Some(Box::new(sink));
        self
    }

    /// Runs the graph from `input` until it completes, fails, runs out of a
    /// budget or is cancelled. With [`Runner::thread`], starts that thread.
    pub async fn run(self, input: S) -> Result<Run<S>, RunError> {
        let graph = self.graph;
        let checkpointer = match (&self.thread, &graph.store) {
            (None, _) => None,
            (Some(_), None) => return Err(RunError::NoStore),
            (Some(thread), Some(store)) => Some(
                Checkpointer::start(graph, Arc::clone(store), thread.clone(), self.owner.clone(), self.durability, &input)
                    .await?,
            ),
        };
        let start = Resumed { state: input, active: vec![graph.start()], step: 0, pending: Vec::new() };
        self.drive(start, checkpointer).await
    }

    /// Continues thread [`Runner::thread`] from its last checkpoint, in this
    /// or another process. Nodes that finished in a step that then failed are
    /// not run again; their stored writes are used.
    pub async fn resume(self) -> Result<Run<S>, RunError> {
        let graph = self.graph;
        let (Some(thread), Some(store)) = (&self.thread, &graph.store) else {
            return Err(if self.thread.is_none() {
                RunError::InvalidConfig("resume needs `.thread(id)`".into())
            } else {
                RunError::NoStore
            });
        };
        let (checkpointer, start) =
            Checkpointer::resume(graph, Arc::clone(store), thread.clone(), self.durability).await?;
        self.drive(start, Some(checkpointer)).await
    }

    async fn drive(self, start: Resumed<S>, mut checkpointer: Option<Checkpointer>) -> Result<Run<S>, RunError> {
        let plan: &Plan<S, D> = &self.graph.inner;
        let max_steps = self.max_steps.unwrap_or(plan.default_max_steps);
        if max_steps == 0 {
            return Err(RunError::InvalidConfig("max_steps must be at least 1".into()));
        }
        let exec = Exec {
            plan,
            deps: self.deps,
            cancel: self.cancel,
            events: Events { enabled: self.sink.is_some(), sink: Mutex::new(self.sink) },
        };
        let span = tracing::info_span!("agentflow.run", graph = plan.spec.name, thread = self.thread.as_deref());
        let result = exec.run_loop(start, max_steps, self.deadline, &mut checkpointer).instrument(span).await;
        let run = match result {
            Ok(run) => run,
            Err(e) => {
                if let Some(cp) = checkpointer.as_mut() {
                    // Best effort: the store already failed once.
                    let _ = cp.finish(ThreadStatus::Failed, e.to_string()).await;
                }
                return Err(e);
            }
        };
        if let Some(cp) = checkpointer.as_mut() {
            let status = match &run.outcome {
                Outcome::Completed => ThreadStatus::Completed,
                Outcome::BudgetExhausted { .. } => ThreadStatus::BudgetExhausted,
                Outcome::Failed { .. } => ThreadStatus::Failed,
                Outcome::Cancelled => ThreadStatus::Cancelled,
            };
            cp.finish(status, run.outcome.to_string()).await?;
        }
        exec.events.emit(|| Event::Finished { outcome: run.outcome.clone(), steps: run.steps });
        Ok(run)
    }
}

/// What the loop and its node tasks share for the length of one run.
struct Exec<'g, S: State, D> {
    plan: &'g Plan<S, D>,
    deps: &'g D,
    cancel: CancellationToken,
    events: Events<'g, S>,
}

impl<S: State, D: Sync> Exec<'_, S, D> {
    async fn run_loop(
        &self,
        start: Resumed<S>,
        max_steps: u32,
        deadline: Option<Instant>,
        checkpointer: &mut Option<Checkpointer>,
    ) -> Result<Run<S>, RunError> {
        let Resumed { mut state, mut active, mut step, mut pending } = start;
        let mut next = Vec::new();
        let outcome = loop {
            if self.cancel.is_cancelled() {
                break Outcome::Cancelled;
            }
            if active.is_empty() {
                break Outcome::Completed;
            }
            if step >= max_steps {
                break Outcome::BudgetExhausted { which: Budget::Steps };
            }
            if deadline.is_some_and(|at| Instant::now() >= at) {
                break Outcome::BudgetExhausted { which: Budget::Deadline };
            }
            self.events.emit(|| Event::StepStarted { step, nodes: self.names(&active) });
            let journal = checkpointer.as_ref().map(|cp| Journal {
                store: Arc::clone(cp.store()),
                thread: cp.thread.clone(),
                seq: cp.seq,
            });
            let work = self.run_step(&state, &active, step, std::mem::take(&mut pending), journal.as_ref());
            let results = match deadline {
                Some(at) => match tokio::time::timeout_at(at.into(), work).await {
                    Ok(results) => results,
                    Err(_) => break Outcome::BudgetExhausted { which: Budget::Deadline },
                },
                None => work.await,
            };
            let mut done = Vec::with_capacity(results.len());
            let mut failed = None;
            for (id, result) in results {
                match result {
                    Ok(s) => done.push((id, s)),
                    Err(e) => {
                        failed.get_or_insert((id, e));
                    }
                }
            }
            if let Some((id, error)) = failed {
                if let Some(cp) = checkpointer.as_mut() {
                    cp.keep_pending(&done, |n| self.name(n)).await?;
                }
                if self.cancel.is_cancelled() {
                    break Outcome::Cancelled;
                }
                break self.failed(id, error);
            }
            if self.events.enabled {
                for (id, s) in &done {
                    self.events.emit(|| Event::NodeFinished {
                        step,
                        node: self.name(*id),
                        update: s.update.clone(),
                        next: self.names(&s.next),
                    });
                }
            }
            let delta = match checkpointer {
                Some(_) => Some(encode_updates(&done)?),
                None => None,
            };
            let ran: Vec<NodeId> = done.iter().map(|(id, _)| *id).collect();
            if let Err((id, error)) = step::apply(self.plan, &mut state, done, &mut next) {
                self.events.emit(|| Event::NodeFailed { step, node: self.name(id), error: error.clone() });
                break self.failed(id, error);
            }
            std::mem::swap(&mut active, &mut next);
            step += 1;
            if let (Some(cp), Some(delta)) = (checkpointer.as_mut(), delta) {
                let cursor = self.names(&active).into_iter().map(String::from).collect();
                let nodes = self.names(&ran).into_iter().map(String::from).collect();
                cp.commit_step(step, &state, delta, cursor, nodes).await?;
            }
        };
        Ok(Run { outcome, state, steps: step })
    }

    async fn run_step(
        &self,
        state: &S,
        active: &[NodeId],
        step: u32,
        mut pending: Vec<(NodeId, Step<S>)>,
        journal: Option<&Journal>,
    ) -> Vec<(NodeId, Result<Step<S>, NodeError>)> {
        if pending.is_empty() {
            if let [id] = active {
                return vec![(*id, self.run_node(*id, state, step, journal).await)];
            }
            return join_all(active.iter().map(|&id| async move { (id, self.run_node(id, state, step, journal).await) }))
                .await;
        }
        // Resuming a step that failed half-way: reuse what already finished.
        join_all(active.iter().map(|&id| {
            let kept = pending.iter().position(|(p, _)| *p == id).map(|i| pending.swap_remove(i).1);
            async move {
                match kept {
                    Some(step) => (id, Ok(step)),
                    None => (id, self.run_node(id, state, step, journal).await),
                }
            }
        }))
        .await
    }

    async fn run_node(
        &self,
        id: NodeId,
        state: &S,
        step: u32,
        journal: Option<&Journal>,
    ) -> Result<Step<S>, NodeError> {
        let node = &self.plan.spec.nodes[id.index()];
        let span = tracing::debug_span!("agentflow.node", node = node.name, step);
        let mut attempt = 1;
        loop {
            self.events.emit(|| Event::NodeStarted {
                step,
                node: node.name,
                attempt,
            });
            let cx = Ctx {
                deps: self.deps,
                node: node.name,
                step,
                attempt,
                cancel: &self.cancel,
                journal,
            };
            let work = AssertUnwindSafe((node.run)(state, &cx)).catch_unwind();
            let result = match node.timeout {
                Some(limit) => match tokio::time::timeout(limit, work)
                    .instrument(span.clone())
                    .await
                {
                    Ok(result) => result,
                    Err(_) => Ok(Err(NodeError::transient(format!(
                        "node `{}` timed out after {limit:?}",
                        node.name
                    )))),
                },
                None => work.instrument(span.clone()).await,
            };
            let error = match result {
                Ok(Ok(step)) => return Ok(step),
                Ok(Err(error)) => error,
                Err(panic) => NodeError::fatal(format!(
                    "node `{}` panicked: {}",
                    node.name,
                    panic_message(panic.as_ref())
                )),
            };
            let retry = error.class == ErrorClass::Transient
                && attempt < node.retry.max_attempts
                && !self.cancel.is_cancelled();
            if !retry {
                tracing::warn!(parent: &span, %error, attempt, "node failed");
                self.events.emit(|| Event::NodeFailed {
                    step,
                    node: node.name,
                    error: error.clone(),
                });
                return Err(error);
            }
            let delay = node.retry.delay(attempt, error.retry_after);
            tracing::info!(parent: &span, %error, attempt, ?delay, "retrying node");
            self.events.emit(|| Event::NodeRetrying {
                step,
                node: node.name,
                attempt,
                error: error.clone(),
                delay,
            });
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = self.cancel.cancelled() => return Err(error),
            }
            attempt += 1;
        }
    }

    fn failed(&self, id: NodeId, error: NodeError) -> Outcome {
        Outcome::Failed {
            node: self.name(id).to_string(),
            error,
        }
    }

    fn name(&self, id: NodeId) -> &'static str {
        self.plan
            .spec
            .nodes
            .get(id.index())
            .map_or("<unknown>", |n| n.name)
    }

    fn names(&self, ids: &[NodeId]) -> Vec<&'static str> {
        ids.iter().map(|id| self.name(*id)).collect()
    }
}

/// The run's event sink; emitting costs nothing when there is none.
struct Events<'g, S: State> {
    enabled: bool,
    sink: Mutex<Option<Sink<'g, S>>>,
}

impl<S: State> Events<'_, S> {
    fn emit(&self, event: impl FnOnce() -> Event<S>) {
        if !self.enabled {
            return;
        }
        // A sink that panicked poisons the lock; later events still go through.
        let mut sink = self.sink.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(sink) = sink.as_mut() {
            sink(event());
        }
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(non-string panic payload)")
}

/// Serialises one step's updates, in declaration order, as the checkpoint's delta.
fn encode_updates<S: State>(done: &[(NodeId, Step<S>)]) -> Result<Vec<Vec<u8>>, PersistError> {
    done.iter()
        .map(|(_, s)| serde_json::to_vec(&s.update).map_err(|source| PersistError::Encode { what: "an update", source }))
        .collect()
}
