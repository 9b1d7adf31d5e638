//! The compiled graph: a flat plan indexed by [`NodeId`], produced by `#[graph]`.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::core::error::NodeError;
pub use crate::core::node_id::NodeId;
use crate::core::retry::RetryPolicy;
use crate::core::state::{FieldMask, State};
use crate::core::step::Step;
use crate::ctx::Ctx;
use crate::tool::{Tool, ToolSet};

/// A boxed node future borrowing the state snapshot and the context.
pub type NodeFuture<'a, S> = Pin<Box<dyn Future<Output = Result<Step<S>, NodeError>> + Send + 'a>>;

/// The function `#[graph]` generates around each `#[node]` fn.
pub type NodeFn<S, D> = for<'a> fn(&'a S, &'a Ctx<'a, D>) -> NodeFuture<'a, S>;

/// One node of a compiled graph.
pub struct NodeSpec<S: State, D> {
    /// The node's name (the fn name).
    pub name: &'static str,
    /// The declared `goto = [..]` targets (`END` excluded).
    pub targets: &'static [NodeId],
    /// Whether `END` is among the declared targets.
    pub may_end: bool,
    /// Retry policy for transient errors (`retry = ..`).
    pub retry: RetryPolicy,
    /// Per-attempt timeout (`timeout = ..`).
    pub timeout: Option<Duration>,
    /// The fields the node may write (`writes = [..]`), if it declared them.
    pub writes: Option<FieldMask>,
    /// Whether the node may pause for a human (`interrupt`).
    pub interrupt: bool,
    /// Whether the node may wait on a durable timer (`sleep`).
    pub sleep: bool,
    /// The tools the node may call (`tools = [..]`).
    pub tools: ToolSet,
    /// The generated wrapper around the user's fn.
    pub run: NodeFn<S, D>,
    /// For a map worker (a node with a `#[payload]` parameter): how many of
    /// its instances run at once (`parallel = N`, default
    /// [`DEFAULT_PARALLEL`]). `None` for a node that takes no payload.
    pub parallel: Option<usize>,
    /// The graphs the node may run as children (`subgraphs = [..]`).
    pub subgraphs: &'static [&'static str],
}

/// How many instances of a map worker run at once unless its `#[node]`
/// says `parallel = N`.
pub const DEFAULT_PARALLEL: usize = 8;

impl<S: State, D> fmt::Debug for NodeSpec<S, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeSpec")
            .field("name", &self.name)
            .field("targets", &self.targets)
            .field("may_end", &self.may_end)
            .field("retry", &self.retry)
            .field("timeout", &self.timeout)
            .field("writes", &self.writes)
            .field("parallel", &self.parallel)
            .finish_non_exhaustive()
    }
}

/// Everything `#[graph]` knows about a graph, handed to [`compile`].
pub struct GraphSpec<S: State, D> {
    /// The graph's name (the module name).
    pub name: &'static str,
    /// The start node.
    pub start: NodeId,
    /// The super-step bound (`max_steps`); `None` for an acyclic graph.
    pub max_steps: Option<u32>,
    /// A hash of the graph's structure, computed at compile time.
    pub fingerprint: &'static str,
    /// The nodes, in declaration order.
    pub nodes: Vec<NodeSpec<S, D>>,
}

/// A statically validated graph over state `S` and dependencies `D`: the
/// plan only (nodes, routes, reducers, fingerprint, [`mermaid`](Self::mermaid)).
///
/// Produced by the `graph()` function `#[graph]` generates; cheap to clone.
/// What runs it — a store, the tool policy, migrations — is configured on
/// [`App`](crate::App), built with [`CompiledGraph::app`];
/// [`CompiledGraph::run`] is a plain in-memory run.
pub struct CompiledGraph<S: State, D = ()> {
    pub(crate) inner: Arc<Plan<S, D>>,
}

pub(crate) struct Plan<S: State, D> {
    pub(crate) spec: GraphSpec<S, D>,
    /// The compile-time fingerprint, extended by the tool sets and their risk classes.
    pub(crate) fingerprint: String,
    /// Fields two same-step writes may not both set.
    pub(crate) overwrite_mask: FieldMask,
    /// The step bound in force when the caller sets none.
    pub(crate) default_max_steps: u32,
    /// The deps as [`AnyDeps`](crate::tool::AnyDeps), for calls made outside
    /// a node (compensations); set by `#[graph]`.
    pub(crate) erase_deps: Option<fn(&D) -> &crate::tool::AnyDeps>,
    /// The tools of the graph's subgraphs, at every level; set by `#[graph]`.
    pub(crate) tools_below: Option<fn() -> Vec<ToolAt>>,
    /// Its id, version and migrations; set by `#[graph]`.
    pub(crate) release: crate::release::Release,
}

impl<S: State, D> Clone for CompiledGraph<S, D> {
    fn clone(&self) -> Self {
        CompiledGraph { inner: Arc::clone(&self.inner) }
    }
}

impl<S: State, D> fmt::Debug for CompiledGraph<S, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompiledGraph")
            .field("name", &self.name())
            .field("nodes", &self.node_names())
            .field("fingerprint", &self.fingerprint())
            .finish()
    }
}

/// Builds the plan. `#[graph]` calls this after its compile-time checks;
/// calling it by hand skips them (the executor still refuses illegal routes).
pub fn compile<S: State, D>(spec: GraphSpec<S, D>) -> CompiledGraph<S, D> {
    // An acyclic graph runs at most one step per node.
    let default_max_steps = spec.max_steps.unwrap_or(spec.nodes.len() as u32);
    let fingerprint = with_tools(&spec);
    CompiledGraph {
        inner: Arc::new(Plan {
            overwrite_mask: S::overwrite_mask(),
            default_max_steps,
            fingerprint,
            erase_deps: None,
            tools_below: None,
            release: crate::release::Release::unversioned(spec.name),
            spec,
        }),
    }
}

/// Records how the graph's deps are handed to a tool called outside a node
/// (a compensation, see [`crate::saga`]). `#[graph]` calls this.
pub fn erase_deps<S: State, D>(
    mut graph: CompiledGraph<S, D>,
    erase: fn(&D) -> &crate::tool::AnyDeps,
) -> CompiledGraph<S, D> {
    if let Some(plan) = Arc::get_mut(&mut graph.inner) {
        plan.erase_deps = Some(erase);
    }
    graph
}

/// Records how to list the tools of the graph's subgraphs (every level), so
/// the App can configure what guards them. `#[graph]` calls this.
pub fn with_tools_below<S: State, D>(
    mut graph: CompiledGraph<S, D>,
    tools_below: fn() -> Vec<ToolAt>,
) -> CompiledGraph<S, D> {
    if let Some(plan) = Arc::get_mut(&mut graph.inner) {
        plan.tools_below = Some(tools_below);
    }
    graph
}

/// Records the graph's id, version and declared migrations. `#[graph]` calls this.
///
/// From version 2 on, the version is part of the fingerprint: a thread stored on an older
/// version always resumes through the migrations, even when only what the fingerprint cannot
/// see changed (a tool's argument schema, a field's type). Version 1 keeps the fingerprint the
/// graph had before it was versioned, so its stored threads resume as they did.
pub fn with_release<S: State, D>(
    mut graph: CompiledGraph<S, D>,
    release: crate::release::Release,
) -> CompiledGraph<S, D> {
    if let Some(plan) = Arc::get_mut(&mut graph.inner) {
        if release.version > 1 {
            plan.fingerprint = fnv(&format!("{};version={}", plan.fingerprint, release.version));
        }
        plan.release = release;
    }
    graph
}

/// The names of the tools the graph's nodes list, in order, with repeats.
pub fn tool_names<S: State, D>(graph: &CompiledGraph<S, D>) -> Vec<&'static str> {
    graph.nodes().iter().flat_map(|n| n.tools.iter().map(|t| t.name())).collect()
}

/// A tool with the graph and the node that list it: `(graph, node, tool)`.
pub type ToolAt = (&'static str, &'static str, &'static dyn Tool);

/// The tools the graph's nodes list, each with the graph and node, in order, with repeats.
pub fn tools_at<S: State, D>(graph: &CompiledGraph<S, D>) -> Vec<ToolAt> {
    let name = graph.name();
    graph.nodes().iter().flat_map(|n| n.tools.iter().map(move |t| (name, n.name, *t))).collect()
}

impl<S: State, D> CompiledGraph<S, D> {
    /// The names of the tools the graph's subgraphs list, at every level
    /// (empty for a graph built without `#[graph]`).
    pub(crate) fn tools_below(&self) -> Vec<&'static str> {
        self.tools_below_at().into_iter().map(|(_, _, t)| t.name()).collect()
    }

    /// The tools the graph's subgraphs list, at every level, with the graph
    /// and node that list each (empty for a graph built without `#[graph]`).
    pub(crate) fn tools_below_at(&self) -> Vec<ToolAt> {
        self.inner.tools_below.map(|f| f()).unwrap_or_default()
    }

    /// Whether a node of the graph runs subgraphs.
    pub(crate) fn has_subgraphs(&self) -> bool {
        self.nodes().iter().any(|n| !n.subgraphs.is_empty())
    }

    /// The tool called `name` in any node's `tools = [..]` list.
    pub fn tool(&self, name: &str) -> Option<&'static dyn Tool> {
        self.nodes().iter().flat_map(|n| n.tools.iter().copied()).find(|t| t.name() == name)
    }

    /// The graph's name.
    pub fn name(&self) -> &'static str {
        self.inner.spec.name
    }

    /// Its id, version and declared migrations (`#[graph(id = .., version = ..)]`).
    pub fn release(&self) -> &crate::release::Release {
        &self.inner.release
    }

    /// Its version (`#[graph(version = N)]`, 1 when absent).
    pub fn version(&self) -> u32 {
        self.inner.release.version
    }

    /// The structural fingerprint: changes whenever nodes, routes, `writes`,
    /// the state type's name, or a node's tools (their names and risk
    /// classes) change. A stored thread resumes only under the same
    /// fingerprint, so a call stopped for approval cannot be resumed by a
    /// graph where that call would be judged differently.
    pub fn fingerprint(&self) -> &str {
        &self.inner.fingerprint
    }

    /// The super-step bound (`max_steps`, or the node count for an acyclic graph).
    pub fn max_steps(&self) -> u32 {
        self.inner.default_max_steps
    }

    /// The start node.
    pub fn start(&self) -> NodeId {
        self.inner.spec.start
    }

    /// The nodes, in declaration order.
    pub fn nodes(&self) -> &[NodeSpec<S, D>] {
        &self.inner.spec.nodes
    }

    /// The node names, in declaration order.
    pub fn node_names(&self) -> Vec<&'static str> {
        self.nodes().iter().map(|n| n.name).collect()
    }

    /// The node with this name.
    pub fn node_id(&self, name: &str) -> Option<NodeId> {
        self.nodes().iter().position(|n| n.name == name).map(|i| NodeId::new(i as u32))
    }

    /// The name of a node.
    pub fn node_name(&self, id: NodeId) -> &'static str {
        self.nodes().get(id.index()).map_or("<unknown>", |n| n.name)
    }

    /// A Mermaid flowchart of the graph. A node with one target gets a solid
    /// edge; a node that chooses among several gets dotted edges.
    pub fn mermaid(&self) -> String {
        let mut out = String::from("flowchart TD\n");
        out.push_str("    __start__([START])\n    __end__([END])\n");
        out.push_str(&format!("    __start__ --> {}\n", self.node_name(self.start())));
        for node in self.nodes() {
            let choices = node.targets.len() + usize::from(node.may_end);
            let arrow = if choices > 1 { "-.->" } else { "-->" };
            for t in node.targets {
                out.push_str(&format!("    {} {arrow} {}\n", node.name, self.node_name(*t)));
            }
            if node.may_end {
                out.push_str(&format!("    {} {arrow} __end__\n", node.name));
            }
        }
        out
    }
}

/// The compile-time fingerprint, extended by each node's tools and their risk
/// classes (which `#[graph]` cannot see). A graph without tools keeps its
/// compile-time fingerprint, so threads stored before tools counted resume.
fn with_tools<S: State, D>(spec: &GraphSpec<S, D>) -> String {
    if spec.nodes.iter().all(|n| n.tools.is_empty()) {
        return spec.fingerprint.to_string();
    }
    let mut canon = format!("{};", spec.fingerprint);
    for node in &spec.nodes {
        canon.push_str(node.name);
        canon.push('[');
        for tool in node.tools {
            canon.push_str(&format!("{}:{},", tool.name(), tool.risk()));
        }
        canon.push_str("];");
    }
    fnv(&canon)
}

/// FNV-1a, 64 bit, as the compile-time part, in 16 hex digits.
fn fnv(canon: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in canon.bytes() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}
