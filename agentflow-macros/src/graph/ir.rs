//! The graph IR: plain data, no syn. Names are strings, places are [`Loc`]s.

use crate::diag::Loc;

pub use crate::keywords::END;

/// A name and where it was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Named {
    /// The identifier.
    pub name: String,
    /// Where it stands in the source.
    pub loc: Loc,
}

impl Named {
    /// A name with no place, for IR built in tests.
    #[cfg(test)]
    pub fn new(name: &str) -> Self {
        Named { name: name.to_string(), loc: Loc::DUMMY }
    }
}

/// A whole `#[graph]` module.
#[derive(Debug, Clone)]
pub struct GraphIr {
    /// The module name.
    pub name: String,
    /// The `#[graph(..)]` attribute, for errors about the whole graph.
    pub loc: Loc,
    /// `state = S`, as written, for messages.
    pub state: String,
    /// `deps = D`, as written, for messages.
    pub deps: Option<String>,
    /// `start = node`.
    pub start: Option<Named>,
    /// `max_steps = N`.
    pub max_steps: Option<u32>,
    /// `max_depth = N`: how deep it may delegate through subgraphs.
    pub max_depth: Option<u32>,
    /// The `#[node]` fns, in declaration order.
    pub nodes: Vec<NodeIr>,
}

/// One `#[node]` fn.
#[derive(Debug, Clone)]
pub struct NodeIr {
    /// The fn name.
    pub name: Named,
    /// `goto = [..]`: where the node may go, `END` included.
    pub goto: Vec<Named>,
    /// Where `goto` is written; `None` when the node has no `goto` list.
    pub goto_loc: Option<Loc>,
    /// `writes = [..]`, if declared.
    pub writes: Option<Vec<Named>>,
    /// Every `goto!(..)` in the body, in source order.
    pub routes: Vec<Route>,
    /// Fields set through `State::update().field(..)` chains in the body.
    pub sets: Vec<Named>,
    /// `tools = [..]`: the tools the node may call.
    pub tools: Vec<Named>,
    /// Tools the body calls directly with `cx.run_tool(tool, ..)`.
    pub tool_uses: Vec<Named>,
    /// `subgraphs = [..]`: the graphs the node may run as children.
    pub subgraphs: Vec<Named>,
    /// Graphs the body runs with `cx.subgraph(graph, ..)`.
    pub subgraph_uses: Vec<Named>,
    /// `interrupt`: the node may pause for a human.
    pub interrupt: bool,
    /// Where the body calls `.interrupt(..)`, if it does.
    pub interrupt_calls: Vec<Loc>,
    /// `sleep`: the node may wait on a durable timer.
    pub sleep: bool,
    /// Where the body calls `.sleep(..)` or `.sleep_until(..)` (the method, and where).
    pub sleep_calls: Vec<(String, Loc)>,
    /// The fn's signature, as far as the macro can judge it.
    pub sig: Signature,
    /// Where its `#[payload]` parameter is, for a map worker.
    pub payload: Option<Loc>,
    /// Where `parallel = N` is written, if it is.
    pub parallel: Option<Loc>,
}

/// One `goto!(..)` call site.
#[derive(Debug, Clone)]
pub struct Route {
    /// Its targets: one, several for a fan-out, or `END`; the workers of
    /// its `each(worker, payloads)` entries among them.
    pub targets: Vec<Named>,
    /// Which of `targets` are written `each(worker, ..)`, by position.
    pub each: Vec<usize>,
}

/// The signature facts the checks need; types are left to rustc.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature {
    /// `async fn`.
    pub is_async: bool,
    /// The shape of the first parameter.
    pub state: Param,
    /// Each parameter's type (for `&mut S`, its `mut`), in order.
    pub params: Vec<Loc>,
    /// Each parameter as a whole, for messages that show it as it should be written.
    pub written: Vec<Written>,
    /// The position of the `#[payload]` parameter, if there is one.
    pub payload_at: Option<usize>,
    /// The positions of the parameters written `&Ctx<..>` (told by the type's name).
    pub ctx_at: Vec<usize>,
    /// The generic parameters, if the fn has any.
    pub generics: Option<Loc>,
    /// The `fn` token.
    pub loc: Loc,
}

impl Signature {
    /// `async fn n(state: &S, cx: &Ctx<D>)`.
    #[cfg(test)]
    pub fn valid() -> Self {
        Signature {
            is_async: true,
            state: Param::Ref,
            params: vec![Loc::DUMMY; 2],
            written: Vec::new(),
            payload_at: None,
            ctx_at: vec![1],
            generics: None,
            loc: Loc::DUMMY,
        }
    }
}

/// One parameter of a node fn, as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// Its pattern and type, without its attributes: `ticker: &String`.
    pub text: String,
    /// From the start of its pattern to the end of its type.
    pub loc: Loc,
}

/// How the state parameter is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Param {
    /// `&S`: right.
    Ref,
    /// `&mut S`.
    RefMut,
    /// `S` by value.
    Value,
    /// `self`.
    Receiver,
    /// No parameter.
    Missing,
}

/// What `#[graph(id = .., version = .., locks = .., migrate(..))]` declares.
#[derive(Debug, Clone, Default)]
pub struct ReleaseIr {
    /// `id = ".."`, if written.
    pub id: Option<(String, Loc)>,
    /// `version = N`, if written (0 included, reported by the checks).
    pub version: Option<(u32, Loc)>,
    /// `locks = ".."`, if written.
    pub locks: Option<(String, Loc)>,
    /// Each `migrate(..)`, in the order written.
    pub migrations: Vec<MigrationIr>,
}

impl ReleaseIr {
    /// Whether the graph declares `id` or `version`: it has locks and a generated test.
    pub fn is_released(&self) -> bool {
        self.id.is_some() || self.version.is_some()
    }

    /// The declared version, 1 when absent.
    pub fn version(&self) -> u32 {
        self.version.as_ref().map_or(1, |v| v.0)
    }

    /// Where errors about the graph's version go: `version = N`, else `id = ".."`, else `fallback`.
    pub fn version_loc(&self, fallback: Loc) -> Loc {
        self.version.as_ref().map(|v| v.1).or(self.id.as_ref().map(|i| i.1)).unwrap_or(fallback)
    }
}

/// One `migrate(from = K, ..)`.
#[derive(Debug, Clone)]
pub struct MigrationIr {
    /// `from = K`.
    pub from: u32,
    /// Where `K` is written.
    pub from_loc: Loc,
    /// `nodes(a -> b)`, in order; `b` may be `END`.
    pub nodes: Vec<(Named, Named)>,
    /// `tools(a -> b | cancel)`, in order.
    pub tools: Vec<(Named, ToolTarget)>,
    /// `args(tool = path | cancel)`, in order: the tool, and whether its approvals are cancelled.
    pub args: Vec<(Named, bool)>,
}

/// What a pending approval for a renamed or removed tool becomes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolTarget {
    /// It asks for this tool.
    Rename(Named),
    /// It is cancelled.
    Cancel,
}
