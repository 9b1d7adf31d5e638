//! A claimed follow-up run ([`App::submit_follow_up`](crate::App::submit_follow_up)): its
//! worker restarts the thread (the follow-up's input applied, the cursor at the start node;
//! see `durable::restart`) under the claim's lease, then runs it as a resume.

use std::sync::Arc;

use agentflow_store::{CommitError, LeaseError, QueuedRun, RunControl};

use super::job::{End, Job, Then};
use crate::core::state::State;
use crate::durable::restart::{Restart, Restarted, follow_up_mark, restart_thread};
use crate::durable::{HistoryError, PersistError, blocking};

impl<S: State, D: Send + Sync + 'static> Job<S, D> {
    /// Runs follow-up `claim`: a cancel asked before it started drops it (the thread is left as
    /// it is); otherwise the thread is restarted, once (a claim after a worker died past the
    /// restart finds it made), and resumed. A pause asked before it started stops it at its
    /// first step boundary, after the restart.
    pub(super) async fn run_follow_up(&self, claim: &QueuedRun) -> (End, Then) {
        match claim.control {
            Some(RunControl::Cancel) => {
                self.stops.ask(RunControl::Cancel);
                return (End::Controlled, Then::Remove);
            }
            Some(control) => self.stops.ask(control),
            None => {}
        }
        if let Err(end) = self.restart(claim).await {
            return end;
        }
        let result = self.runner(claim, self.stops.token.clone(), self.stops.pause.clone()).resume().await;
        self.ended(claim, result).await
    }

    /// Writes the restart of follow-up `claim`'s thread, fenced by the claim's lease; `Err`
    /// with how the run ends when it cannot.
    async fn restart(&self, claim: &QueuedRun) -> Result<(), (End, Then)> {
        let thread = claim.thread.clone();
        let Some(update) = claim.input.clone() else {
            tracing::error!(thread = %thread, "a follow-up run without an input leaves the queue");
            return Err((End::Failed, Then::Remove));
        };
        if let Err(e) = serde_json::from_slice::<S::Update>(&update) {
            tracing::error!(thread = %thread, error = %e, "the follow-up's input does not decode as the graph's update");
            return Err((End::Failed, Then::Remove));
        }
        let graph = &self.app.setup.graph;
        // A thread of another graph (or of another version of this one, which a resume refuses
        // too) is left as it is.
        let (t, fingerprint) = (thread.clone(), graph.fingerprint().to_string());
        let other =
            blocking(&self.store, move |s| s.thread(&t).map(|r| r.filter(|r| r.graph_fingerprint != fingerprint)));
        if let Ok(Ok(Some(record))) = other.await {
            tracing::warn!(
                thread = %thread, stored = %record.graph_fingerprint,
                "a follow-up run of a thread of another graph (or version) leaves the queue; the thread is left as it is"
            );
            return Err((End::Failed, Then::Remove));
        }
        let start = graph.node_name(graph.start());
        let mark = follow_up_mark(claim.enqueued_at, &update);
        let (store, holder, fork_from) = (Arc::clone(&self.store), self.holder.clone(), claim.fork_from);
        let restarted = blocking(&self.store, move |_| {
            let restart = Restart { thread: &thread, holder: &holder, update, fork_from, start, actor: &holder, mark };
            restart_thread(&store, restart)
        })
        .await;
        match restarted {
            Ok(Ok(Restarted::Now(seq) | Restarted::Already(seq))) => {
                tracing::debug!(thread = %claim.thread, seq, "a follow-up run restarted its thread");
                Ok(())
            }
            Ok(Err(HistoryError::Persist(
                PersistError::Commit(CommitError::LeaseLost { .. }) | PersistError::Lease(LeaseError::NotHeld { .. }),
            ))) => Err((End::Lost, Then::Nothing)),
            Ok(Err(HistoryError::Persist(e @ (PersistError::Commit(_) | PersistError::Read(_))))) => {
                Err(self.store_failure(claim, &e))
            }
            Err(e) => Err(self.store_failure(claim, &e)),
            Ok(Err(e)) => {
                tracing::warn!(thread = %claim.thread, error = %e, "a follow-up run could not restart its thread; it leaves the queue");
                Err((End::Failed, Then::Remove))
            }
        }
    }
}
