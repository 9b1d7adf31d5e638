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
use std::sync::Mutex;
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
}

impl<'g, S: State, D: Sync> Runner<'g, S, D> {
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
    /// budget or is cancelled.
    pub async fn run(self, input: S) -> Result<Run<S>, RunError> {
        let plan: &Plan<S, D> = &self.graph.inner;
        let max_steps = self.max_steps.unwrap_or(plan.default_max_steps);
        if max_steps == 0 {
            return Err(RunError::InvalidConfig(
                "max_steps must be at least 1".into(),
            ));
        }
        let exec = Exec {
            plan,
            deps: self.deps,
            cancel: self.cancel,
            events: Events {
                enabled: self.sink.is_some(),
                sink: Mutex::new(self.sink),
            },
        };
        let span = tracing::info_span!("agentflow.run", graph = plan.spec.name);
        let run = exec
            .run_loop(input, max_steps, self.deadline)
            .instrument(span)
            .await;
        exec.events.emit(|| Event::Finished {
            outcome: run.outcome.clone(),
            steps: run.steps,
        });
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
    async fn run_loop(&self, mut state: S, max_steps: u32, deadline: Option<Instant>) -> Run<S> {
        let mut active = vec![self.plan.spec.start];
        let mut next = Vec::new();
        let mut step = 0u32;
        let outcome = loop {
            if self.cancel.is_cancelled() {
                break Outcome::Cancelled;
            }
            if active.is_empty() {
                break Outcome::Completed;
            }
            if step >= max_steps {
                break Outcome::BudgetExhausted {
                    which: Budget::Steps,
                };
            }
            if deadline.is_some_and(|at| Instant::now() >= at) {
                break Outcome::BudgetExhausted {
                    which: Budget::Deadline,
                };
            }
            self.events.emit(|| Event::StepStarted {
                step,
                nodes: self.names(&active),
            });
            let work = self.run_step(&state, &active, step);
            let results = match deadline {
                Some(at) => match tokio::time::timeout_at(at.into(), work).await {
                    Ok(results) => results,
                    Err(_) => {
                        break Outcome::BudgetExhausted {
                            which: Budget::Deadline,
                        };
                    }
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
                        next: self.names(s.next),
                    });
                }
            }
            if let Err((id, error)) = step::apply(self.plan, &mut state, done, &mut next) {
                self.events.emit(|| Event::NodeFailed {
                    step,
                    node: self.name(id),
                    error: error.clone(),
                });
                break self.failed(id, error);
            }
            std::mem::swap(&mut active, &mut next);
            step += 1;
        };
        Run {
            outcome,
            state,
            steps: step,
        }
    }

    async fn run_step(
        &self,
        state: &S,
        active: &[NodeId],
        step: u32,
    ) -> Vec<(NodeId, Result<Step<S>, NodeError>)> {
        if let [id] = active {
            return vec![(*id, self.run_node(*id, state, step).await)];
        }
        join_all(
            active
                .iter()
                .map(|&id| async move { (id, self.run_node(id, state, step).await) }),
        )
        .await
    }

    async fn run_node(&self, id: NodeId, state: &S, step: u32) -> Result<Step<S>, NodeError> {
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
