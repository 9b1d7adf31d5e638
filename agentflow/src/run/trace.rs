//! The `invoke_agent` span of a run: linked to its durable thread's trace (created with a
//! `create_thread` root span when the thread has none yet), and ended with the run's outcome.

use tracing::Span;

use crate::durable::Checkpointer;
use crate::outcome::{Outcome, Run, RunError};
use crate::telemetry::{TraceParent, parent, spans};

/// The span of one invocation of `graph`. For a durable thread (not a subgraph child, which
/// is nested in its parent's node span) with an OpenTelemetry layer installed, the span is made
/// a child of the thread's stored trace context; a thread without one gets it now, from a
/// `create_thread` root span, and `cp` writes it with its next record.
pub(super) fn invoke_span(graph: &str, cp: Option<&mut Checkpointer>, resumed: bool) -> Span {
    let span = spans::invoke_agent(graph, cp.as_ref().map(|c| c.thread.as_str()), resumed);
    let Some(cp) = cp.filter(|cp| !cp.is_child()) else { return span };
    if !parent::linkable(&span) {
        return span;
    }
    let stored = cp.trace().and_then(TraceParent::parse);
    let tp = stored.or_else(|| {
        let root = spans::create_thread(graph, &cp.thread);
        let tp = parent::root_of(&root)?;
        cp.set_trace(tp.to_string());
        Some(tp)
    });
    if let Some(tp) = tp {
        parent::link(&span, &tp);
    }
    span
}

/// Records how the invocation ended on its span.
pub(super) fn end<S>(span: &Span, result: &Result<Run<S>, RunError>) {
    if span.is_disabled() {
        return;
    }
    match result {
        Ok(run) => end_outcome(span, &run.outcome),
        Err(e) => spans::end_invoke(span, "error", Some(&error_type(e))),
    }
}

/// Records an outcome on the invocation's span (a failure with its error's class).
pub(super) fn end_outcome(span: &Span, outcome: &Outcome) {
    let (kind, error) = match outcome {
        Outcome::Completed => ("completed", None),
        Outcome::BudgetExhausted { .. } => ("budget_exhausted", None),
        Outcome::Failed { error, .. } => ("failed", Some(error.class.to_string())),
        Outcome::Cancelled => ("cancelled", None),
        Outcome::Interrupted { .. } => ("interrupted", None),
        Outcome::Compensated { .. } => ("compensated", None),
        Outcome::CompensationFailed { .. } => ("compensation_failed", Some("compensation_failed".to_string())),
        Outcome::Sleeping { .. } => ("sleeping", None),
        Outcome::Paused => ("paused", None),
    };
    spans::end_invoke(span, kind, error.as_deref());
}

/// A run error's variant, in snake case (`LeaseLost` -> `lease_lost`): its class, not its text.
fn error_type(e: &RunError) -> String {
    let debug = format!("{e:?}");
    let name: &str = debug.split(|c: char| !c.is_alphanumeric()).next().unwrap_or("error");
    let mut out = String::with_capacity(name.len() + 4);
    for (i, c) in name.chars().enumerate() {
        if c.is_uppercase() && i > 0 {
            out.push('_');
        }
        out.extend(c.to_lowercase());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_error_is_named_by_its_variant() {
        assert_eq!(error_type(&RunError::ZeroMaxSteps), "zero_max_steps");
    }
}
