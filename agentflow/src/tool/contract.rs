//! The tool contract: the [`Tool`] trait `#[tool]` implements, the
//! [`ToolCx`] a call gets, its [`Risk`] class and [`ToolError`]. The gateway,
//! policy and validation build on it; it depends on none of them.
use std::fmt;

use async_trait::async_trait;
use serde_json::Value;

use crate::core::message::ToolSpec;
use crate::tool::validate::ArgumentError;

/// How much harm a tool call can do. The [`Policy`](crate::tool::Policy) maps it
/// to run, ask a human, or deny.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Risk {
    /// Reads only: search, lookups, arithmetic.
    Read,
    /// Changes something that can be undone: drafts, labels.
    Reversible,
    /// Reaches outside: sends an email, posts a message.
    External,
    /// Cannot be undone: refunds, deletions, deployments.
    Irreversible,
}

impl fmt::Display for Risk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Risk::Read => "read",
            Risk::Reversible => "reversible",
            Risk::External => "external",
            Risk::Irreversible => "irreversible",
        })
    }
}

/// What a tool's body may fail with.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ToolError {
    /// The caller can fix it (division by zero, an order that does not
    /// exist): reported to the model as an observation.
    #[error("{0}")]
    Correctable(String),
    /// A passing fault: the node is retried per its retry policy.
    #[error("{0}")]
    Transient(String),
    /// Nothing will fix it: the run stops.
    #[error("{0}")]
    Fatal(String),
    /// The tool ran, but its result cannot be stored: a NaN or an infinity,
    /// or nesting deeper than the journal reads back. `#[tool]` returns it
    /// for such a result. The run stops, and since the call may have acted,
    /// it is journaled as run and never run again (as [`Ctx::effect`] does
    /// with such a result).
    ///
    /// [`Ctx::effect`]: crate::Ctx::effect
    #[error("{0}")]
    Unrecorded(String),
    /// The call was sent and no answer came back (the process serving it
    /// died mid-call, the connection dropped): whether it acted is unknown.
    /// For a read or an idempotent tool the node runs again, as for a
    /// [`Transient`](Self::Transient) error; for any other tool the run
    /// pauses on an `OUTCOME_UNKNOWN` record
    /// ([`PendingKind::OutcomeUnknown`](crate::PendingKind::OutcomeUnknown)),
    /// exactly as when the run itself was cut off mid-call, and a human says
    /// whether it succeeded, failed or runs again. MCP tools return it.
    #[error("{0}")]
    OutcomeUnknown(String),
}

/// What a tool sees besides its arguments: its call id, an idempotency key,
/// the calling node and the graph's dependencies ([`ToolCx::deps`]). Only the
/// gateway makes one for a run, and a tool only borrows it for the length of
/// one call (it is not `Clone`), so graph code cannot reach [`Tool::invoke`]
/// around the gateway:
///
/// ```compile_fail,E0599
/// use agentflow::tool::ToolCx;
///
/// fn keep(cx: &ToolCx) -> ToolCx {
///     ToolCx::clone(cx)
/// }
/// ```
///
/// A tool's `test_call` (its body on its own, for unit tests) exists only
/// under `cfg(test)` of the crate declaring the tool, so graph code cannot
/// call a body around the gateway:
///
/// ```compile_fail,E0599
/// use agentflow::prelude::*;
///
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Pair {
///     a: f64,
///     b: f64,
/// }
///
/// /// Adds two numbers.
/// #[tool(risk = read)]
/// async fn add(args: Pair) -> Result<f64, ToolError> {
///     Ok(args.a + args.b)
/// }
///
/// async fn around_the_gateway() {
///     let _ = add.test_call(Pair { a: 1.0, b: 2.0 }).await;
/// }
/// # fn main() {}
/// ```
///
/// and a context made for a test holds typed deps, which
/// [`Tool::invoke`] does not take:
///
/// ```compile_fail,E0308
/// use agentflow::tool::{Tool, ToolCx};
///
/// async fn around_the_gateway(tool: &dyn Tool) {
///     let cx: ToolCx<'_, ()> = agentflow::__private::test_cx("add", &());
///     let _ = tool.invoke(serde_json::json!({}), &cx).await;
/// }
/// ```
///
/// A tool names the deps it needs as `cx: &ToolCx<Deps>` (or takes `deps:
/// &Deps` directly); `&ToolCx` alone is `ToolCx<()>`, a tool that needs no
/// deps and fits a graph with any. The gateway hands [`Tool::invoke`] the
/// graph's deps as [`AnyDeps`]; `#[tool]` checks at compile time that a
/// node lists only tools whose deps type is its graph's.
pub struct ToolCx<'a, D: ?Sized = ()> {
    call_id: &'a str,
    idempotency_key: &'a str,
    node: &'static str,
    deps: &'a D,
    /// Where the App's remote tools (MCP servers) are called, if it has any.
    remote: Option<&'a dyn RemoteTools>,
}

/// The graph's deps as the gateway passes them to [`Tool::invoke`], their
/// type erased; `#[tool]` turns them back into the tool's typed deps.
pub type AnyDeps = dyn std::any::Any + Sync;

impl<D: ?Sized> fmt::Debug for ToolCx<'_, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolCx")
            .field("call_id", &self.call_id)
            .field("idempotency_key", &self.idempotency_key)
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

impl<'a, D: ?Sized> ToolCx<'a, D> {
    /// Only the gateway (and, for a tool's own unit test, the method
    /// `#[tool]` generates under `cfg(test)`) makes a context.
    pub(crate) fn new(call_id: &'a str, idempotency_key: &'a str, node: &'static str, deps: &'a D) -> Self {
        ToolCx { call_id, idempotency_key, node, deps, remote: None }
    }

    /// The same context with where the App's remote tools are called.
    pub(crate) fn with_remote(mut self, remote: Option<&'a dyn RemoteTools>) -> Self {
        self.remote = remote;
        self
    }

    /// Where the App's remote tools (MCP servers) are called, if the call was made through an
    /// App that has any.
    #[cfg_attr(not(feature = "mcp"), allow(dead_code, reason = "only MCP tools are remote so far"))]
    pub(crate) fn remote(&self) -> Option<&'a dyn RemoteTools> {
        self.remote
    }

    /// The model's id for this call.
    pub fn call_id(&self) -> &str {
        self.call_id
    }

    /// Stable across re-runs of the same call: pass it to systems that
    /// deduplicate requests (payment providers, ticketing).
    pub fn idempotency_key(&self) -> &str {
        self.idempotency_key
    }

    /// The node making the call.
    pub fn node(&self) -> &'static str {
        self.node
    }
}

impl<'a, D> ToolCx<'a, D> {
    /// The graph's dependencies (`#[graph(deps = ..)]`): the HTTP clients,
    /// credentials and handles a tool needs, passed to
    /// [`CompiledGraph::run`](crate::CompiledGraph::run) like a node's.
    pub fn deps(&self) -> &'a D {
        self.deps
    }
}

impl<'a> ToolCx<'a, AnyDeps> {
    /// The same call's context with the deps typed as `D`, or `None` if the
    /// graph's deps are of another type.
    pub(crate) fn typed<D: std::any::Any>(&self) -> Option<ToolCx<'a, D>> {
        let deps: &'a dyn std::any::Any = self.deps;
        Some(ToolCx {
            call_id: self.call_id,
            idempotency_key: self.idempotency_key,
            node: self.node,
            deps: deps.downcast_ref::<D>()?,
            remote: self.remote,
        })
    }

    /// The same call's context without deps, for a tool that needs none.
    pub(crate) fn without_deps(&self) -> ToolCx<'a, ()> {
        ToolCx {
            call_id: self.call_id,
            idempotency_key: self.idempotency_key,
            node: self.node,
            deps: &(),
            remote: self.remote,
        }
    }
}

/// The JSON schema of a tool's argument type, as handed to models.
pub fn schema_of<T: schemars::JsonSchema>() -> Value {
    let mut schema = serde_json::to_value(schemars::schema_for!(T)).unwrap_or(Value::Null);
    if let Value::Object(map) = &mut schema {
        // Metadata models do not need; some reject `$schema`.
        map.remove("$schema");
        map.remove("title");
    }
    schema
}

/// A tool, as `#[tool]` implements it. Implement it by hand only for tools
/// built at run time (e.g. from an API description).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a tool",
    label = "not a tool",
    note = "declare tools with `#[tool(risk = read)]` on an `async fn` taking a typed argument struct"
)]
#[async_trait]
pub trait Tool: Send + Sync + 'static {
    /// The name the model calls it by.
    fn name(&self) -> &'static str;
    /// What it does; the model reads this.
    fn description(&self) -> &'static str;
    /// How much harm a call can do.
    fn risk(&self) -> Risk;
    /// Whether the tool honours [`ToolCx::idempotency_key`]: a second request
    /// with the same key does nothing more than the first (`#[tool(risk =
    /// external, idempotent)]`). A call that started and left no result (a
    /// crash mid-call) is run again with the same key only for such a tool,
    /// and the audit log records the re-run; any other non-read call waits
    /// for a human's decision instead ([`PendingKind::OutcomeUnknown`](crate::PendingKind::OutcomeUnknown)).
    /// Defaults to `false`.
    fn idempotent(&self) -> bool {
        false
    }
    /// JSON schema of the argument object.
    fn parameters(&self) -> Value;
    /// Checks arguments as a model sent them, before anything runs:
    /// an object, no unknown fields, the right types.
    fn validate(&self, args: &Value) -> Result<(), ArgumentError>;
    /// Runs the tool on arguments that passed [`Tool::validate`].
    async fn invoke(&self, args: Value, cx: &ToolCx<'_, AnyDeps>) -> Result<Value, ToolError>;

    /// The spec handed to a model.
    fn spec(&self) -> ToolSpec {
        ToolSpec::new(self.name(), self.description(), self.parameters())
    }

    /// The tool that undoes a completed call of this one
    /// (`#[tool(risk = reversible, compensate = cancel_order)]`), run when
    /// the thread's run fails or is cancelled (see [`crate::saga`]).
    /// Defaults to `None`.
    fn compensation(&self) -> Option<Compensation> {
        None
    }
}

impl fmt::Debug for dyn Tool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tool({}, {})", self.name(), self.risk())
    }
}

/// The tool that undoes another, as `#[tool(compensate = ..)]` names it:
/// the tool, and how its arguments are built from the forward call's.
#[derive(Clone, Copy)]
pub struct Compensation {
    tool: &'static dyn Tool,
    build: fn(&Value, &Value) -> Result<Value, String>,
}

impl std::fmt::Debug for Compensation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compensation").field("tool", &self.tool.name()).finish_non_exhaustive()
    }
}

impl Compensation {
    /// A compensation: `tool`, with its arguments built by `build` from the
    /// forward call's arguments and result. `#[tool(compensate = ..)]` makes
    /// one (through `agentflow::saga::compensation`, which checks the types).
    #[doc(hidden)]
    pub fn new(tool: &'static dyn Tool, build: fn(&Value, &Value) -> Result<Value, String>) -> Self {
        Compensation { tool, build }
    }

    /// The compensating tool.
    pub fn tool(&self) -> &'static dyn Tool {
        self.tool
    }

    /// The compensation's arguments for a forward call made with
    /// `args` that returned `result` (both as JSON), or why they cannot be
    /// built (the JSON does not decode as the forward tool's types).
    pub fn arguments(&self, args: &Value, result: &Value) -> Result<Value, String> {
        (self.build)(args, result)
    }
}

/// The tools a node may use, in the order of its `tools = [..]` list.
pub type ToolSet = &'static [&'static dyn Tool];

/// The future a remote call returns.
#[cfg_attr(not(feature = "mcp"), allow(dead_code, reason = "only MCP tools are remote so far"))]
pub(crate) type RemoteCall<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<Value, ToolError>> + Send + 'a>>;

/// Tools whose bodies run in another process: the servers an App's remote tools are called
/// on, by server name. The App's MCP connections implement it (`crate::mcp_client`, feature `mcp`);
/// the tool layer knows only this trait, not MCP.
#[cfg_attr(not(feature = "mcp"), allow(dead_code, reason = "only MCP tools are remote so far"))]
pub(crate) trait RemoteTools: Send + Sync + std::any::Any {
    /// Calls `tool` of `server` with `args` (checked by the gateway, which journals the call).
    fn call<'a>(&'a self, server: &'a str, tool: &'a str, args: Value) -> RemoteCall<'a>;
    /// For the App, to add a server to the ones it has.
    fn as_any(&self) -> &dyn std::any::Any;
}
