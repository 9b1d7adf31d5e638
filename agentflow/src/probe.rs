//! What a crash test watches inside a run: the model calls a node makes and the journaled
//! calls whose bodies run. Set only by [`crate::testing`]; a run without a probe pays one
//! `Option` check per model call and per journaled call.

use crate::model::{ChatReply, ModelError};

/// Where a model call is made: the same place in a re-run of the node after a crash.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct CallSite {
    /// The thread (a subgraph child's own), empty without a store.
    pub(crate) thread: String,
    /// The checkpoint the node's step ran from.
    pub(crate) seq: u64,
    pub(crate) node: String,
    /// The map instance, if the node is a map worker.
    pub(crate) instance: Option<u32>,
    pub(crate) attempt: u32,
    /// The node run was handed an answer (a re-run after its `interrupt` was answered).
    pub(crate) answered: bool,
    /// The model call's place among the attempt's model calls.
    pub(crate) call: u32,
}

/// Watches a run for a crash test (see the module docs).
pub(crate) trait Probe: Send + Sync {
    /// A model call about to be made at `site`: a reply to serve instead of asking the model
    /// (the reply the uncut run got there), or `None` to ask it.
    fn model_call(&self, site: &CallSite) -> Option<Result<ChatReply, ModelError>>;

    /// The model answered the call at `site` (it was asked: `model_call` returned `None`).
    fn model_reply(&self, site: &CallSite, reply: &Result<ChatReply, ModelError>);

    /// The body of a journaled call (an effect or a tool call) is about to run, under its
    /// idempotency key; `rerunnable`: a re-run after a cut is allowed (idempotent, or a read).
    fn body_runs(&self, idempotency_key: &str, rerunnable: bool);
}
