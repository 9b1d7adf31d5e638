//! What a running node can see besides the state: the dependencies, where it
//! is in the run, the run's budgets and cancellation, the effect journal, and
//! the gateway to its tools.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use crate::budget::Meter;
use crate::error::NodeError;
use crate::event::Activity;
use crate::executor::Budget;
use crate::interrupt::{Pending, PendingKind, Signal};
use crate::model::{ChatModel, ChatReply, ChatRequest};
use crate::persist::Journal;
use crate::tool::{OnReject, Policy, ToolSet};

/// The context handed to a node: `async fn n(s: &S, cx: &Ctx<D>) -> Step<S>`.
///
/// A node may take `deps: &D` instead when it needs nothing else.
pub struct Ctx<'a, D> {
    pub(crate) deps: &'a D,
    pub(crate) node: &'static str,
    pub(crate) step: u32,
    pub(crate) attempt: u32,
    pub(crate) scope: &'a RunScope<'a>,
    pub(crate) journal: Option<&'a Journal>,
    pub(crate) tools: ToolSet,
    pub(crate) may_interrupt: bool,
    pub(crate) signal: &'a Mutex<Signal>,
    pub(crate) resume: Option<&'a serde_json::Value>,
}

/// What every node of one run shares.
pub(crate) struct RunScope<'g> {
    pub(crate) cancel: CancellationToken,
    pub(crate) meter: Meter,
    pub(crate) policy: Arc<dyn Policy>,
    pub(crate) approval_ttl: Duration,
    pub(crate) on_reject: OnReject,
    pub(crate) owner: String,
    pub(crate) activity: Box<dyn Fn(Activity) + Send + Sync + 'g>,
}

impl<D> std::fmt::Debug for Ctx<'_, D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx")
            .field("node", &self.node)
            .field("step", &self.step)
            .field("attempt", &self.attempt)
            .field("thread", &self.thread())
            .finish_non_exhaustive()
    }
}

impl<'a, D> Ctx<'a, D> {
    /// The user's dependencies (models, clients, configuration).
    pub fn deps(&self) -> &'a D {
        self.deps
    }

    /// The name of the running node.
    pub fn node(&self) -> &'static str {
        self.node
    }

    /// The super-step number, from 0.
    pub fn step(&self) -> u32 {
        self.step
    }

    /// The attempt number, from 1; above 1 when the node is being retried.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The thread this run belongs to, when it is persisted.
    pub fn thread(&self) -> Option<&str> {
        self.journal.map(|j| j.thread.as_str())
    }

    /// Whether the run was cancelled. The executor stops at the next step
    /// boundary; a long node may check this (or await [`Ctx::cancelled`]) to stop early.
    pub fn is_cancelled(&self) -> bool {
        self.scope.cancel.is_cancelled()
    }

    /// Completes when the run is cancelled.
    pub async fn cancelled(&self) {
        self.scope.cancel.cancelled().await;
    }

    /// Runs a side effect at most once per (thread, checkpoint, node, `key`).
    ///
    /// With a store, the result is journaled durably before this returns; when
    /// the node runs again (a retry, a resume after a crash or an interrupt)
    /// the journaled result comes back and `effect` is not called. `effect`
    /// receives an idempotency key, stable across those re-runs, to pass on
    /// to systems that deduplicate requests. Errors are not journaled, so a
    /// failed effect runs again on retry.
    ///
    /// Without a store there is no journal: `effect` simply runs.
    pub async fn effect<T, F, Fut>(&self, key: &str, effect: F) -> Result<T, NodeError>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce(String) -> Fut,
        Fut: Future<Output = Result<T, NodeError>>,
    {
        match self.journal {
            Some(journal) => journal.run(self.node, key, effect).await,
            None => effect(format!("{}/{key}", self.node)).await,
        }
    }

    /// Pauses the run for a human, handing them `payload`; returns the value
    /// they resume with.
    ///
    /// The first time, this returns an error that ends the run as
    /// `Outcome::Interrupted` (propagate it with `?`). The state is persisted
    /// and the thread waits. `runner.resume_with(value)` runs this node again
    /// from its start, and this call then returns `value`, decoded as `R`.
    ///
    /// Only a `#[node(interrupt)]` may call it, once per run of the node.
    pub fn interrupt<P: Serialize, R: DeserializeOwned>(&self, payload: P) -> Result<R, NodeError> {
        if !self.may_interrupt {
            return Err(NodeError::fatal(format!(
                "node `{}` called `interrupt` but is not marked `#[node(interrupt)]`",
                self.node
            )));
        }
        let mut signal = self.signal.lock().unwrap_or_else(|p| p.into_inner());
        if std::mem::replace(&mut signal.interrupt_called, true) {
            return Err(NodeError::fatal(format!(
                "node `{}` called `interrupt` twice in one run; ask in two nodes instead",
                self.node
            )));
        }
        if let Some(value) = self.resume {
            return serde_json::from_value(value.clone()).map_err(|e| {
                NodeError::fatal(format!(
                    "the resume value for node `{}` does not have the shape it expects ({e}); \
                     resume again with a value of the right shape",
                    self.node
                ))
            });
        }
        let payload =
            crate::persist::encode::to_value(&payload, "payload", crate::persist::MAX_JSON_DEPTH).map_err(|e| {
                NodeError::fatal(format!("the interrupt payload of node `{}` cannot be stored: {e}", self.node))
            })?;
        signal.pause = Some(Pending { node: self.node.to_string(), kind: PendingKind::Interrupt, payload });
        Err(NodeError::needs_input(format!("node `{}` is waiting for a human", self.node)))
    }

    /// Calls a model, counted against the run's budgets: the call and its
    /// tokens are reserved first (a call past a limit is never sent) and
    /// settled with the usage the model reports.
    pub async fn chat<M: ChatModel + ?Sized>(&self, model: &M, request: &ChatRequest) -> Result<ChatReply, NodeError> {
        let reserve = match self.scope.meter.begin_model_call(request.max_output_tokens) {
            Ok(reserve) => reserve,
            Err(which) => return Err(self.exhausted(which)),
        };
        match model.chat(request).await {
            Ok(reply) => {
                self.scope.meter.end_model_call(reserve, reply.usage);
                (self.scope.activity)(Activity::ModelCall {
                    node: self.node,
                    model: model.name().to_string(),
                    tool_calls: reply.tool_calls.len(),
                    usage: reply.usage,
                });
                if self.scope.meter.tokens_exhausted() {
                    return Err(self.exhausted(Budget::Tokens));
                }
                Ok(reply)
            }
            Err(e) => {
                self.scope.meter.abort_model_call(reserve);
                Err(e.into())
            }
        }
    }

    /// Records that a budget ran out; the run ends as `BudgetExhausted`.
    pub(crate) fn exhausted(&self, which: Budget) -> NodeError {
        let mut signal = self.signal.lock().unwrap_or_else(|p| p.into_inner());
        signal.exhausted.get_or_insert(which);
        NodeError::fatal(format!("the run's `{which}` budget is exhausted"))
    }

    /// Records a pause for a human's decision on an approval.
    pub(crate) fn pause_for_approval(&self, payload: serde_json::Value) -> NodeError {
        let mut signal = self.signal.lock().unwrap_or_else(|p| p.into_inner());
        signal.pause = Some(Pending { node: self.node.to_string(), kind: PendingKind::Approval, payload });
        NodeError::needs_input(format!("node `{}` is waiting for an approval", self.node))
    }
}
