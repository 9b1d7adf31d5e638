//! Durable timers: a node that sleeps until a wake time, holding nothing in memory.

use std::time::Duration;

use super::Ctx;
use crate::core::error::NodeError;
use crate::durable::{Entry, decode_effect};
use crate::interrupt::{Pending, PendingKind};

impl<D> Ctx<'_, D> {
    /// Waits `duration` on a durable timer, holding nothing in memory.
    ///
    /// The first time, the wake time (now + `duration`) is journaled for this
    /// node run and this returns an error that ends the run as
    /// [`Outcome::Sleeping`](crate::Outcome::Sleeping) (propagate it with
    /// `?`): the state is persisted, the thread's status is `sleeping` and its
    /// timer is stored and indexed. Resumed at or after the wake time (by a
    /// [`Scheduler`](crate::timer::Scheduler), or by hand), the node runs
    /// again from its start and this call returns `Ok(())`. The wake time is
    /// fixed by the first call: a re-run reads it back, it does not extend it.
    /// Resuming earlier runs nothing and reports the same `Sleeping` outcome.
    ///
    /// After the wake the node re-runs **from its start**, not from the `sleep`
    /// call: everything before the `sleep` runs again. Put effects (sending a
    /// message, calling a service) after the `sleep`, or in another node the
    /// sleeping one routes to; an effect that must come before it goes through
    /// [`Ctx::effect`], so its recorded result is replayed instead of running twice.
    ///
    /// Only a `#[node(sleep)]` may call it. A node may sleep more than once
    /// (each call has its own timer, in call order).
    ///
    /// Without a store there is nothing to resume: the node simply waits
    /// in memory (and returns early, with an error, if the run is cancelled).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use agentflow::prelude::*;
    /// use agentflow::RedbStore;
    /// # use serde::{Deserialize, Serialize};
    /// # #[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
    /// # struct Reminder { sent: bool }
    /// #[graph(state = Reminder, start = remind)]
    /// mod reminder {
    ///     use super::*;
    ///     #[node(goto = [END], sleep)]
    ///     async fn remind(_s: &Reminder, cx: &Ctx<()>) -> Result<Step<Reminder>, NodeError> {
    ///         cx.sleep(Duration::from_secs(1)).await?; // the run ends here the first time
    ///         Ok(goto!(END, Reminder::update().sent(true)))
    ///     }
    /// }
    /// # fn main() -> Result<(), agentflow::Error> {
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let app = reminder::graph().app().store(Arc::new(RedbStore::in_memory()?));
    /// let run = app.runner(&()).thread("r-1").run(Reminder::default()).await?;
    /// let Outcome::Sleeping { until, .. } = run.outcome else { panic!("{:?}", run.outcome) };
    /// assert!(!run.state.sent);
    ///
    /// // A scheduler resumes the thread once it is due; wait for it to report that.
    /// let scheduler = app.scheduler(Arc::new(()));
    /// let woken = scheduler.subscribe().wait_for("r-1").await.expect("the scheduler runs");
    /// assert_eq!(woken.result, Ok(Outcome::Completed));
    /// assert!(std::time::SystemTime::now() >= until);
    /// assert!(app.state("r-1")?.unwrap().state.sent);
    /// scheduler.shutdown().await;
    /// # Ok(())
    /// # })
    /// # }
    /// ```
    pub async fn sleep(&self, duration: Duration) -> Result<(), NodeError> {
        let ms = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
        self.sleep_at(|now| now.saturating_add(ms)).await
    }

    /// Like [`Ctx::sleep`], until the wall-clock time `at` (a time in the
    /// past returns at once).
    pub async fn sleep_until(&self, at: std::time::SystemTime) -> Result<(), NodeError> {
        let ms =
            at.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        self.sleep_at(|_| ms).await
    }

    async fn sleep_at(&self, wake: impl FnOnce(u64) -> u64) -> Result<(), NodeError> {
        if !self.may_sleep {
            return Err(NodeError::fatal(format!(
                "node `{}` called `sleep` but is not marked `#[node(sleep)]`",
                self.node
            )));
        }
        let n = {
            let mut signal = self.signal.lock().unwrap_or_else(|p| p.into_inner());
            signal.sleeps += 1;
            signal.sleeps
        };
        let now = crate::durable::now_ms();
        let Some(journal) = self.journal else {
            let left = Duration::from_millis(wake(now).saturating_sub(now));
            return tokio::select! {
                () = tokio::time::sleep(left) => Ok(()),
                () = self.scope.cancel.cancelled() => {
                    Err(NodeError::fatal(format!("node `{}`: the run was cancelled while it slept", self.node)))
                }
            };
        };
        // The wake time is journaled by the first call and read back by every re-run.
        let key = format!("{}{n}", crate::durable::wake::SLEEP_KEY);
        let until: u64 = match journal.entry(self.node, &key).await? {
            Entry::Recorded(bytes) => decode_effect(&bytes, &key)?,
            _ => journal.record(self.node, &key, wake(now)).await?,
        };
        if crate::durable::now_ms() >= until {
            return Ok(());
        }
        let mut signal = self.signal.lock().unwrap_or_else(|p| p.into_inner());
        let payload = serde_json::json!({ "until": until });
        signal.pause =
            Some(Pending { node: self.node.to_string(), instance: self.instance(), kind: PendingKind::Sleep, payload });
        Err(NodeError::needs_input(format!("node `{}` sleeps until unix ms {until}", self.node)))
    }
}
