//! The App's durable timers: starting a [`Scheduler`] and waking a due thread ([`App::wake`]).

use std::sync::Arc;

use super::scheduler::{Scheduler, SchedulerConfig};
use crate::app::App;
use crate::core::state::State;
use crate::durable::blocking;
use crate::outcome::{Run, RunError};

impl<S: State, D: Send + Sync + 'static> App<S, D> {
    /// Starts a [`Scheduler`] that resumes this graph's sleeping threads in
    /// its store, with the default [`SchedulerConfig`]. Must be called
    /// within a tokio runtime.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime (as [`tokio::spawn`] does).
    pub fn scheduler(&self, deps: Arc<D>) -> Scheduler {
        self.scheduler_with(deps, SchedulerConfig::default())
    }

    /// Like [`App::scheduler`], with a configuration. Without a store the
    /// scheduler has nothing to do and stops at once.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime (as [`tokio::spawn`] does).
    pub fn scheduler_with(&self, deps: Arc<D>, config: SchedulerConfig) -> Scheduler {
        Scheduler::start(self.clone(), deps, config)
    }

    /// Resumes `thread` if its timer is due, as a scheduler does: the lease
    /// is taken first, then the thread's status, timer and what it waits for
    /// are checked under it. `Ok(None)` when there is nothing to do (no
    /// timer, not due yet, it waits for a person's value, it finished, or
    /// another executor holds it).
    ///
    /// A thread of another graph in the same store (one whose stored graph
    /// description names another graph, such as a subgraph's child thread)
    /// is not this graph's to wake: `Ok(None)`, nothing logged.
    ///
    /// Checked for the app's actor ([`Operation::Resume`](crate::access::Operation::Resume)): a
    /// thread not there for it is an unknown thread. (The [`Scheduler`] wakes for the app
    /// itself, unchecked.)
    pub async fn wake(&self, thread: &str, deps: &D) -> Result<Option<Run<S>>, RunError> {
        self.runner(deps).thread(thread).resume_check().run().await?;
        self.wake_due(thread, deps).await
    }

    /// [`App::wake`] without the access check: the scheduler's.
    pub(crate) async fn wake_due(&self, thread: &str, deps: &D) -> Result<Option<Run<S>>, RunError> {
        if self.of_another_graph(thread).await {
            return Ok(None);
        }
        match self.runner(deps).thread(thread).resume_due().await {
            Err(RunError::ThreadBusy { .. }) => Ok(None),
            other => other,
        }
    }
}

impl<S: State, D> App<S, D> {
    /// Whether `thread` belongs to a graph other than this one: its
    /// fingerprint is not this graph's and the store describes that
    /// fingerprint as a graph of another name. (A thread of an older
    /// version of this graph is not: resuming it reports the change.)
    async fn of_another_graph(&self, thread: &str) -> bool {
        let Some(store) = self.setup.store.clone() else { return false };
        let (id, mine) = (thread.to_string(), self.setup.graph.fingerprint().to_string());
        let name = blocking(&store, move |s| {
            let record = s.thread(&id).ok()??;
            if record.graph_fingerprint == mine {
                return None;
            }
            let description = s.graph_description(&record.graph_fingerprint).ok()??;
            let description: serde_json::Value = serde_json::from_str(&description).ok()?;
            description.get("name").and_then(serde_json::Value::as_str).map(str::to_string)
        })
        .await
        .ok()
        .flatten();
        name.is_some_and(|name| name != self.setup.graph.name())
    }
}
