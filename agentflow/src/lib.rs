//! agentflow: LLM agents as state graphs whose wiring the compiler checks.
//!
//! You write a state struct with `#[derive(State)]`, async node functions
//! with `#[node]`, and one `#[graph]` module. The macros check at compile
//! time that every route goes to a node of the graph or `END`, every node is
//! reachable and can finish, every cycle is bounded, every field's reducer
//! fits its type, nodes only call the tools they list, and two nodes of one
//! super-step never overwrite the same plain field. Errors point at the
//! identifier to change.
//!
//! A small tokio executor runs the graph in super-steps and, with a store,
//! persists every step to an embedded redb file, so runs survive crashes,
//! pause for human approval, and can be resumed, inspected and forked.
//!
//! ```
//! use agentflow::prelude::*;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
//! struct Ticket {
//!     text: String,
//!     intent: Option<String>,
//!     #[reduce(append)]
//!     log: Vec<String>,
//! }
//!
//! #[graph(state = Ticket, start = classify)]
//! mod support {
//!     use super::*;
//!
//!     #[node(goto = [answer, escalate])]
//!     async fn classify(t: &Ticket) -> Step<Ticket> {
//!         if t.text.contains("refund") {
//!             goto!(escalate, Ticket::update().intent(Some("billing".into())))
//!         } else {
//!             goto!(answer, Ticket::update().intent(Some("question".into())))
//!         }
//!     }
//!
//!     #[node(goto = [END])]
//!     async fn answer(_t: &Ticket) -> Step<Ticket> {
//!         goto!(END, Ticket::update().log(vec!["answered".into()]))
//!     }
//!
//!     #[node(goto = [END])]
//!     async fn escalate(_t: &Ticket) -> Step<Ticket> {
//!         goto!(END, Ticket::update().log(vec!["sent to a human".into()]))
//!     }
//! }
//!
//! # fn main() {
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let graph = support::graph();
//! let input = Ticket { text: "I want a refund".into(), ..Ticket::default() };
//! let run = graph.run(input, &()).await?;
//! assert_eq!(run.outcome, Outcome::Completed);
//! assert_eq!(run.state.intent.as_deref(), Some("billing"));
//! assert_eq!(run.state.log, ["sent to a human"]);
//! # Ok::<(), agentflow::RunError>(())
//! # }).unwrap();
//! # }
//! ```
//!
//! Where to go next: [`Runner`] (threads, budgets, breakpoints,
//! events), [`persist`] (durable runs and history), [`tool`](mod@tool) (tools and the
//! approval gateway), [`approval`] (deciding approvals), [`model`] (chat
//! models, including the scripted test double), [`prebuilt`] (ReAct).
#![warn(missing_docs)]

// The derive and graph macros name `::agentflow`; this lets the crate use them itself.
extern crate self as agentflow;

// The crate's vocabulary lives in private modules, one concept each, and is
// re-exported below at the root: every public type has one path. The public
// modules group a family users browse as a unit.
pub mod access;
mod answer_error;
mod app;
pub mod approval;
mod back_pressure;
pub mod breaker;
mod core;
mod ctx;
pub mod describe;
mod durable;
mod error;
mod event;
mod graph;
mod in_flight;
mod interrupt;
#[cfg(feature = "mcp")]
mod mcp_client;
#[cfg(feature = "mcp")]
mod mcp_server;
pub mod metrics;
pub mod model;
#[cfg(feature = "otel")]
pub mod otel;
mod outcome;
pub mod persist;
pub mod prebuilt;
mod probe;
pub mod release;
mod run;
pub mod saga;
pub mod schedule;
pub mod secret;
#[cfg(feature = "server")]
pub mod serve_limits;
#[cfg(feature = "server")]
pub mod server;
mod stream;
pub mod subgraph;
mod telemetry;
#[cfg(feature = "testing")]
pub mod testing;
pub mod timer;
pub mod tool;
pub mod webhook;
mod worker;

#[doc(hidden)]
pub mod __private;

/// Encryption at rest (feature `encryption`): [`sealed::SealedStore`] wraps any store and seals
/// the payloads it keeps with a data key per thread.
#[cfg(feature = "encryption")]
pub use agentflow_store::sealed;
pub use agentflow_store::{FollowUpQueued, RedbStore, Store};
pub use app::governance::{HELD_KIND, RELEASED_KIND, purge_thread};
pub use app::retention::{RetentionPolicy, RetentionReport};
pub use app::{App, Migration, Multitask, RunControls, Submission};
pub use core::budget::{Budget, Limits, RunUsage};
pub use core::error::{ErrorClass, NodeError, NodeResultExt};
pub use core::retry::RetryPolicy;
pub use core::state::{Field, FieldMask, ReducerKind, State, Update};
pub use core::step::{Payload, Step};
pub use core::{message, reducer};
pub use ctx::Ctx;
pub use durable::durability::Durability;
pub use durable::history::Snapshot;
pub use error::Error;
pub use event::{Activity, Event};
pub use graph::{CompiledGraph, DEFAULT_PARALLEL, NodeId};
pub use interrupt::{Pending, PendingKind};
pub use outcome::{Outcome, Run, RunError};
pub use run::{DEFAULT_STOP_GRACE, DEFAULT_STREAM_BUFFER, Runner};
pub use stream::{RunStream, StreamItem, StreamMode, StreamPart};
pub use tokio_util::sync::CancellationToken;
pub use worker::{DEFAULT_NODE_TIME_LIMIT, DEFAULT_SHUTDOWN_DEADLINE, Worker, WorkerError, WorkerReport};

/// Tools from [Model Context Protocol](https://modelcontextprotocol.io) servers, typed at
/// compile time from a committed snapshot ([`mcp_tools!`](crate::mcp_tools)), and a graph
/// served as an MCP tool ([`serve_stdio`](mcp::serve_stdio)) (feature `mcp`). The guide:
/// `docs/guides/mcp.md`.
#[cfg(feature = "mcp")]
pub mod mcp {
    #[doc(inline)]
    pub use crate::mcp_client::*;
    #[doc(inline)]
    pub use crate::mcp_server::{ServeOptions, serve_io, serve_stdio};
}

/// Everything a graph definition needs: `use agentflow::prelude::*;`.
pub mod prelude {
    #[doc(no_inline)]
    pub use crate::tool::{Risk, ToolCx, ToolError};
    #[doc(no_inline)]
    pub use crate::{App, CompiledGraph, Ctx, NodeError, NodeResultExt, Outcome, State, Step, goto, graph, node, tool};
}

/// Derives [`State`] for a struct with named fields: a reducer per field and
/// a typed partial update.
///
/// # What it generates
///
/// For `struct Research { .. }`:
///
/// - `impl State for Research`, with [`State::VERSION`], [`State::NAME`]
///   (`"Research"`), [`State::FIELDS`] (each field's name and reducer) and
///   [`State::apply`];
/// - `ResearchUpdate`, with the visibility of the struct: one `Option<T>`
///   field per state field, `Clone`, `Default`, `Serialize`, `Deserialize`,
///   and a `Debug` that shows only the fields it sets. This is
///   `<Research as State>::Update`, what a node returns inside its [`Step`];
/// - `Research::update()`, an empty `ResearchUpdate`, and on it one setter
///   per field, `fn field(self, value: T) -> Self`. A setter called twice
///   combines both values with the field's reducer, as two nodes' writes
///   would be.
///
/// # `#[state(version = N)]`
///
/// The version of the state's shape, `1` when left out. It is stored with
/// every checkpoint; raise it when a change of the fields means a stored run
/// cannot be read as is, and register a migration from the old version.
///
/// # `#[reduce(..)]` on a field
///
/// How two writes to the field in one super-step, or a write and the current
/// value, combine. Each is checked against the field's type at compile time.
///
/// | Attribute | Field type | A write |
/// |---|---|---|
/// | none | any | replaces the value; two writes in one super-step are a compile error |
/// | `#[reduce(append)]` | `Vec<T>` | is appended |
/// | `#[reduce(add)]` | integers (saturating), `f32`, `f64` | is added |
/// | `#[reduce(merge)]` | `HashMap<K, V>`, `BTreeMap<K, V>` | is inserted key by key, replacing equal keys |
/// | `#[reduce(messages)]` | `Vec<M>` with `M: HasId`, e.g. [`message::Message`] | is appended, replacing the messages of equal id |
/// | `#[reduce(custom = path::to::f)]` | any `T` | is combined by `fn f(current: &mut T, write: T)` |
///
/// A field whose type is written `Secret<..>` or `Option<Secret<..>>` takes no
/// reducer (a reducer would combine secret values): a compile error.
///
/// The struct may not be generic and has at most 64 fields.
///
/// # `#[state(pii)]` and `#[state(credential)]` on a field
///
/// - `pii`: the field holds personal data ([`Field`]`::personal`). Wherever a
///   state or an update is shown (the `agentflow` CLI, the inbox, a stream or
///   the events of an [`App`] acting as someone) it reads as `•••` for anyone
///   without [`access::Operation::SeePersonalData`], and every unmasked read
///   through the CLI, the inbox or an app's typed reads is recorded in the
///   thread's audit log (`personal_data.read`). The update's `Debug` (what
///   event lines, logs and traces print) always shows it as `•••`. See
///   [`access::personal`].
/// - `credential`: the field may hold values that look like credentials
///   ([`Field`]`::credential`); the credential scan lets them through, and only
///   a store that seals payloads keeps them. Not for a `Secret` field, which
///   holds only its reference.
///
/// Each mark is given once per field; both may be combined (`#[state(pii, credential)]`).
///
/// # Example
///
/// ```
/// use std::collections::HashMap;
///
/// use agentflow::message::Message;
/// use agentflow::prelude::*;
/// use serde::{Deserialize, Serialize};
///
/// /// Keeps the longer of two answers.
/// fn longest(current: &mut String, write: String) {
///     if write.len() > current.len() {
///         *current = write;
///     }
/// }
///
/// #[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
/// #[state(version = 2)]
/// struct Research {
///     question: String,
///     #[reduce(append)]
///     notes: Vec<String>,
///     #[reduce(add)]
///     searches: u32,
///     #[reduce(merge)]
///     sources: HashMap<String, String>,
///     #[reduce(messages)]
///     messages: Vec<Message>,
///     #[reduce(custom = longest)]
///     answer: String,
/// }
///
/// let update: ResearchUpdate = Research::update()
///     .notes(vec!["from the web".into()])
///     .notes(vec!["from papers".into()])
///     .searches(2)
///     .answer("a long answer".into())
///     .answer("short".into());
///
/// let mut state = Research { question: "why?".into(), searches: 1, ..Research::default() };
/// state.apply(update);
/// assert_eq!(state.notes, ["from the web", "from papers"]);
/// assert_eq!(state.searches, 3);
/// assert_eq!(state.answer, "a long answer");
/// assert_eq!(state.question, "why?");
/// assert_eq!(Research::VERSION, 2);
/// ```
pub use agentflow_macros::State;

/// Turns an inline module of [`#[node]`](macro@node) async fns into a graph
/// whose wiring is checked at compile time.
///
/// ```text
/// #[graph(state = S, deps = D, start = node, max_steps = N, max_depth = 3)]
/// mod name { .. }
/// ```
///
/// # Arguments
///
/// - `state = S` (required): the graph's state, a type with
///   [`#[derive(State)]`](derive@State).
/// - `deps = D` (optional, `()` when left out): what the nodes use from
///   outside, such as model clients and HTTP clients; a node reaches it as
///   `cx.deps()` or takes it as its second parameter, and the caller passes
///   a `&D` when it runs the graph.
/// - `start = node` (required): the node every run begins at.
/// - `max_steps = N` (required when the graph has a cycle, `N >= 1`): the
///   most super-steps a run may take; a run that reaches it ends with
///   [`Outcome::BudgetExhausted`] for [`Budget::Steps`].
/// - `max_depth = N` (optional, default 3, `N >= 1`): how deep the graph may
///   delegate through [subgraphs](subgraph): 1 for the graph itself, plus the
///   depth of its deepest subgraph. A deeper graph is a compile error naming
///   the chain (`supervisor -> research -> search -> fetch`).
/// - `id`, `version`, `locks`, `migrate(..)` (optional): a released graph, checked against
///   its committed locks; see [`release`].
///
/// In the module, the macro declares `pub fn graph()` (the compiled graph;
/// another graph's node runs it as its child with
/// `cx.subgraph(name::graph(), input)`) and the constant `DELEGATION_DEPTH`.
///
/// # Nodes
///
/// Every `async fn` of the module marked `#[node(..)]` is a node, named after
/// the fn. Its forms:
///
/// ```text
/// async fn name(state: &S) -> Step<S>
/// async fn name(state: &S, cx: &Ctx<D>) -> Step<S>
/// async fn name(state: &S, deps: &D) -> Step<S>
/// async fn name(state: &S, #[payload] item: &T, cx: &Ctx<D>) -> Step<S>   // a map worker
/// ```
///
/// and each may return `Result<Step<S>, E>` with `E: Into<NodeError>`
/// instead ([`NodeResultExt`] classifies other
/// errors). A node routes with [`goto!`]: `goto!(next)`,
/// `goto!(next, update)`, `goto!([a, b], update)` (a fan-out: `a` and `b`
/// run in the same super-step) or `goto!(END, update)`.
///
/// # Map-reduce
///
/// A node whose second parameter is marked `#[payload]` (`item: &T` or
/// `item: T`, with `T: Serialize + Deserialize`) is a *map worker*. A node
/// sends it N payloads with `goto!(each(worker, payloads), update)`
/// (`payloads`: any collection or iterator of `T`; it may stand beside plain
/// targets, `goto!([each(worker, items), other], update)`). In the next
/// super-step one instance of the worker runs per payload; each instance:
///
/// - is its own task: it reads the same state snapshot as the rest of the
///   step, retries on its own under the worker's `retry` policy, learns its
///   index from [`Ctx::instance`], and its [`Event`]s carry that index;
/// - has its own pending write: if the step stops (an instance fails for
///   good, a budget), a resume runs only the instances that did not finish,
///   with the same payloads (they are stored with the checkpoint). Under
///   [`Durability::Sync`] (the default) each instance's write is committed as
///   soon as it finishes, before its slot goes to another instance, so after
///   a crash too only the instances that had not finished run again: at most
///   `parallel` of those that had started. Under `Async` and `Exit` the
///   writes are kept with the step, and a crash mid-step runs them all again;
/// - merges its update through the reducers in **payload order**, never in
///   the order the instances finished.
///
/// The worker's successors run once, after all instances (a join). At most
/// `parallel = N` instances run at once (default [`graph::DEFAULT_PARALLEL`], 8).
///
/// **N = 0**: an empty `each(worker, ..)` runs no instance, so neither the
/// worker nor its successors run; the sender's other targets proceed as
/// usual, and a `goto!` whose only target is an empty `each` ends that branch
/// (like `goto!(END)`, even without `END` in the sender's `goto` list). To
/// run an aggregator even with nothing to map, route to it directly when the
/// list is empty.
///
/// # What is checked at compile time
///
/// Every route names a node of the graph or `END` and is in its node's
/// `goto` list; every node is reachable from `start` and can reach `END`;
/// every cycle has a way out and the graph a `max_steps`; a node sets only
/// the fields of its `writes` list, and those fields exist; two nodes that
/// can run in one super-step never both write a field without a reducer; a
/// node calls only the tools it lists, and each is a [`#[tool]`](macro@tool);
/// only an `interrupt` node calls `cx.interrupt(..)`; a node runs only the
/// subgraphs it lists and a graph delegates no deeper than its `max_depth`;
/// node signatures have
/// the forms above. For map-reduce: the payloads of `each(worker, ..)` are of
/// the worker's `#[payload]` type (a type error at the payload expression,
/// naming both nodes); a map worker is reached only through `each(..)`,
/// never by a plain `goto!` nor as the start node, and `each(..)` names only
/// map workers; the worker is in the sender's `goto` list; a map worker
/// writes only fields with a reducer (its instances always share a step);
/// `parallel` is set only on map workers. All errors of a graph are reported together.
///
/// # What it generates
///
/// Inside the module, next to the nodes: `pub fn graph() ->
/// CompiledGraph<S, D>`, the graph as the executor runs it.
///
/// # Example
///
/// ```
/// use agentflow::prelude::*;
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
/// struct Draft {
///     text: String,
///     #[reduce(add)]
///     rounds: u32,
/// }
///
/// struct Style {
///     max_len: usize,
/// }
///
/// #[graph(state = Draft, deps = Style, start = write, max_steps = 10)]
/// mod drafting {
///     use super::*;
///
///     #[node(goto = [review])]
///     async fn write(d: &Draft, style: &Style) -> Step<Draft> {
///         let text = format!("{} more", d.text);
///         goto!(review, Draft::update().text(text.chars().take(style.max_len).collect()).rounds(1))
///     }
///
///     // A cycle: `review` sends the draft back until it is long enough.
///     #[node(goto = [write, END])]
///     async fn review(d: &Draft, cx: &Ctx<Style>) -> Step<Draft> {
///         if d.text.len() < cx.deps().max_len { goto!(write) } else { goto!(END) }
///     }
/// }
///
/// # fn main() {
/// let _plan: CompiledGraph<Draft, Style> = drafting::graph();
/// # }
/// ```
pub use agentflow_macros::graph;

/// Marks an async fn of a [`#[graph]`](macro@graph) module as a node, and
/// says where it may go and what it may do.
///
/// ```text
/// #[node(goto = [a, END], writes = [field], tools = [t], subgraphs = [g], retry = 3, timeout = 30s, interrupt, parallel = 8)]
/// ```
///
/// # Arguments
///
/// - `goto = [a, b, END]` (required): every node the node may route to,
///   `END` to finish. Each `goto!` in the body must name one of them; the
///   list is the graph's edges, drawn by `mermaid()`.
/// - `writes = [field, ..]` (optional): the only fields the node may set.
///   Each must be a field of the state, and every update chain in the body
///   (`S::update().field(..)`) may set only these. Without it, the node may
///   set any field.
/// - `tools = [t, ..]` (optional): the [`#[tool]`](macro@tool)s the node
///   may call, with `cx.run_tool(t, args)` or by handing them to a model.
///   A call of a tool not in the list is a compile error.
/// - `subgraphs = [g, ..]` (optional): the `#[graph]`s the node may run as
///   children with `cx.subgraph(g::graph(), input).await?`, which returns the child's
///   final state (see [`subgraph`]). A call of a graph not in the list, or a
///   graph listing itself, is a compile error; so are graphs that contain
///   each other (rustc reports the cycle between their `SUBGRAPH_TREE`
///   constants) and a child whose deps type is not the node's.
/// - `retry = N` (optional, `N >= 1`): attempts in all, the first included,
///   for an error of class [`ErrorClass::Transient`](crate::ErrorClass):
///   `retry = 2` runs the node at most twice. Other error classes are never
///   retried. Left out, a node runs once. The long form sets the backoff:
///   `retry(attempts = 5, base = 50ms, max_delay = 2s, jitter = false)`
///   (defaults: base 100 ms, doubling, capped at 10 s, with jitter); see
///   [`RetryPolicy`].
/// - `timeout = 30s` (optional): the limit on one attempt, in `ms`, `s` or
///   `m`. An attempt that runs over is cancelled and counts as a transient
///   error, so `retry` applies to it.
/// - `interrupt` (optional): the node may pause the run for a human with
///   `cx.interrupt(payload)?`, once per run of the node: the run ends as
///   [`Outcome::Interrupted`] and, resumed with a value, runs the node again
///   from its start, where the call returns that value (see
///   [`Ctx::interrupt`]). Without it, calling `interrupt` is a compile error.
/// - `sleep` (optional): the node may wait on a durable timer with
///   `cx.sleep(duration).await?` or `cx.sleep_until(time).await?`: the run
///   ends as [`Outcome::Sleeping`] with the wake time stored, and a
///   [`Scheduler`](timer::Scheduler) runs the node again from its start
///   once it is due, where the call returns (see [`Ctx::sleep`]). Without
///   it, calling `sleep` or `sleep_until` is a compile error.
/// - `parallel = N` (optional, `N >= 1`, map workers only): at most `N`
///   instances of this map worker run at once (default 8). See
///   [Map-reduce](macro@graph#map-reduce).
///
/// A map worker marks its payload parameter, the second, with `#[payload]`:
/// `async fn analyst(s: &Market, #[payload] task: &Task, cx: &Ctx<D>)`.
///
/// `#[node]` outside a `#[graph]` module is a compile error.
///
/// # Example
///
/// ```
/// use agentflow::prelude::*;
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
/// struct Order {
///     item: String,
///     price: Option<f64>,
///     approved: bool,
/// }
///
/// #[derive(Deserialize, Serialize, schemars::JsonSchema)]
/// struct Item {
///     name: String,
/// }
///
/// /// Looks up the price of an item.
/// #[tool(risk = read)]
/// async fn price_of(args: Item) -> Result<f64, ToolError> {
///     Ok(if args.name == "book" { 12.5 } else { 99.0 })
/// }
///
/// #[graph(state = Order, start = quote)]
/// mod orders {
///     use super::*;
///
///     #[node(goto = [confirm], writes = [price], tools = [price_of], retry = 2, timeout = 30s)]
///     async fn quote(o: &Order, cx: &Ctx<()>) -> Result<Step<Order>, NodeError> {
///         let obs = cx.run_tool(price_of, Item { name: o.item.clone() }).await?;
///         let price = obs.result().and_then(|v| v.as_f64());
///         Ok(goto!(confirm, Order::update().price(price)))
///     }
///
///     #[node(goto = [END], writes = [approved], interrupt)]
///     async fn confirm(o: &Order, cx: &Ctx<()>) -> Result<Step<Order>, NodeError> {
///         let approved: bool = cx.interrupt(format!("buy {} for {:?}?", o.item, o.price))?;
///         Ok(goto!(END, Order::update().approved(approved)))
///     }
/// }
///
/// # fn main() {
/// let _plan = orders::graph();
/// # }
/// ```
pub use agentflow_macros::node;

/// Turns an async fn with a typed argument struct into a tool a model can
/// call, only ever run through the approval gateway.
///
/// ```text
/// /// What the tool does, for the model.
/// #[tool(risk = read)]
/// async fn name(args: Args) -> Result<T, ToolError>
/// async fn name(args: Args, cx: &ToolCx) -> Result<T, ToolError>
/// async fn name(args: Args, cx: &ToolCx<Deps>) -> Result<T, ToolError>
/// async fn name(args: Args, deps: &Deps) -> Result<T, ToolError>
/// ```
///
/// # Arguments
///
/// - `risk = read | reversible | external | irreversible` (required): the
///   tool's [`Risk`](tool::Risk) class, which the gateway's policy keys on
///   (for example: run `read` tools freely, ask a human before an
///   `irreversible` one).
/// - `idempotent` (optional, after `risk`): the tool honours
///   [`ToolCx::idempotency_key`](tool::ToolCx::idempotency_key), so a call
///   cut off mid-way may be run again ([`Tool::idempotent`](tool::Tool::idempotent)).
/// - `compensate = other_tool` (optional, `reversible` and `external` tools
///   only): the `#[tool]` that undoes a completed call of this one (saga
///   compensation, [`saga`]). When a thread's run fails for good (any fatal
///   error, or [`Ctx::compensate`]) or is cancelled, the compensations of
///   its completed calls run, newest first, each once, and the run ends
///   [`Outcome::Compensated`] or [`Outcome::CompensationFailed`]. The
///   compensation's argument struct implements
///   [`saga::Compensates<this_tool>`](saga::Compensates): it is built from
///   the forward call's arguments and result (both must be `Deserialize`).
///   Checked at compile time, at the name after `compensate =`: that it is a
///   `#[tool]`, that its arguments can be built from this tool's call, and
///   (at `compensate`) that this tool is not `read` or `irreversible`. The
///   compensation needs not be in any node's `tools = [..]` list; it runs
///   with the graph's deps, without the policy's approval step.
///
/// # The fn
///
/// - Its doc comment (required) is the description the model reads.
/// - `Args` is one struct with `serde::Deserialize` and
///   `schemars::JsonSchema`: its schema is the tool's parameters, and a call
///   whose arguments do not fit is sent back to the model to correct.
/// - `T` is `serde::Serialize`; it is what the model sees.
/// - The optional second parameter:
///   - [`cx: &ToolCx`](tool::ToolCx): the call id, an idempotency key and the
///     calling node. The tool reads no deps, so any graph may list it.
///   - `cx: &ToolCx<Deps>`: the same, and [`cx.deps()`](tool::ToolCx::deps),
///     the graph's dependencies (`#[graph(deps = Deps)]`): HTTP clients,
///     credentials, handles; the value passed to
///     [`CompiledGraph::run`] for this run.
///   - `deps: &Deps`: the graph's dependencies alone.
///
///   A node may list a tool that reads `Deps` only if its graph's deps
///   are `Deps`; anything else is a compile error at the tool's name in
///   `tools = [..]`, naming both types.
///
/// # What it generates
///
/// A unit struct named after the fn, implementing [`tool::Tool`]. List it in
/// a node's `#[node(tools = [name])]` to call it; a run calls it only
/// through the gateway, since [`Tool::invoke`](tool::Tool::invoke) needs a
/// context only the gateway makes.
///
/// For the tool's own unit tests, the struct also has an async method
/// `test_call(args)` (or `test_call(args, &deps)` for a tool reading deps)
/// that runs the fn's body on its own and returns what the fn returns: no
/// gateway, policy or journal; the call id is `test-call`, the idempotency
/// key the tool's name and the node `test`. It exists only under
/// `cfg(test)` of the crate that declares the tool (its unit tests, or an
/// integration test that declares the tool itself), so graph code cannot
/// reach a tool's body around the gateway.
///
/// # Circuit breakers
///
/// A circuit breaker is configured on the [`App`], by the tool's name, not
/// in the attribute: [`App::circuit_breaker`]`("get_metrics", `[`Breaker::after`](breaker::Breaker::after)`(5))`
/// (a name no node lists is refused when the App is built). How the tool
/// reports a failure decides what the breaker counts: `ToolError::Transient`
/// and `ToolError::Fatal` count, `ToolError::Correctable` does not (see
/// [`breaker`]).
///
/// # Example
///
/// ```
/// use agentflow::prelude::*;
/// use agentflow::tool::{Risk, Tool};
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Deserialize, schemars::JsonSchema)]
/// struct Pair {
///     /// The first number.
///     a: f64,
///     /// The second number.
///     b: f64,
/// }
///
/// /// Adds two numbers.
/// #[tool(risk = read)]
/// async fn add(args: Pair) -> Result<f64, ToolError> {
///     Ok(args.a + args.b)
/// }
///
/// assert_eq!(add.name(), "add");
/// assert_eq!(add.description(), "Adds two numbers.");
/// assert_eq!(add.risk(), Risk::Read);
/// ```
///
/// A tool that reads the graph's deps, run by a graph, and tested on its own:
///
/// ```
/// use agentflow::prelude::*;
/// use serde::{Deserialize, Serialize};
///
/// /// What the graph's nodes and tools reach: a metrics client in real code.
/// struct Deps {
///     base_url: String,
/// }
///
/// #[derive(Deserialize, Serialize, schemars::JsonSchema)]
/// struct Service {
///     /// The service's name.
///     name: String,
/// }
///
/// /// Reads a service's error rate.
/// #[tool(risk = read)]
/// async fn get_metrics(args: Service, cx: &ToolCx<Deps>) -> Result<String, ToolError> {
///     Ok(format!("{}/{}/errors", cx.deps().base_url, args.name))
/// }
///
/// #[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
/// struct Incident {
///     metrics: Option<String>,
/// }
///
/// #[graph(state = Incident, deps = Deps, start = investigate)]
/// mod oncall {
///     use super::*;
///
///     #[node(goto = [END], tools = [get_metrics])]
///     async fn investigate(_s: &Incident, cx: &Ctx<Deps>) -> Result<Step<Incident>, NodeError> {
///         let obs = cx.run_tool(get_metrics, Service { name: "checkout".into() }).await?;
///         let metrics = obs.result().and_then(|v| v.as_str()).map(str::to_string);
///         Ok(goto!(END, Incident::update().metrics(metrics)))
///     }
/// }
///
/// // In the crate's unit tests, the body runs on its own with test deps:
/// #[cfg(test)]
/// #[tokio::test]
/// async fn get_metrics_builds_the_url() {
///     let deps = Deps { base_url: "http://fake".into() };
///     let out = get_metrics.test_call(Service { name: "search".into() }, &deps).await;
///     assert_eq!(out, Ok("http://fake/search/errors".to_string()));
/// }
///
/// # fn main() {
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let deps = Deps { base_url: "https://metrics.internal".into() };
/// let run = oncall::graph().run(Incident::default(), &deps).await?;
/// assert_eq!(run.state.metrics.as_deref(), Some("https://metrics.internal/checkout/errors"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// # }
/// ```
pub use agentflow_macros::tool;

#[doc = include_str!("mcp_tools.md")]
#[cfg(feature = "mcp")]
pub use agentflow_macros::mcp_tools;
