//! The super-step loop of one run.
//!
//! Bulk-synchronous, as in Pregel: the nodes active in step N all read the
//! state as it was after step N-1 and run concurrently; their updates are
//! merged through the reducers, in declaration order, only after all of them
//! finished, and become visible in step N+1.

use std::collections::HashSet;
use std::pin::pin;
use std::sync::Arc;
use std::time::Instant;

use futures_util::future::join_all;

use super::events::Events;
use super::step;
use crate::core::budget::Budget;
use crate::core::error::{ErrorClass, NodeError};
use crate::core::state::State;
use crate::core::step::{Mailbox, Step};
use crate::ctx::RunScope;
use crate::durable::{Checkpointer, FinishedWrites, Journal, PersistError, Resumed};
use crate::event::Event;
use crate::graph::{NodeId, Plan};
use crate::in_flight::{shielded_stop, shielded_timeout};
use crate::interrupt::{KeptAnswer, Pending, PendingKind};
use crate::outcome::{Outcome, Run, RunError};
use crate::stream::{StreamMode, StreamPart};

/// A step's results, sorted by how each node run ended.
struct Sorted {
    /// The first failure, in declaration order.
    failed: Option<(NodeId, NodeError)>,
    /// What the paused runs wait for.
    interrupts: Vec<Pending>,
    /// What the paused runs' own `interrupt` returned before they paused.
    kept: Vec<KeptAnswer>,
    /// The first budget a run exhausted.
    exhausted: Option<Budget>,
    /// Every run that did not finish (failed, paused or out of budget).
    halted: Vec<NodeId>,
}

/// Why a node did not produce a step.
pub(crate) enum Halt {
    Error(NodeError),
    /// Paused for a human, keeping what the node's own `interrupt` returned before that.
    Pause(Pending, Option<KeptAnswer>),
    Budget(Budget),
}

/// A run's static breakpoints: the nodes it pauses before, and after.
pub(crate) struct Breaks {
    pub(crate) before: HashSet<NodeId>,
    pub(crate) after: HashSet<NodeId>,
}

/// What the loop and its node tasks share for the length of one run.
pub(crate) struct Exec<'g, S: State, D> {
    pub(crate) plan: &'g Plan<S, D>,
    pub(crate) deps: &'g D,
    pub(crate) scope: RunScope<'g>,
    pub(crate) events: Arc<Events<'g, S>>,
    /// Static breakpoints, if any (boxed: most runs have none).
    pub(crate) breaks: Option<Box<Breaks>>,
    /// The values a human resumed with, each for the node (and map instance) whose question it
    /// answers. Like `kept_answers`, they belong to the step the run resumed at
    /// (`resumed_step`): a later step that runs the same node again asks anew.
    pub(crate) resume_values: Vec<super::answers::ResumeValue>,
    /// What the paused nodes' own `interrupt` returned before their step paused.
    pub(crate) kept_answers: Vec<KeptAnswer>,
    /// What the thread waited for when this run resumed it (at `resumed_step`).
    pub(crate) resumed_interrupts: Vec<Pending>,
    /// Nodes whose subgraph took the resume value in a run that then halted.
    pub(crate) children_moved: std::sync::Mutex<Vec<NodeId>>,
    /// The nodes whose failure came from a refused resume value (see `Signal::refused_resume`):
    /// the thread waits for a new answer where it was answered, so such a failure undoes
    /// nothing.
    pub(crate) refused_answers: std::sync::Mutex<Vec<&'static str>>,
    pub(crate) resumed_step: u32,
    /// Resuming a step that paused before its nodes or inside one: do not stop
    /// at its breakpoints before nodes again.
    pub(crate) skip_before: bool,
    pub(crate) metrics: crate::metrics::RunMetrics,
    /// Cancelled before the cancel token when the stop is a pause.
    pub(crate) pause: tokio_util::sync::CancellationToken,
    /// Drops the running step's nodes when cancelled (see `Runner::stop_now_token`).
    pub(crate) stop_now: tokio_util::sync::CancellationToken,
    /// How long a stop inside a step waits for a journaled effect in flight.
    pub(crate) stop_grace: std::time::Duration,
    /// The time limit of a node attempt without a `timeout` of its own.
    pub(crate) node_time_limit: Option<std::time::Duration>,
}

impl<S: State, D: Sync> Exec<'_, S, D> {
    /// Runs steps until the run ends. Not an `async fn`, which would keep a second copy of
    /// its arguments in the future every run in flight holds.
    #[expect(clippy::manual_async_fn, reason = "an async fn keeps a second copy of its arguments")]
    pub(crate) fn run_loop(
        &self,
        start: Box<Resumed<S>>,
        max_steps: u32,
        deadline: Option<Instant>,
        checkpointer: &mut Option<Box<Checkpointer>>,
    ) -> impl Future<Output = Result<Run<S>, RunError>> {
        async move {
            let Resumed { mut state, mut active, mut step, mut pending, mut payloads, .. } = *start;
            let mut next = Vec::new();
            let mut next_payloads = Mailbox::new();
            // A step's results, and the steps of the nodes that finished: kept from step to step,
            // so a step allocates neither.
            let mut results = Vec::new();
            let mut done = Vec::new();
            let mut last_step_end: Option<Instant> = None;
            let mut skip_before = self.skip_before;
            let outcome = loop {
                // A run whose last step committed has completed (that commit recorded the thread
                // `completed`): a cancel or pause that came meanwhile finds no step boundary left to
                // stop at, and must not mark a finished thread stopped (nor start its compensations).
                if active.is_empty() {
                    break Outcome::Completed;
                }
                if self.scope.cancel.is_cancelled() {
                    break self.stopped();
                }
                if step >= max_steps {
                    break Outcome::BudgetExhausted { which: Budget::Steps };
                }
                if deadline.is_some_and(|at| Instant::now() >= at) {
                    break Outcome::BudgetExhausted { which: Budget::Deadline };
                }
                if !std::mem::take(&mut skip_before) {
                    let stops = self.breakpoints(&active, PendingKind::Before);
                    if !stops.is_empty() {
                        break Box::pin(self.pause(checkpointer, &[], stops, None)).await?;
                    }
                }
                self.events.room().await;
                // Nothing renews the lease between steps (a stream read slowly stops the run there):
                // make sure it is still this run's before the step's nodes run.
                if let Some(cp) = checkpointer.as_ref() {
                    Box::pin(cp.lease().check_before_step()).await?;
                }
                self.events.emit(|| Event::StepStarted { step, nodes: self.names(&active) });
                // In memory, a step begins when the one before it ended (its clock read serves
                // both); a durable run reads the clock again after its lease check.
                let step_began = last_step_end.take().filter(|_| checkpointer.is_none()).unwrap_or_else(Instant::now);
                // Boxed (as the keeper): an in-memory run's future does not carry room for them.
                let journal = checkpointer.as_deref().map(|cp| Box::new(cp.journal()));
                // Only a step that runs several nodes or map instances keeps writes as they finish: a
                // plain step's one write goes with its commit.
                let several = active.len() > 1 || !payloads.is_empty();
                let keeper =
                    checkpointer.as_deref().filter(|_| several).and_then(Checkpointer::finished_writes).map(Box::new);
                // The step's futures are pinned where they are built (they are large, and each move
                // copies them), in a block that ends before the checkpointer is borrowed again.
                {
                    // The nodes' spans name it their parent: instrumenting the step's future would
                    // move it.
                    let step_span = crate::telemetry::spans::step(step);
                    let work = pin!(self.run_step(
                        &state,
                        &active,
                        &payloads,
                        (step, &step_span),
                        std::mem::take(&mut pending),
                        journal.as_deref(),
                        keeper.as_deref(),
                        step_began,
                        &mut results,
                    ));
                    // The lease is renewed while the step runs; losing it drops the
                    // nodes' futures and ends the run before anything is committed.
                    let lease = checkpointer.as_deref().map(Checkpointer::lease);
                    let work = pin!(async {
                        match lease {
                            Some(lease) => tokio::select! {
                                biased;
                                ran = work => ran.map_err(RunError::from),
                                // Boxed: an in-memory run's step does not carry the renewals.
                                lost = Box::pin(lease.keep_alive()) => Err(lost.into()),
                            },
                            None => work.await.map_err(RunError::from),
                        }
                    });
                    // A stop reaches the running nodes: they are dropped at their next await, an
                    // effect in flight let finish first (for up to the grace).
                    let stop = pin!(self.stop_now.cancelled());
                    let shields = [&self.scope.shield, &self.scope.children_running];
                    let work = pin!(shielded_stop(stop, self.stop_grace, &shields, work));
                    let ran = match deadline {
                        // An effect in flight when the deadline falls finishes and is journaled first.
                        // Boxed: a run without a deadline does not carry its timer.
                        Some(at) => match Box::pin(shielded_timeout(at.into(), &self.scope.shield, work)).await {
                            Ok(ran) => ran,
                            // A stop asked meanwhile wins, as over a budget within the step.
                            Err(_) if self.scope.cancel.is_cancelled() => break self.stopped(),
                            Err(_) => break Outcome::BudgetExhausted { which: Budget::Deadline },
                        },
                        None => work.await,
                    };
                    match ran {
                        Ok(ran) => ran?,
                        Err(_) => {
                            tracing::info!(parent: None, step, "the run was stopped inside the step; its nodes were dropped");
                            break self.stopped();
                        }
                    }
                };
                let Sorted { failed, interrupts, kept, exhausted, halted } = self.sort_results(&mut results, &mut done);
                // A step that ends for a failure or a budget keeps no new answer (a value another node
                // refused must reach every node that waits for a value when the thread resumes), and
                // leaves those kept before as they were. What the thread waits for is brought up to
                // date with what the step's nodes did.
                if (exhausted.is_some() || failed.is_some())
                    && let Some(cp) = checkpointer.as_mut()
                {
                    let waiting = self.waiting_after_stop(step, &halted, &interrupts, &kept);
                    Box::pin(cp.keep_pending(&done, waiting.as_deref(), None, |n| self.name(n))).await?;
                }
                // A stop asked while the step ran wins over how it ended, a budget that ran out or a
                // node that failed: the thread ends stopped as asked (a cancel is not left behind as
                // a resumable failure).
                if (exhausted.is_some() || failed.is_some()) && self.scope.cancel.is_cancelled() {
                    break self.stopped();
                }
                if let Some(which) = exhausted {
                    break Outcome::BudgetExhausted { which };
                }
                if let Some((id, error)) = failed {
                    break self.failed(id, error);
                }
                if !interrupts.is_empty() {
                    break Box::pin(self.pause(checkpointer, &done, interrupts, Some(kept))).await?;
                }
                self.emit_finished(step, &done).await;
                let delta = match checkpointer {
                    Some(_) => Some(encode_updates(&done)?),
                    None => None,
                };
                // Only a checkpoint and breakpoints after nodes ask which nodes ran.
                let mut ran: Vec<NodeId> =
                    if checkpointer.is_some() || self.breaks.as_ref().is_some_and(|b| !b.after.is_empty()) {
                        done.iter().map(|(id, _)| *id).collect()
                    } else {
                        Vec::new()
                    };
                // A map worker's instances are contiguous: name the worker once.
                ran.dedup();
                // The event log's `step` event names each update's node and instance.
                let updates: Vec<(&str, Option<u32>)> = match checkpointer {
                    Some(cp) if cp.logs_events() => done.iter().map(|(id, s)| (self.name(*id), s.instance)).collect(),
                    _ => Vec::new(),
                };
                if let Err((id, error)) = step::apply(self.plan, &mut state, &mut done, &mut next, &mut next_payloads) {
                    self.events.emit(|| Event::NodeFailed {
                        step,
                        node: self.name(id),
                        instance: None,
                        error: error.clone(),
                    });
                    if self.scope.cancel.is_cancelled() {
                        break self.stopped();
                    }
                    break self.failed(id, error);
                }
                std::mem::swap(&mut active, &mut next);
                std::mem::swap(&mut payloads, &mut next_payloads);
                step += 1;
                if let (Some(cp), Some(delta)) = (checkpointer.as_mut(), delta) {
                    let cursor = self.names(&active).into_iter().map(String::from).collect();
                    let nodes = self.names(&ran).into_iter().map(String::from).collect();
                    let sends = self.stored_payloads(&payloads);
                    // Boxed, as the other durable calls of the loop: an in-memory run does not carry them.
                    let usage = self.scope.meter.usage();
                    Box::pin(cp.commit_step(step, &state, delta, cursor, nodes, &updates, sends, usage)).await?;
                }
                let step_end = Instant::now();
                self.metrics.step(step_end.duration_since(step_began));
                last_step_end = Some(step_end);
                if self.events.streams(StreamMode::Values) {
                    self.events.room().await;
                    self.events.push(StreamMode::Values, || StreamPart::Values { step, state: state.clone() });
                }
                let stops = self.breakpoints(&ran, PendingKind::After);
                if !stops.is_empty() && !active.is_empty() {
                    break Box::pin(self.pause(checkpointer, &[], stops, None)).await?;
                }
            };
            let (usage, usage_this_run) = (self.scope.meter.usage(), self.scope.meter.usage_this_run());
            Ok(Run { outcome, state, steps: step, usage, usage_this_run })
        }
    }

    /// Splits a step's results into finished nodes, the first failure (in
    /// declaration order), interrupts and the answers the paused nodes keep.
    /// `results` is emptied; `done` receives the finished runs with their steps.
    fn sort_results(
        &self,
        results: &mut Vec<(NodeId, Result<Step<S>, Halt>)>,
        done: &mut Vec<(NodeId, Step<S>)>,
    ) -> Sorted {
        done.clear();
        let mut sorted =
            Sorted { failed: None, interrupts: Vec::new(), kept: Vec::new(), exhausted: None, halted: Vec::new() };
        for (id, result) in results.drain(..) {
            let halt = match result {
                Ok(s) => {
                    done.push((id, s));
                    continue;
                }
                Err(halt) => halt,
            };
            sorted.halted.push(id);
            match halt {
                // The first failure in declaration order, but a failure for good before one a person
                // unblocks (an answer of the wrong shape): the run then fails for good.
                Halt::Error(e) => match &sorted.failed {
                    Some((_, first)) if first.class == ErrorClass::NeedsInput && e.class != ErrorClass::NeedsInput => {
                        sorted.failed = Some((id, e));
                    }
                    Some(_) => {}
                    None => sorted.failed = Some((id, e)),
                },
                Halt::Pause(pending, answer) => {
                    sorted.interrupts.push(pending);
                    sorted.kept.extend(answer);
                }
                Halt::Budget(which) => {
                    sorted.exhausted.get_or_insert(which);
                }
            }
        }
        sorted
    }

    /// What the thread waits for once step `step` stopped failed or out of budget, to store in
    /// place of what it waited for when this run resumed it; `None` leaves the stored list as it
    /// is (nothing changed, the run resumed at a checkpoint that recorded nothing to wait for,
    /// or the step is a later one, whose checkpoint holds none).
    /// - A node all of whose runs finished (every instance, for a map worker) waits for nothing.
    /// - A node that paused waits for what it paused on now, unless it took the resume value in
    ///   this step: the step keeps no new answer, so its re-run asks its question again.
    /// - A node whose subgraph took the resume value waits for nothing recorded here: the child
    ///   moved on in its own thread, and the node's re-run finds out what it waits for now. (A
    ///   child that refused the value for its shape did not take it: it still waits where it
    ///   asked, and so does the node.)
    /// - Any other node that did not finish will do again what it waited for.
    /// - A breakpoint stays as it was: the resumed step has passed it.
    fn waiting_after_stop(
        &self,
        step: u32,
        halted: &[NodeId],
        paused: &[Pending],
        kept: &[KeptAnswer],
    ) -> Option<Vec<Pending>> {
        if step != self.resumed_step || self.resumed_interrupts.is_empty() {
            return None;
        }
        let finished = |node: &str| !halted.iter().any(|id| self.name(*id) == node);
        let moved = self.children_moved.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let child_moved = |node: &str| moved.iter().any(|id| self.name(*id) == node);
        // Paused after taking the resume value (not a kept answer, which the failure leaves).
        let asks_again = |node: &str| {
            kept.iter().any(|k| {
                k.node == node
                    && !self.kept_answers.iter().any(|old| {
                        !old.stale && old.node == k.node && old.instance == k.instance && old.value == k.value
                    })
            })
        };
        let breakpoint = |p: &Pending| matches!(p.kind, PendingKind::Before | PendingKind::After);
        let mut waiting: Vec<Pending> = Vec::new();
        for p in &self.resumed_interrupts {
            let paused_anew = paused.iter().any(|n| n.node == p.node) && !asks_again(&p.node);
            if breakpoint(p) || !(finished(&p.node) || paused_anew || child_moved(&p.node)) {
                waiting.push(p.clone());
            }
        }
        for p in paused {
            if !asks_again(&p.node) || !self.resumed_interrupts.iter().any(|old| old.node == p.node) {
                waiting.push(p.clone());
            }
        }
        (waiting != self.resumed_interrupts).then_some(waiting)
    }

    fn breakpoints(&self, nodes: &[NodeId], kind: PendingKind) -> Vec<Pending> {
        let Some(breaks) = &self.breaks else { return Vec::new() };
        let set = if kind == PendingKind::Before { &breaks.before } else { &breaks.after };
        nodes
            .iter()
            .filter(|n| set.contains(n))
            .map(|n| Pending {
                node: self.name(*n).to_string(),
                instance: None,
                kind,
                payload: serde_json::Value::Null,
            })
            .collect()
    }

    /// Ends the run as interrupted; the nodes that finished in the step keep
    /// their writes, so only the paused ones run again on resume. `kept`
    /// replaces the kept answers (`None` for a breakpoint: no node ran).
    async fn pause(
        &self,
        checkpointer: &mut Option<Box<Checkpointer>>,
        done: &[(NodeId, Step<S>)],
        pending: Vec<Pending>,
        kept: Option<Vec<KeptAnswer>>,
    ) -> Result<Outcome, PersistError> {
        let thread = match checkpointer.as_mut() {
            Some(cp) => {
                cp.keep_pending(done, Some(&pending), kept.as_deref(), |n| self.name(n)).await?;
                Some(cp.thread.clone())
            }
            None => None,
        };
        // Only timers to wait for: the thread sleeps until the last is due
        // (waking earlier would only put the others back to sleep).
        if let Some(thread) = &thread
            && let Some(until) = crate::durable::wake::sleeping_until(&pending)
        {
            return Ok(Outcome::Sleeping { thread: thread.clone(), until: crate::outcome::unix_ms::to_time(until) });
        }
        Ok(Outcome::Interrupted { thread, pending })
    }

    /// The events and stream items of the nodes whose updates the step merges.
    async fn emit_finished(&self, step: u32, done: &[(NodeId, Step<S>)]) {
        let updates = self.events.streams(StreamMode::Updates);
        if !self.events.enabled && !updates {
            return;
        }
        for (id, s) in done {
            self.events.room().await;
            let node = self.name(*id);
            self.events.emit(|| Event::NodeFinished {
                step,
                node,
                instance: s.instance,
                update: s.update.clone(),
                next: self.names(&s.next),
            });
            self.events.push(StreamMode::Updates, || StreamPart::Update {
                step,
                node,
                instance: s.instance,
                update: s.update.clone(),
            });
        }
    }

    /// Runs the step's active nodes (a map worker one instance per payload). With a `keeper`
    /// (a durable run under `Durability::Sync`), each node of a step that runs several, and
    /// each map instance, has its write committed as soon as it finishes; a failure to keep
    /// one (the run lost its lease) ends the step.
    #[allow(clippy::too_many_arguments)]
    async fn run_step(
        &self,
        state: &S,
        active: &[NodeId],
        payloads: &Mailbox,
        (step, step_span): (u32, &tracing::Span),
        mut pending: Vec<(NodeId, Step<S>)>,
        journal: Option<&Journal>,
        keeper: Option<&FinishedWrites>,
        began: Instant,
        out: &mut Vec<(NodeId, Result<Step<S>, Halt>)>,
    ) -> Result<(), PersistError> {
        if pending.is_empty() && payloads.is_empty() {
            if let [id] = active {
                out.push((*id, self.run_node(*id, state, (step, step_span), journal, None, Some(began)).await));
                return Ok(());
            }
            if keeper.is_none() {
                out.extend(
                    join_all(active.iter().map(|&id| async move {
                        (id, self.run_node(id, state, (step, step_span), journal, None, Some(began)).await)
                    }))
                    .await,
                );
                return Ok(());
            }
        }
        // A map worker runs one instance per payload; a step resumed half-way
        // reuses what already finished (per node, or per instance).
        let groups = join_all(active.iter().map(|&id| {
            let items = payloads.iter().find(|(w, _)| *w == id).map(|(_, p)| p.as_slice());
            let kept: Vec<Step<S>> = pending.extract_if(.., |(p, _)| *p == id).map(|(_, s)| s).collect();
            let keeper = keeper.filter(|_| active.len() > 1 || items.is_some());
            async move {
                match items {
                    None => {
                        let result = match kept.into_iter().next() {
                            Some(step) => Ok(step),
                            None => {
                                let result =
                                    self.run_node(id, state, (step, step_span), journal, None, Some(began)).await;
                                if let (Some(keeper), Ok(done)) = (keeper, &result) {
                                    keeper.keep(vec![keeper.write(self.name(id), done, |n| self.name(n))?]).await?;
                                }
                                result
                            }
                        };
                        Ok(vec![(id, result)])
                    }
                    Some(items) => self.run_instances(id, items, kept, state, (step, step_span), journal, keeper).await,
                }
            }
        }))
        .await;
        for group in groups {
            out.extend(group?);
        }
        Ok(())
    }

    /// How a run stopped from outside ends: paused if the stop was a pause, else cancelled.
    fn stopped(&self) -> Outcome {
        if self.pause.is_cancelled() { Outcome::Paused } else { Outcome::Cancelled }
    }

    fn failed(&self, id: NodeId, error: NodeError) -> Outcome {
        Outcome::Failed { node: self.name(id).to_string(), error }
    }

    pub(crate) fn name(&self, id: NodeId) -> &'static str {
        self.plan.spec.nodes.get(id.index()).map_or("<unknown>", |n| n.name)
    }

    fn names(&self, ids: &[NodeId]) -> Vec<&'static str> {
        ids.iter().map(|id| self.name(*id)).collect()
    }

    /// The payloads of the next step's workers, as the checkpoint stores them.
    fn stored_payloads(&self, payloads: &Mailbox) -> Vec<(String, Vec<serde_json::Value>)> {
        payloads.iter().map(|(w, p)| (self.name(*w).to_string(), p.clone())).collect()
    }
}

/// Serialises one step's updates, in declaration order, as the checkpoint's delta.
fn encode_updates<S: State>(done: &[(NodeId, Step<S>)]) -> Result<Vec<Vec<u8>>, PersistError> {
    done.iter()
        .map(|(_, s)| crate::durable::state_document(&s.update, "an update", crate::durable::Allowed::of::<S>()))
        .collect()
}
