//! Running a subgraph: a compiled graph run as a child of a node, with its own
//! checkpoints under the parent's thread (see [the module docs](crate::subgraph)). What this
//! node's context decides is here (which graphs it may run, what the child's end means for
//! it); the child's run itself is started by the runner, the graph's side of [`ChildGraph`].

use std::future::Future;
use std::pin::Pin;

use serde_json::{Value, json};

use super::Ctx;
use crate::core::error::{ErrorClass, NodeError};
use crate::core::state::State;
use crate::interrupt::{Pending, PendingKind};
use crate::outcome::{Outcome, Run, RunError};

/// A graph a node can run as its child with [`Ctx::subgraph`]: a
/// [`CompiledGraph`](crate::CompiledGraph) whose nodes take the deps `D` of the node's own
/// graph (a subgraph shares its parent's deps). Implemented by `CompiledGraph` only.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot run as a subgraph of a node whose deps are `{D}`",
    label = "a subgraph takes its parent's deps: this graph's nodes take other deps",
    note = "give both graphs the same deps type (`deps = ..` in both `#[graph(..)]`), or run this graph on its own: `graph().app().runner(&its_deps)`"
)]
pub trait ChildGraph<D>: sealed::Sealed + Send {
    /// The child's state: what it starts from and what [`Ctx::subgraph`] returns.
    type State: State;

    /// The child graph's name, as nodes list it in `subgraphs = [..]`.
    fn name(&self) -> &'static str;

    /// Runs the child from `input` under the node `cx` runs (what [`Ctx::subgraph`] does
    /// once it checked the call).
    #[doc(hidden)]
    fn run_under<'a>(
        self,
        cx: &'a Ctx<'_, D>,
        input: Self::State,
    ) -> Pin<Box<dyn Future<Output = Result<Self::State, NodeError>> + Send + 'a>>
    where
        D: Sync;
}

/// Only the crate's graphs run as children.
pub(crate) mod sealed {
    /// Implemented by [`CompiledGraph`](crate::CompiledGraph).
    pub trait Sealed {}
}

impl<D: Sync> Ctx<'_, D> {
    /// Runs `child` from `input` as a child of this node and returns its
    /// final state. See [the module docs](crate::subgraph) for what is
    /// durable, how pauses and budgets pass between parent and child, and
    /// what the macro checks (the node must list `child` in its
    /// `subgraphs = [..]`; the child takes this graph's deps).
    pub fn subgraph<'s, S2, G>(
        &'s self,
        child: G,
        input: S2,
    ) -> Pin<Box<dyn Future<Output = Result<S2, NodeError>> + Send + 's>>
    where
        S2: State,
        G: ChildGraph<D, State = S2> + 's,
    {
        let name = child.name();
        // The macro checks the calls it sees; a call made elsewhere (a helper
        // fn handed the context) is checked here.
        if !self.subgraphs.contains(&name) {
            let error = NodeError::fatal(format!(
                "node `{}` ran subgraph `{name}`, which is not in its `subgraphs` list; list it: \
                 `#[node(.., subgraphs = [{name}])]`",
                self.node
            ));
            return Box::pin(std::future::ready(Err(error)));
        }
        child.run_under(self, input)
    }

    /// The number of this node run's next subgraph call (0 for its first), which keys the
    /// child's thread.
    pub(crate) fn next_subgraph_call(&self) -> u32 {
        let mut signal = self.signal.lock().unwrap_or_else(|p| p.into_inner());
        let i = signal.subgraph_calls;
        signal.subgraph_calls += 1;
        i
    }

    /// What the child's run means for this node.
    pub(crate) fn child_result<S2: State>(
        &self,
        name: &str,
        thread: Option<&str>,
        run: Result<Run<S2>, RunError>,
    ) -> Result<S2, NodeError> {
        let run = match run {
            Ok(run) => run,
            Err(e @ RunError::ThreadBusy { .. }) => {
                return Err(NodeError::transient(format!("subgraph `{name}`: {e}")));
            }
            Err(e) => return Err(NodeError::fatal(format!("subgraph `{name}`: {e}"))),
        };
        self.scope.meter.charge(&run.usage_this_run);
        match run.outcome {
            Outcome::Completed => Ok(run.state),
            Outcome::Interrupted { pending, .. } => match thread {
                Some(thread) => Err(self.wait_on_child(name, thread, &pending)),
                None => Err(NodeError::fatal(format!(
                    "subgraph `{name}` paused for a human, but this run has no store to pause in; \
                     run the parent on a thread (`.thread(..)` with a store)"
                ))),
            },
            Outcome::Sleeping { until, thread } => {
                let until = crate::outcome::unix_ms::of(until);
                let payload = json!({ "until": until, "subgraph": name, "thread": thread });
                let mut signal = self.signal.lock().unwrap_or_else(|p| p.into_inner());
                signal.pause = Some(Pending {
                    node: self.node.to_string(),
                    instance: self.instance(),
                    kind: PendingKind::Sleep,
                    payload,
                });
                Err(NodeError::needs_input(format!("node `{}` waits on its subgraph `{name}`, asleep", self.node)))
            }
            // The child's step bound is its own, not a budget it shares with the parent: a plain
            // failure of the node (which may catch it), not the parent's budget running out.
            Outcome::BudgetExhausted { which: crate::Budget::Steps } => Err(NodeError::fatal(format!(
                "subgraph `{name}` reached its step bound (`max_steps`) without finishing"
            ))),
            Outcome::BudgetExhausted { which } => Err(self.exhausted(which)),
            // The parent is being paused too; it resumes the child where it stopped.
            Outcome::Paused => Err(NodeError::fatal(format!("subgraph `{name}` was paused with its parent"))),
            // A child that failed where a person answers again (an answer of the wrong shape)
            // fails its parent's node the same way: the parent waits too, nothing undone.
            Outcome::Failed { node, error } => {
                let class =
                    if error.class == ErrorClass::NeedsInput { ErrorClass::NeedsInput } else { ErrorClass::Fatal };
                Err(NodeError::new(class, format!("subgraph `{name}` failed in node `{node}`: {}", error.message)))
            }
            other => Err(NodeError::fatal(format!("subgraph `{name}` ended: {other}"))),
        }
    }

    /// Pauses this node on the child's first pending item, its path
    /// prefixed with this node.
    pub(crate) fn wait_on_child(&self, name: &str, thread: &str, pending: &[Pending]) -> NodeError {
        let Some(first) =
            pending.iter().find(|p| p.kind == PendingKind::Interrupt).or_else(|| pending.first()).cloned()
        else {
            return NodeError::fatal(format!("subgraph `{name}` paused with nothing pending"));
        };
        let child_path = first.payload.get("path").and_then(Value::as_str).map_or(first.node.clone(), str::to_string);
        let mut payload = match first.payload {
            Value::Object(map) => map,
            other => {
                let mut map = serde_json::Map::new();
                map.insert("payload".into(), other);
                map
            }
        };
        payload.insert("path".into(), Value::String(format!("{}/{child_path}", self.node)));
        payload.entry("thread").or_insert_with(|| Value::String(thread.to_string()));
        payload.entry("subgraph").or_insert_with(|| Value::String(name.to_string()));
        let kind = first.kind;
        let mut signal = self.signal.lock().unwrap_or_else(|p| p.into_inner());
        signal.pause = Some(Pending {
            node: self.node.to_string(),
            instance: self.instance(),
            kind,
            payload: Value::Object(payload),
        });
        NodeError::needs_input(format!("node `{}` waits on its subgraph `{name}` ({kind:?})", self.node))
    }
}
