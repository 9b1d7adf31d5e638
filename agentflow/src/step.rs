//! What a node returns: where to go next, and its partial update.

use std::borrow::Cow;

use crate::node_id::NodeId;
use crate::state::State;

/// The result of one node execution: the next node(s) and the node's update.
///
/// Build it with `goto!` inside a `#[node]` body; `#[graph]` checks every
/// target against the node's `goto = [..]` list at compile time:
///
/// ```text
/// goto!(answer)                               // one target, no update
/// goto!(answer, Ticket::update().intent(i))   // one target with an update
/// goto!([retrieve, tickets], update)          // fan-out: both run in the next step
/// goto!(END, update)                          // this branch ends
/// ```
#[derive(Debug, Clone)]
pub struct Step<S: State> {
    pub(crate) next: Cow<'static, [NodeId]>,
    pub(crate) update: S::Update,
}

impl<S: State> Step<S> {
    /// The node(s) this step routes to (empty for `END`).
    pub fn next(&self) -> &[NodeId] {
        &self.next
    }

    /// The partial update.
    pub fn update(&self) -> &S::Update {
        &self.update
    }

    /// A step restored from a stored pending write.
    pub(crate) fn restored(next: Vec<NodeId>, update: S::Update) -> Self {
        Step { next: Cow::Owned(next), update }
    }
}

/// A step to `next` with `update`: the code `#[graph]` generates for
/// `goto!`, whose targets were checked against the node's `goto` list at
/// compile time.
pub fn route<S: State>(next: &'static [NodeId], update: S::Update) -> Step<S> {
    Step { next: Cow::Borrowed(next), update }
}

/// Routes from a node: `goto!(target)`, `goto!(target, update)`,
/// `goto!([a, b], update)` (fan-out) or `goto!(END, update)`.
///
/// `#[graph]` rewrites every `goto!` in its `#[node]` bodies and checks the
/// targets. Reaching this definition means `goto!` was used elsewhere.
#[macro_export]
macro_rules! goto {
    ($($tt:tt)*) => {
        ::core::compile_error!(
            "`goto!` can only be used in the body of a `#[node]` fn inside a `#[graph]` module, \
             and not inside another macro's arguments"
        )
    };
}
