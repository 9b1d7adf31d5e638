//! One node run inside a step: its attempts under the retry policy and the time limit, its
//! pauses for a human, and a panic turned into a failure.

use std::panic::AssertUnwindSafe;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

use futures_util::FutureExt;
use tracing::Instrument;

use super::exec::{Exec, Halt};
use crate::core::error::{ErrorClass, NodeError};
use crate::core::state::State;
use crate::core::step::Step;
use crate::ctx::Ctx;
use crate::durable::Journal;
use crate::event::Event;
use crate::graph::NodeId;
use crate::in_flight::{Shield, shielded_stop};
use crate::interrupt::{KeptAnswer, Signal};

impl<S: State, D: Sync> Exec<'_, S, D> {
    pub(super) async fn run_node(
        &self,
        id: NodeId,
        state: &S,
        (step, step_span): (u32, &tracing::Span),
        journal: Option<&Journal>,
        payload: Option<(u32, &serde_json::Value)>,
        step_began: Option<Instant>,
    ) -> Result<Step<S>, Halt> {
        let Some(node) = self.plan.spec.nodes.get(id.index()) else {
            return Err(Halt::Error(NodeError::fatal(format!(
                "node {id} is not part of graph `{}`",
                self.plan.spec.name
            ))));
        };
        let instance = payload.map(|(i, _)| i);
        let span = crate::telemetry::spans::node(step_span, node.name, step, instance);
        // With contents captured on spans: the values they must not show (one atomic load else).
        let masked = if crate::telemetry::capture::enabled() { sensitive_values(state) } else { Vec::new() };
        let resumed = step == self.resumed_step;
        let resume = super::answers::resume_value_for(&self.resume_values, node.name, instance).filter(|_| resumed);
        let kept_answer = self.kept_answers.iter().find(|k| resumed && k.node == node.name && k.instance == instance);
        let mut attempt = 1;
        // The span shows the number of attempts once, when the node run ends however it ends (an
        // attribute recorded twice would be exported twice).
        let attempts = AttemptsOnSpan { span: &span, last: AtomicU32::new(1) };
        loop {
            self.events.room().await;
            self.events.emit(|| Event::NodeStarted { step, node: node.name, instance, attempt });
            attempts.last.store(attempt, Ordering::Relaxed);
            // The attempt, in a block: what it held (its context, its signal, its result) is gone
            // before a retry waits, so the node's future does not carry both at once.
            let (error, delay) = {
                // A run's time limit is for the nodes' own work: a node that runs subgraphs waits for
                // their steps, which have the limit themselves.
                let limit = node.timeout.or(self.node_time_limit.filter(|_| node.subgraphs.is_empty()));
                // A limit too far ahead for the clock to represent sets none.
                let until = limit.and_then(|limit| Some((limit, tokio::time::Instant::now().checked_add(limit)?)));
                // Only an attempt with a time limit has effects to wait for when it runs out.
                let shield = until.map(|_| Shield::default());
                let signal = Mutex::new(Signal { shield: shield.clone(), ..Signal::default() });
                let cx = Ctx {
                    deps: self.deps,
                    node: node.name,
                    step,
                    attempt,
                    scope: &self.scope,
                    journal,
                    tools: node.tools,
                    subgraphs: node.subgraphs,
                    may_interrupt: node.interrupt,
                    may_sleep: node.sleep,
                    signal: &signal,
                    resume,
                    kept_answer,
                    payload,
                    masked: &masked,
                };
                let work = AssertUnwindSafe((node.run)(state, &cx)).catch_unwind();
                // A node the step starts at once began with the step (one clock read less per node);
                // a retry, or a map instance that waited for a slot, reads its own.
                let attempt_began = step_began.filter(|_| attempt == 1).unwrap_or_else(Instant::now);
                let result = match (until, &shield) {
                    // An effect in flight when the timeout falls finishes and is journaled first, for
                    // up to the grace: one that hangs does not hold the node for good.
                    // Boxed: a node without a time limit (most, in memory) does not carry the timer.
                    (Some((limit, until)), Some(shield)) => {
                        let shields = [shield];
                        let limited = async move {
                            let stop = std::pin::pin!(tokio::time::sleep_until(until));
                            shielded_stop(stop, self.stop_grace, &shields, work).await
                        };
                        match Box::pin(limited.instrument(span.clone())).await {
                            Ok(result) => result,
                            Err(_) => {
                                Ok(Err(NodeError::transient(format!("node `{}` timed out after {limit:?}", node.name))))
                            }
                        }
                    }
                    _ => work.instrument(span.clone()).await,
                };
                self.metrics.node(id.index(), attempt_began.elapsed());
                // A budget that ran out in this attempt ends the run as `BudgetExhausted`, even when the
                // node caught the refusal and returned a step: a run that hit a budget never completes.
                let (exhausted, child_took_resume) = {
                    let signal = signal.lock().unwrap_or_else(|p| p.into_inner());
                    (signal.exhausted, signal.child_took_resume)
                };
                if let (Some(which), Ok(Ok(_))) = (exhausted, &result) {
                    tracing::info!(parent: None, node = node.name, step, budget = %which, "budget exhausted; the node's step is not applied");
                    if child_took_resume {
                        self.children_moved.lock().unwrap_or_else(|p| p.into_inner()).push(id);
                    }
                    return Err(Halt::Budget(which));
                }
                let error = match result {
                    Ok(Ok(mut out)) => {
                        out.instance = instance;
                        // A payload that cannot be stored fails its sender, where the list was built.
                        return match out.sends.iter().find_map(|s| s.payloads.as_ref().err().map(|e| (s.worker, e))) {
                            None => Ok(out),
                            Some((worker, e)) => {
                                let error = NodeError::fatal(format!(
                                    "node `{}` sent payloads to `{}`: {e}",
                                    node.name,
                                    self.name(worker)
                                ));
                                self.events.emit(|| Event::NodeFailed {
                                    step,
                                    node: node.name,
                                    instance,
                                    error: error.clone(),
                                });
                                Err(Halt::Error(error))
                            }
                        };
                    }
                    Ok(Err(error)) => error,
                    Err(panic) => {
                        NodeError::fatal(format!("node `{}` panicked: {}", node.name, panic_message(panic.as_ref())))
                    }
                };
                let signal = signal.into_inner().unwrap_or_else(|p| p.into_inner());
                if signal.child_took_resume {
                    self.children_moved.lock().unwrap_or_else(|p| p.into_inner()).push(id);
                }
                if let Some(which) = signal.exhausted {
                    tracing::info!(parent: None, node = node.name, step, budget = %which, "budget exhausted");
                    return Err(Halt::Budget(which));
                }
                if error.class == ErrorClass::NeedsInput
                    && let Some(pending) = signal.pause
                {
                    tracing::info!(parent: None, node = node.name, step, "node paused for a human");
                    let kept = signal.answered.map(|value| KeptAnswer {
                        node: node.name.to_string(),
                        instance,
                        value,
                        stale: false,
                    });
                    return Err(Halt::Pause(pending, kept));
                }
                let retry = error.class == ErrorClass::Transient
                    && attempt < node.retry.max_attempts
                    && !self.scope.cancel.is_cancelled();
                if !retry {
                    if signal.refused_resume && error.class == ErrorClass::NeedsInput {
                        self.refused_answers.lock().unwrap_or_else(|p| p.into_inner()).push(node.name);
                    }
                    // Root events (no parent span): a log line, never a span event carrying the message.
                    tracing::warn!(parent: None, node = node.name, step, attempt, class = %error.class, %error, "node failed");
                    crate::telemetry::spans::failed(&span, error.class);
                    self.events.emit(|| Event::NodeFailed { step, node: node.name, instance, error: error.clone() });
                    return Err(Halt::Error(error));
                }
                let delay = node.retry.delay(attempt, error.retry_after);
                tracing::info!(parent: None, node = node.name, step, attempt, class = %error.class, %error, ?delay, "retrying node");
                self.metrics.retry(id.index());
                self.events.emit(|| Event::NodeRetrying {
                    step,
                    node: node.name,
                    instance,
                    attempt,
                    error: error.clone(),
                    delay,
                });
                (error, delay)
            };
            // Boxed: only a retry waits here, and the future of every node does not carry the timer.
            let cancelled = Box::pin(async {
                tokio::select! {
                    () = tokio::time::sleep(delay) => false,
                    () = self.scope.cancel.cancelled() => true,
                }
            });
            if cancelled.await {
                return Err(Halt::Error(error));
            }
            attempt += 1;
        }
    }
}

/// Records a node run's number of attempts on its span when the run ends.
struct AttemptsOnSpan<'a> {
    span: &'a tracing::Span,
    last: AtomicU32,
}

impl Drop for AttemptsOnSpan<'_> {
    fn drop(&mut self) {
        if !self.span.is_disabled() {
            self.span.record(crate::telemetry::names::ATTEMPT, i64::from(self.last.load(Ordering::Relaxed)));
        }
    }
}

/// The string values of `state`'s personal and credential fields (none when it has none).
fn sensitive_values<S: State>(state: &S) -> Vec<String> {
    if !S::FIELDS.iter().any(|f| f.personal || f.credential) {
        return Vec::new();
    }
    serde_json::to_value(state)
        .map(|json| crate::telemetry::content::sensitive_values(&json, S::FIELDS))
        .unwrap_or_default()
}

pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(non-string panic payload)")
}
