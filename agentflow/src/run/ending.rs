//! How a run's end is read and recorded: a refused commit read as a lost lease, a run that
//! asked again, bookkeeping whose failure is logged, not returned, and the run's end counted.

use std::sync::Arc;
use std::time::Duration;

use crate::durable::{Checkpointer, PersistError};
use crate::interrupt::PendingKind;
use crate::metrics::{BUDGETS_EXHAUSTED, RUN_SECONDS, RUNS_FINISHED};
use crate::outcome::{Outcome, Run, RunError};

/// A commit or renewal refused because another holder has the thread is a lost lease.
pub(super) fn lease_lost(e: RunError, cp: Option<&Checkpointer>) -> RunError {
    use agentflow_store::{CommitError, LeaseError};
    let (Some(cp), RunError::Persist(p)) = (cp, &e) else { return e };
    match p {
        PersistError::Commit(CommitError::LeaseLost { current, .. })
        | PersistError::Lease(LeaseError::NotHeld { current, .. }) => cp.lease().lost(current.clone()).into(),
        _ => e,
    }
}

/// Runs `write`, bookkeeping after a run whose result stands either way: a failure is logged
/// with `what`, not returned.
pub(super) async fn best_effort<E: std::fmt::Display + Send + 'static>(
    store: &Arc<dyn agentflow_store::Store>,
    thread: &str,
    what: &'static str,
    write: impl FnOnce(&dyn agentflow_store::Store) -> Result<(), E> + Send + 'static,
) {
    match crate::durable::blocking(store, write).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(parent: None, thread, error = %e, "{what}"),
        Err(e) => tracing::warn!(parent: None, thread, error = %e, "{what}"),
    }
}

/// Whether a run ended waiting in `cx.interrupt` (again).
pub(super) fn asks_again<S>(result: &Result<Run<S>, RunError>) -> bool {
    matches!(result, Ok(Run { outcome: Outcome::Interrupted { pending, .. }, .. })
        if pending.iter().any(|p| p.kind == PendingKind::Interrupt))
}

/// Records a run's end in the metrics (`Err` counts as outcome `error`).
pub(super) fn run_finished<S>(graph: &'static str, result: &Result<Run<S>, RunError>, took: Duration) {
    let outcome = match result {
        Ok(run) => {
            if let Outcome::BudgetExhausted { which } = &run.outcome {
                ::metrics::counter!(BUDGETS_EXHAUSTED, "graph" => graph, "budget" => which.to_string()).increment(1);
            }
            run.outcome.label()
        }
        Err(_) => "error",
    };
    ::metrics::counter!(RUNS_FINISHED, "graph" => graph, "outcome" => outcome).increment(1);
    ::metrics::histogram!(RUN_SECONDS, "graph" => graph, "outcome" => outcome).record(took.as_secs_f64());
}
