//! What a node returns: where to go next, and its partial update.

use std::borrow::Cow;

use crate::core::node_id::NodeId;
use crate::core::state::State;

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
/// goto!(each(analyst, tasks), update)         // map: one `analyst` instance per task
/// ```
#[derive(Debug, Clone)]
pub struct Step<S: State> {
    pub(crate) next: Cow<'static, [NodeId]>,
    pub(crate) update: S::Update,
    /// Payloads sent to map workers with `goto!(each(worker, payloads))`.
    pub(crate) sends: Vec<Sends>,
    /// Which instance of a map worker returned this step (its payload's index).
    pub(crate) instance: Option<u32>,
}

/// The payloads of the map workers active in a step, per worker, in order.
pub(crate) type Mailbox = Vec<(NodeId, Vec<serde_json::Value>)>;

/// The payloads one `each(worker, payloads)` sends, serialised, in order.
#[derive(Debug, Clone)]
pub(crate) struct Sends {
    pub(crate) worker: NodeId,
    /// The payloads, or why one of them cannot be stored.
    pub(crate) payloads: Result<Vec<serde_json::Value>, String>,
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

    /// The payloads this step sends to map workers, per worker, in order
    /// (`None` for a payload list that could not be serialised).
    pub fn sends(&self) -> impl Iterator<Item = (NodeId, Option<&[serde_json::Value]>)> {
        self.sends.iter().map(|s| (s.worker, s.payloads.as_deref().ok()))
    }

    /// The instance of a map worker that returned this step: the index of
    /// its payload; `None` for a plain node.
    pub fn instance(&self) -> Option<u32> {
        self.instance
    }

    /// A step restored from a stored pending write.
    pub(crate) fn restored(next: Vec<NodeId>, update: S::Update, sends: Vec<Sends>, instance: Option<u32>) -> Self {
        Step { next: Cow::Owned(next), update, sends, instance }
    }
}

/// A step to `next` with `update`: the code `#[graph]` generates for
/// `goto!`, whose targets were checked against the node's `goto` list at
/// compile time.
pub fn route<S: State>(next: &'static [NodeId], update: S::Update) -> Step<S> {
    Step { next: Cow::Borrowed(next), update, sends: Vec::new(), instance: None }
}

/// `step` with one instance of `worker` per payload in the next step: the
/// code `#[graph]` generates for `each(worker, payloads)` in a `goto!`. The
/// worker and the payload type were checked at compile time.
pub fn each<S: State, T: Payload>(mut step: Step<S>, worker: NodeId, payloads: impl IntoIterator<Item = T>) -> Step<S> {
    let payloads = payloads
        .into_iter()
        .enumerate()
        .map(|(i, p)| {
            crate::core::encode::to_value(&p, "payload", crate::durable::MAX_JSON_DEPTH)
                .map_err(|e| format!("payload {i} cannot be stored: {e}"))
        })
        .collect();
    step.sends.push(Sends { worker, payloads });
    step
}

/// What a map worker's `#[payload]` type must be: stored with the step (so a
/// resume sees the same payloads), hence serializable both ways.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a map worker's payload: it needs `serde::Serialize` and `serde::Deserialize`",
    label = "the payload type of this map worker",
    note = "payloads are stored with the step so that a resume runs the same instances: \
            `#[derive(serde::Serialize, serde::Deserialize)]` on `{Self}`"
)]
pub trait Payload: serde::Serialize + serde::de::DeserializeOwned {}

#[diagnostic::do_not_recommend]
impl<T: serde::Serialize + serde::de::DeserializeOwned> Payload for T {}

/// Routes from a node: `goto!(target)`, `goto!(target, update)`,
/// `goto!([a, b], update)` (fan-out), `goto!(END, update)`, or
/// `goto!(each(worker, payloads), update)` (map: one instance of the map
/// worker `worker` per payload, see [Map-reduce](macro@crate::graph#map-reduce)).
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
