//! Custom stream values: what a node hands to a reader of the run's stream.

use std::future::Future;

use serde::Serialize;

use super::Ctx;
use crate::core::error::NodeError;
use crate::stream::StreamMode;

impl<D> Ctx<'_, D> {
    /// Hands `value` to whoever reads the run as a stream with
    /// [`StreamMode::Custom`](crate::StreamMode::Custom): progress, partial
    /// results, anything a UI shows live ([`StreamPart::Custom`](crate::StreamPart::Custom),
    /// with this node, its step and its instance).
    ///
    /// `value` is serialised to JSON at once (a value that cannot be, or
    /// nests deeper than the stored values may, is a fatal error); the
    /// returned future waits while the stream's buffer is full, so a slow
    /// reader slows the node. Without such a stream this does nothing, not
    /// even serialise. Values are not journaled: a node that runs again (a
    /// retry, a resume) emits them again.
    ///
    /// ```
    /// use agentflow::prelude::*;
    /// use agentflow::{StreamMode, StreamPart};
    /// # use serde::{Deserialize, Serialize};
    /// # #[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
    /// # struct Job { done: u32 }
    /// #[graph(state = Job, start = work)]
    /// mod job {
    ///     use super::*;
    ///     #[node(goto = [END])]
    ///     async fn work(_s: &Job, cx: &Ctx<()>) -> Result<Step<Job>, NodeError> {
    ///         for pct in [50, 100] {
    ///             cx.emit(serde_json::json!({ "progress": pct })).await?;
    ///         }
    ///         Ok(goto!(END, Job::update().done(1)))
    ///     }
    /// }
    /// # fn main() {
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let app = job::graph().app();
    /// let mut stream = app.runner(&()).stream_modes([StreamMode::Custom]).stream(Job::default());
    /// let mut progress = Vec::new();
    /// while let Some(item) = stream.next().await {
    ///     match item.part {
    ///         StreamPart::Custom { value, .. } => progress.push(value["progress"].clone()),
    ///         StreamPart::Done(run) => assert_eq!(run.unwrap().state.done, 1),
    ///         _ => {}
    ///     }
    /// }
    /// assert_eq!(progress, [50, 100]);
    /// # });
    /// # }
    /// ```
    pub fn emit<T: Serialize>(&self, value: T) -> impl Future<Output = Result<(), NodeError>> + Send + '_ {
        let outlet = self.scope.outlet.as_deref().filter(|o| o.wants(StreamMode::Custom));
        let value = outlet.map(|_| {
            crate::core::encode::to_value(&value, "value", crate::durable::MAX_JSON_DEPTH).map_err(|e| {
                NodeError::fatal(format!("node `{}` emitted a value that cannot be serialised: {e}", self.node))
            })
        });
        let origin = self.origin();
        async move {
            let (Some(outlet), Some(value)) = (outlet, value) else { return Ok(()) };
            let value = value?;
            crate::back_pressure::room(outlet).await;
            outlet.custom(origin, value);
            Ok(())
        }
    }
}
