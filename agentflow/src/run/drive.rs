//! Driving a run to its end: the super-step loop set up, the run's end recorded, and the
//! compensations of a thread that ends in a failure.

use std::sync::Arc;
use std::time::Instant;

use futures_util::FutureExt;
use tracing::Instrument;

use super::Setup;
use super::answers;
use super::events::{Events, hidden_fields};
use super::exec::Exec;
use crate::core::budget::Meter;
use crate::core::state::State;
use crate::ctx::RunScope;
use crate::durable::{Checkpointer, Resumed, ThreadStatus};
use crate::event::Event;
use crate::graph::Plan;
use crate::interrupt::PendingKind;
use crate::outcome::{Outcome, Run, RunError};

use super::Runner;
use super::ending::lease_lost;

impl<'g, S: State, D: Sync> Runner<'g, S, D> {
    /// Drives the run to its end and records it in the metrics. Neither this nor `drive_run`
    /// is an `async fn`: an `async fn` keeps a second copy of its arguments (the runner, the
    /// checkpointer) in its future, and every in-flight run pays for it in memory.
    pub(super) fn drive(
        self: Box<Self>,
        start: Resumed<S>,
        mut checkpointer: Option<Checkpointer>,
        resume_values: Vec<answers::ResumeValue>,
    ) -> impl Future<Output = Result<Run<S>, RunError>> {
        let graph = self.setup.graph.inner.spec.name;
        let resumed = checkpointer.as_ref().is_some_and(|cp| cp.opened_as.is_some());
        let kind = if resumed { "resume" } else { "start" };
        ::metrics::counter!(crate::metrics::RUNS_STARTED, "graph" => graph, "kind" => kind).increment(1);
        let began = Instant::now();
        // The whole invocation, compensations and the thread's last record included.
        let span = super::trace::invoke_span(graph, checkpointer.as_mut(), resumed);
        // Boxed, so the future holds a pointer instead of the whole checkpointer, which an
        // in-memory run does not have (and the runner comes boxed for the same reason).
        self.drive_run(Box::new(start), checkpointer.map(Box::new), resume_values).instrument(span.clone()).map(
            move |result| {
                super::trace::end(&span, &result);
                super::ending::run_finished(graph, &result, began.elapsed());
                result
            },
        )
    }

    #[expect(clippy::manual_async_fn, reason = "an async fn keeps a second copy of its arguments")]
    fn drive_run(
        self: Box<Self>,
        mut start: Box<Resumed<S>>,
        mut checkpointer: Option<Box<Checkpointer>>,
        resume_values: Vec<answers::ResumeValue>,
    ) -> impl Future<Output = Result<Run<S>, RunError>> {
        async move {
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
            let plan: &Plan<S, D> = &self.setup.graph.inner;
            // A runner may lower the graph's bound, never raise it.
            let max_steps = self.max_steps.map_or(plan.default_max_steps, |n| n.min(plan.default_max_steps));
            let config = (|| {
                if max_steps == 0 {
                    return Err(RunError::ZeroMaxSteps);
                }
                let Some(names) = &self.breakpoints else { return Ok(None) };
                let (before, after) = (self.node_set(&names.before)?, self.node_set(&names.after)?);
                Ok(Some(Box::new(super::exec::Breaks { before, after })))
            })();
            let breaks = config?;
            // The step paused before a node or inside one has passed its breakpoints before nodes
            // already; one paused after a node's step has not begun the next.
            let skip_before = start.interrupts.iter().any(|p| p.kind != PendingKind::After);
            let kept_answers = std::mem::take(&mut start.kept_answers);
            let resumed_interrupts = start.interrupts.clone();
            // The context reaches the stream for model chunks and custom values, and passes it on
            // to subgraphs, which send up every mode the stream carries.
            let outlet = self.stream.clone();
            let events = Arc::new(Events::new(
                self.sink,
                self.stream,
                self.parent_outlet.clone(),
                hidden_fields::<S>(&self.setup.access),
            ));
            let activity_events = Arc::clone(&events);
            let gateway = &self.setup.gateway;
            let stop_now = self.stop_now.unwrap_or_else(|| self.cancel.clone());
            let scope = RunScope {
                cancel: self.cancel,
                stop_now: stop_now.clone(),
                stop_grace: self.stop_grace,
                node_time_limit: self.node_time_limit,
                meter: Meter::resumed(limits, base),
                gateway: Arc::clone(gateway),
                // A resumed run acts for the owner stored with the thread, not
                // for whoever resumed it (who could then approve its requests).
                owner: checkpointer.as_ref().map_or_else(|| self.owner.clone(), |cp| cp.owner().to_string()),
                shield: crate::in_flight::Shield::default(),
                children_running: crate::in_flight::Shield::default(),
                outer_shields: self.outer_shields,
                activity: Box::new(move |a| activity_events.emit(|| Event::Activity(a))),
                pause: self.pause.clone(),
                children: tokio::sync::Semaphore::new(crate::DEFAULT_PARALLEL),
                outlet: outlet.map(|c| c as Arc<dyn crate::stream::Outlet>).or(self.parent_outlet),
                saga_root_step: self.saga_root_step,
                event_log: self.setup.event_log,
            };
            let metrics = crate::metrics::RunMetrics::new(plan.spec.name, plan.spec.nodes.iter().map(|n| &n.name));
            let exec = Exec {
                plan,
                deps: self.deps,
                scope,
                events,
                breaks,
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
            let result = exec.run_loop(start, max_steps, self.deadline, &mut checkpointer).await;
            let run = match checkpointer {
                None => result?,
                // Boxed: what a durable run's end awaits is not carried by the future of every run.
                Some(mut cp) => Box::pin(settle(&self.setup, self.deps, &exec, result, &mut cp)).await?,
            };
            exec.events.emit(|| Event::Finished { outcome: run.outcome.clone(), steps: run.steps });
            Ok(run)
        }
    }
}

/// A durable run's end: a failure recorded, the compensations of a thread that ends in one
/// run, the thread's status written.
async fn settle<S: State, D: Sync>(
    setup: &Setup<S, D>,
    deps: &D,
    exec: &Exec<'_, S, D>,
    result: Result<Run<S>, RunError>,
    cp: &mut Checkpointer,
) -> Result<Run<S>, RunError> {
    let usage = exec.scope.meter.usage();
    let mut run = match result.map_err(|e| lease_lost(e, Some(&*cp))) {
        Ok(run) => run,
        // Another executor has the thread: write nothing more.
        Err(e @ RunError::LeaseLost { .. }) => return Err(e),
        Err(e) => {
            // Best effort: the store already failed once.
            let _ = cp.finish(ThreadStatus::Failed, e.to_string(), usage).await;
            return Err(e);
        }
    };
    // A run that failed on an answer of the wrong shape waits for a new answer where it was
    // answered (here or in the subgraph it was handed to): not a failure for good, and it
    // undoes nothing.
    let answer_refused = match &run.outcome {
        Outcome::Failed { node, error } if error.class == crate::core::error::ErrorClass::NeedsInput => {
            exec.refused_answers.lock().unwrap_or_else(|p| p.into_inner()).iter().any(|r| r == node)
        }
        _ => false,
    };
    if crate::saga::triggers(&run.outcome)
        && !answer_refused
        && crate::saga::has_steps(&cp.store_handle(), &cp.thread).await?
    {
        let reason = run.outcome.to_string();
        cp.start_compensating(format!("compensating after {reason}"), usage)
            .await
            .map_err(|e| lease_lost(e.into(), Some(&*cp)))?;
        run.outcome = Box::pin(compensate(setup, cp, deps, &exec.events, reason)).await?;
    }
    let status = match &run.outcome {
        Outcome::Completed => ThreadStatus::Completed,
        Outcome::BudgetExhausted { .. } => ThreadStatus::BudgetExhausted,
        Outcome::Failed { .. } => ThreadStatus::Failed,
        Outcome::Cancelled => ThreadStatus::Cancelled,
        Outcome::Paused => ThreadStatus::Paused,
        Outcome::Interrupted { pending, .. } => {
            // Woken on its own when an approval it waits for expires.
            cp.wake_at = crate::durable::wake::wake_time(pending);
            cp.parked_on(pending);
            ThreadStatus::Interrupted
        }
        Outcome::Sleeping { until, .. } => {
            cp.wake_at = Some(crate::outcome::unix_ms::of(*until));
            ThreadStatus::Sleeping
        }
        other => crate::saga::status_of(other).unwrap_or(ThreadStatus::Failed),
    };
    cp.finish(status, run.outcome.to_string(), usage).await.map_err(|e| lease_lost(e.into(), Some(&*cp)))?;
    Ok(run)
}

impl<S: State, D: Sync> Runner<'_, S, D> {
    /// Continues the compensation of a thread left `compensating`.
    pub(super) async fn compensate_only(self, start: Resumed<S>, mut cp: Checkpointer) -> Result<Run<S>, RunError> {
        let span = super::trace::invoke_span(self.setup.graph.inner.spec.name, Some(&mut cp), true);
        let result = self.compensate_only_in(start, cp).instrument(span.clone()).await;
        super::trace::end(&span, &result);
        result
    }

    async fn compensate_only_in(self, start: Resumed<S>, mut cp: Checkpointer) -> Result<Run<S>, RunError> {
        // A subgraph child's compensation is fenced by its parents' leases too.
        if let Some(parents) = &self.parent_leases {
            cp.fence_parents(parents.clone());
        }
        let events = Arc::new(Events::new(
            self.sink,
            self.stream,
            self.parent_outlet.clone(),
            hidden_fields::<S>(&self.setup.access),
        ));
        let usage = cp.budget.usage;
        // The compensation keeps the reason it started with (in the audit log).
        let reason = "resumed while compensating".to_string();
        let outcome = compensate(&self.setup, &mut cp, self.deps, &events, reason).await?;
        let status = crate::saga::status_of(&outcome).unwrap_or(ThreadStatus::Compensating);
        cp.finish(status, outcome.to_string(), usage).await.map_err(|e| lease_lost(e.into(), Some(&cp)))?;
        events.emit(|| Event::Finished { outcome: outcome.clone(), steps: start.step });
        Ok(Run { outcome, state: start.state, steps: start.step, usage, usage_this_run: Default::default() })
    }
}

/// Runs the compensations of thread `cp` (see [`crate::saga`]).
async fn compensate<S: State, D: Sync>(
    setup: &Setup<S, D>,
    cp: &mut Checkpointer,
    deps: &D,
    events: &Arc<Events<'_, S>>,
    reason: String,
) -> Result<Outcome, RunError> {
    let graph = &setup.graph;
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
    cp.record_unknown_outcomes(seq).await.map_err(|e| lease_lost(e.into(), Some(&*cp)))?;
    // So is an approved call cut off mid-way that the step did not make again.
    cp.settle_cut_off_approvals(seq).await.map_err(|e| lease_lost(e.into(), Some(&*cp)))?;
    let compensator = crate::saga::Compensator {
        store: cp.store_handle(),
        thread: cp.thread.clone(),
        tool: &lookup,
        deps,
        activity: &activity,
        lease: cp.lease(),
        probe: setup.gateway.probe.as_deref(),
        remote: setup.gateway.remote.as_deref(),
    };
    let outcome = compensator.run(reason).await;
    outcome.map_err(|e| lease_lost(e.into(), Some(&*cp)))
}
