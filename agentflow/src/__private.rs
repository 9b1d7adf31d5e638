//! Items the macro-generated code names. Not public API: no stability promise.

pub use serde;

pub use crate::release::{ArgsMigration, GraphMigration, Release, ToolMigration};

pub use crate::core::clock::{Civil, civil};
pub use crate::core::reducer::{Add, Append, Merge, Messages};
pub use crate::core::step::{each, route};
pub use crate::graph::{
    GraphSpec, NodeFn, NodeFuture, NodeSpec, ToolAt, compile, erase_deps, tool_names, tools_at, with_release,
    with_tools_below,
};
pub use agentflow_macros::{State, graph, node};

use crate::core::error::NodeError;
use crate::core::state::{Field, State};
use crate::core::step::Step;
use crate::ctx::Ctx;

// The impls of the traits below are `do_not_recommend`: the trait's message
// already names the accepted forms, better than a list of impls in this file.

/// What a node fn may return: `Step<S>` or `Result<Step<S>, E>` with `E: Into<NodeError>`.
#[diagnostic::on_unimplemented(
    message = "a node must return `Step<{S}>` or `Result<Step<{S}>, E>` where `E: Into<NodeError>`, not `{Self}`",
    label = "expected `Step<{S}>` or `Result<Step<{S}>, NodeError>`",
    note = "expected form: `async fn name(state: &{S}, cx: &Ctx<Deps>) -> Step<{S}>`"
)]
pub trait IntoStep<S: State> {
    /// Converts the node's return value.
    fn into_step(self) -> Result<Step<S>, NodeError>;
}

#[diagnostic::do_not_recommend]
impl<S: State> IntoStep<S> for Step<S> {
    fn into_step(self) -> Result<Step<S>, NodeError> {
        Ok(self)
    }
}

#[diagnostic::do_not_recommend]
impl<S: State, E: Into<NodeError>> IntoStep<S> for Result<Step<S>, E> {
    fn into_step(self) -> Result<Step<S>, NodeError> {
        self.map_err(Into::into)
    }
}

/// The type of a node's first parameter: `&S`.
#[diagnostic::on_unimplemented(
    message = "a node's first parameter must be `&{S}` (the graph's state), not `{Self}`",
    label = "expected `&{S}`",
    note = "expected form: `async fn name(state: &{S}, cx: &Ctx<Deps>) -> Step<{S}>`"
)]
pub trait StateParam<'a, S> {
    /// Passes the state snapshot.
    fn from_state(state: &'a S) -> Self;
}

#[diagnostic::do_not_recommend]
impl<'a, S> StateParam<'a, S> for &'a S {
    fn from_state(state: &'a S) -> Self {
        state
    }
}

/// The type of a node's second parameter when it is the context: `&Ctx<D>`.
#[diagnostic::on_unimplemented(
    message = "a node's context parameter must be `&Ctx<{D}>` (the graph's deps), not `{Self}`",
    label = "expected `&Ctx<{D}>`",
    note = "the graph's deps type is `{D}`, set with `#[graph(deps = ..)]`"
)]
pub trait CtxParam<'a, D> {
    /// Passes the context.
    fn from_ctx(cx: &'a Ctx<'a, D>) -> Self;
}

#[diagnostic::do_not_recommend]
impl<'a, D> CtxParam<'a, D> for &'a Ctx<'a, D> {
    fn from_ctx(cx: &'a Ctx<'a, D>) -> Self {
        cx
    }
}

/// The type of a node's second parameter when it is the dependencies: `&D`.
#[diagnostic::on_unimplemented(
    message = "a node's second parameter must be `&{D}` (the graph's `deps`) or `&Ctx<{D}>`, not `{Self}`",
    label = "expected `&{D}` or `&Ctx<{D}>`",
    note = "the graph's deps type is `{D}`, set with `#[graph(deps = ..)]`"
)]
pub trait DepsParam<'a, D> {
    /// Passes the dependencies.
    fn from_deps(deps: &'a D) -> Self;
}

#[diagnostic::do_not_recommend]
impl<'a, D> DepsParam<'a, D> for &'a D {
    fn from_deps(deps: &'a D) -> Self {
        deps
    }
}

/// The payload of the map-worker instance `cx` runs, decoded as `T`.
///
/// A worker reached without a payload (a plan built by hand) fails instead of
/// guessing.
pub fn payload_of<T: crate::core::step::Payload, D>(cx: &Ctx<'_, D>) -> Result<T, NodeError> {
    let Some((i, value)) = cx.payload else {
        return Err(NodeError::fatal(format!(
            "node `{}` takes a payload but was started without one; reach it with `goto!(each({}, payloads))`",
            cx.node, cx.node
        )));
    };
    T::deserialize(value).map_err(|e| {
        NodeError::fatal(format!(
            "payload {i} of node `{}` does not decode as `{}`: {e}",
            cx.node,
            std::any::type_name::<T>()
        ))
    })
}

/// Passes the dependencies of `cx`.
pub fn deps_of<'a, D>(cx: &'a Ctx<'a, D>) -> &'a D {
    cx.deps
}

/// Stands in for a `goto!` whose targets were rejected, so one bad route
/// does not cascade into type errors; the `compile_error!` next to it stops the build.
pub fn invalid_route<S: State>() -> Step<S> {
    route(&[], S::Update::default())
}

const fn str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// The index of field `name` in `fields`, if any (evaluated at compile time).
pub const fn field_index(fields: &[Field], name: &str) -> Option<usize> {
    let mut i = 0;
    while i < fields.len() {
        if str_eq(fields[i].name, name) {
            return Some(i);
        }
        i += 1;
    }
    None
}

/// Whether `name` is a field of `fields` (evaluated at compile time).
pub const fn has_field(fields: &[Field], name: &str) -> bool {
    field_index(fields, name).is_some()
}

/// Whether field `name` exists and is overwrite-reduced (evaluated at compile time).
pub const fn is_overwrite(fields: &[Field], name: &str) -> bool {
    match field_index(fields, name) {
        Some(i) => fields[i].reducer.is_overwrite(),
        None => false,
    }
}

/// The bit mask of the named fields (evaluated at compile time; unknown names are
/// reported separately).
pub const fn mask_of(fields: &[Field], names: &[&str]) -> u64 {
    let mut mask = 0;
    let mut i = 0;
    while i < names.len() {
        if let Some(bit) = field_index(fields, names[i]) {
            mask |= 1 << bit;
        }
        i += 1;
    }
    mask
}

pub use async_trait::async_trait;
pub use serde_json;

/// Reads a field of a state's `Update` that is present: `Some(value)`, and
/// for `null`, `Some` of the field type's null where it has one (an `Option`
/// field cleared with `None`, a `serde_json::Value` set to `Null`). A field
/// that is absent is not set (the derive's `#[serde(default)]`), and so is
/// `null` for a type without a null (as before: such updates were stored by
/// earlier versions and must keep reading back). Without this, serde reads
/// `null` as "not set", and a stored update that cleared a field would read
/// back as one that left it alone.
pub fn present<'de, De, T>(deserializer: De) -> Result<Option<T>, De::Error>
where
    De: serde::Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    struct Present<T>(std::marker::PhantomData<T>);
    impl<'de, T: serde::Deserialize<'de>> serde::de::Visitor<'de> for Present<T> {
        type Value = Option<T>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a field's value")
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Option<T>, E> {
            Ok(T::deserialize(serde::de::value::UnitDeserializer::<E>::new()).ok())
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Option<T>, E> {
            self.visit_none()
        }
        fn visit_some<D2: serde::Deserializer<'de>>(self, deserializer: D2) -> Result<Option<T>, D2::Error> {
            T::deserialize(deserializer).map(Some)
        }
    }
    deserializer.deserialize_option(Present(std::marker::PhantomData))
}

/// What a `#[tool]`'s argument type must be: deserializable (to check a
/// model's arguments) and described by a JSON schema (to show the model).
/// One trait, so a type missing either gets one error that says what to derive.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be the arguments of a tool: it needs `serde::Deserialize` and `schemars::JsonSchema`",
    label = "the arguments of a tool",
    note = "the model is shown the arguments' JSON schema and its calls are checked against it: \
            `#[derive(serde::Deserialize, schemars::JsonSchema)]` on `{Self}`"
)]
pub trait ToolArgs: Sized {
    /// The JSON schema handed to models.
    fn schema() -> serde_json::Value;
    /// Checks and decodes a model's arguments against `schema`.
    fn parse(args: &serde_json::Value, schema: &serde_json::Value) -> Result<Self, crate::tool::ArgumentError>;
}

#[diagnostic::do_not_recommend]
impl<T: serde::de::DeserializeOwned + schemars::JsonSchema> ToolArgs for T {
    fn schema() -> serde_json::Value {
        crate::tool::schema_of::<T>()
    }
    fn parse(args: &serde_json::Value, schema: &serde_json::Value) -> Result<Self, crate::tool::ArgumentError> {
        crate::tool::validate_args(args, schema)
    }
}

/// What a `#[tool]` fn may return: `Result<T, ToolError>` with `T: Serialize`.
#[diagnostic::on_unimplemented(
    message = "a tool must return `Result<T, ToolError>` where `T: Serialize`, not `{Self}`",
    label = "expected `Result<T, ToolError>`",
    note = "return `Err(ToolError::Correctable(..))` for what the model can fix (it gets a `TOOL_ERROR` observation)"
)]
pub trait ToolReturn {
    /// `T` of `Result<T, ToolError>`.
    type Value;
    /// The result as the JSON the gateway hands back.
    fn into_json(self) -> Result<serde_json::Value, crate::tool::ToolError>;
}

#[diagnostic::do_not_recommend]
impl<T: serde::Serialize> ToolReturn for Result<T, crate::tool::ToolError> {
    type Value = T;
    fn into_json(self) -> Result<serde_json::Value, crate::tool::ToolError> {
        let value = self?;
        crate::core::encode::to_value(&value, "result", crate::durable::MAX_JSON_DEPTH)
            .map_err(|e| crate::tool::ToolError::Unrecorded(format!("the tool's result cannot be stored: {e}")))
    }
}

/// Converts a `#[tool]` body's result into the JSON the gateway hands back.
pub fn tool_result<R: ToolReturn>(result: R) -> Result<serde_json::Value, crate::tool::ToolError> {
    result.into_json()
}

/// The deps type a `#[tool]` reads: `D` for `cx: &ToolCx<D>` or `deps: &D`,
/// `dyn NoDeps` for a tool that needs none (it fits a graph with any deps).
/// `#[graph]` checks it against the graph's deps for each listed tool.
pub trait ToolDeps {
    /// The tool's deps type.
    type Deps: ?Sized;
    /// The tool's `Tool::name()`, known to the compiler: `#[graph]` refuses a
    /// node whose listed tools share one (the gateway finds a tool by name).
    const NAME: &'static str;
}

/// Stands for "no deps" in [`ToolDeps::Deps`]: unsized, so it is never a
/// graph's deps type.
pub trait NoDeps {}

/// The call's context with the graph's deps typed as `D`. `#[graph]` has
/// checked that they are; if not (a hand-made graph), the call fails, it
/// does not panic.
pub fn typed_cx<'a, D: std::any::Any>(
    cx: &crate::tool::ToolCx<'a, crate::tool::AnyDeps>,
    tool: &str,
) -> Result<crate::tool::ToolCx<'a, D>, crate::tool::ToolError> {
    cx.typed::<D>().ok_or_else(|| {
        crate::tool::ToolError::Fatal(format!(
            "tool `{tool}` takes `&{}`, and the graph's deps are of another type",
            std::any::type_name::<D>()
        ))
    })
}

/// The call's context for a tool that needs no deps.
pub fn untyped_cx<'a>(cx: &crate::tool::ToolCx<'a, crate::tool::AnyDeps>) -> crate::tool::ToolCx<'a, ()> {
    cx.without_deps()
}

/// A context for running one tool's body in its own unit test, with the
/// deps the test passes; the `test_call` method `#[tool]` generates under
/// `cfg(test)` makes it. It is typed (`D: Sized`), so it cannot be passed
/// to [`Tool::invoke`](crate::tool::Tool::invoke), which takes the context
/// only the gateway makes: no path around the gateway.
pub fn test_cx<'a, D>(tool: &'static str, deps: &'a D) -> crate::tool::ToolCx<'a, D> {
    crate::tool::ToolCx::new("test-call", tool, "test", deps)
}

// ------------------------------------------------------------ subgraphs

const CHAIN_CAP: usize = 240;

/// How deep a graph delegates (1, plus its deepest subgraph's depth) and
/// that deepest chain, `a -> b -> c`, built at compile time for the error
/// of a graph that delegates too deep.
pub struct Chain {
    buf: [u8; CHAIN_CAP],
    len: usize,
    depth: usize,
}

impl Chain {
    /// 1, plus the deepest subgraph's depth.
    pub const fn depth(&self) -> usize {
        self.depth
    }

    const fn push(mut self, s: &str) -> Self {
        let bytes = s.as_bytes();
        let mut i = 0;
        while i < bytes.len() && self.len < CHAIN_CAP {
            self.buf[self.len] = bytes[i];
            self.len += 1;
            i += 1;
        }
        self
    }

    const fn push_num(self, mut n: usize) -> Self {
        let mut digits = [0u8; 20];
        let mut k = 0;
        loop {
            digits[k] = b'0' + (n % 10) as u8;
            k += 1;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        let mut out = self;
        while k > 0 {
            k -= 1;
            if out.len < CHAIN_CAP {
                out.buf[out.len] = digits[k];
                out.len += 1;
            }
        }
        out
    }

    const fn push_chain(mut self, other: &Chain) -> Self {
        let mut i = 0;
        while i < other.len && self.len < CHAIN_CAP {
            self.buf[self.len] = other.buf[i];
            self.len += 1;
            i += 1;
        }
        self
    }

    const fn as_str(&self) -> &str {
        // Cut back to a char boundary if the capacity split one.
        let mut len = self.len;
        while len > 0 && (self.buf[len - 1] & 0xC0) == 0x80 {
            len -= 1;
        }
        if len > 0 && self.buf[len - 1] >= 0xC0 {
            len -= 1;
        }
        match core::str::from_utf8(self.buf.split_at(len).0) {
            Ok(s) => s,
            Err(_) => "",
        }
    }
}

/// Graph `name` over its subgraphs' chains: `name -> ` its deepest child's chain.
pub const fn chain(name: &str, children: &[&Chain]) -> Chain {
    let mut out = Chain { buf: [0; CHAIN_CAP], len: 0, depth: 1 }.push(name);
    let (mut i, mut deepest) = (0, None::<usize>);
    while i < children.len() {
        let better = match deepest {
            None => true,
            Some(d) => children[i].depth > children[d].depth,
        };
        if better {
            deepest = Some(i);
        }
        i += 1;
    }
    match deepest {
        Some(d) => {
            out.depth = children[d].depth + 1;
            out.push(" -> ").push_chain(children[d])
        }
        None => out,
    }
}

/// Fails the build when a graph delegates deeper than its `max_depth`.
pub const fn check_depth(name: &str, max: usize, chain: &Chain) {
    let depth = chain.depth;
    if depth <= max {
        return;
    }
    let message = Chain { buf: [0; CHAIN_CAP], len: 0, depth: 0 }
        .push("graph `")
        .push(name)
        .push("` delegates ")
        .push_num(depth)
        .push(" levels deep (")
        .push_chain(chain)
        .push("), more than its max_depth of ")
        .push_num(max)
        .push("; raise it with `#[graph(max_depth = ")
        .push_num(depth)
        .push(")]` or fold a level into a node");
    panic!("{}", message.as_str());
}

/// Calls `tool` of the MCP server `server` for a tool `mcp_tools!` generated.
#[cfg(feature = "mcp")]
pub async fn mcp_call(
    cx: &crate::tool::ToolCx<'_, crate::tool::AnyDeps>,
    server: &'static str,
    tool: &'static str,
    args: serde_json::Value,
) -> Result<serde_json::Value, crate::tool::ToolError> {
    let Some(remote) = cx.remote() else {
        return Err(crate::tool::ToolError::Fatal(format!(
            "`{tool}` is a tool of the MCP server `{server}`, and this run has no MCP connections: connect with \
             `{server}::connect(..)` and pass the client to `App::mcp` (an in-memory `CompiledGraph::run` has none)"
        )));
    };
    remote.call(server, tool, args).await
}

/// The input schema `mcp_tools!` embedded for a tool, as the model is shown it. The macro
/// wrote the text from parsed JSON; were it unreadable, the schema of any object stands in.
#[cfg(feature = "mcp")]
pub fn mcp_schema(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|_| serde_json::json!({ "type": "object" }))
}

/// Checks arguments for a tool `mcp_tools!` generated: the shape (an object, no unknown field,
/// not too deep), then that they decode as its argument struct `A`.
#[cfg(feature = "mcp")]
pub fn mcp_args<A: serde::de::DeserializeOwned>(
    args: &serde_json::Value,
    schema: &serde_json::Value,
) -> Result<A, crate::tool::ArgumentError> {
    crate::tool::validate_args(args, schema)
}

/// Whether two listed tools share a `Tool::name()` (`#[graph]`'s check that
/// a node's tools can be told apart by the name the model calls).
#[doc(hidden)]
pub const fn same_tool_name(a: &str, b: &str) -> bool {
    str_eq(a, b)
}

/// A tool's input schema as `mcp_tools!` embedded it, parsed and compiled once (a `static` per
/// tool): what `parameters()` shows the model and what `validate` checks arguments against.
#[cfg(feature = "mcp")]
pub struct McpSchema {
    text: &'static str,
    value: std::sync::OnceLock<serde_json::Value>,
    validator: std::sync::OnceLock<Option<jsonschema::Validator>>,
}

#[cfg(feature = "mcp")]
impl McpSchema {
    /// The schema of `text` (JSON the macro wrote), parsed on first use.
    pub const fn new(text: &'static str) -> Self {
        Self { text, value: std::sync::OnceLock::new(), validator: std::sync::OnceLock::new() }
    }

    /// The schema as JSON (see [`mcp_schema`]).
    pub fn value(&self) -> &serde_json::Value {
        self.value.get_or_init(|| mcp_schema(self.text))
    }

    /// Checks `args`: the shape (an object that reads back, no unknown field), then the whole
    /// JSON schema (`enum`, `minimum`, `pattern`, ..; skipped when the snapshot's schema does not
    /// compile: the struct check still holds), then that they decode as `A`, whose structs refuse
    /// fields their schema does not declare at every level. An integral float (`1.0`) passes for
    /// an `integer`, as JSON Schema counts it.
    pub fn check<A: serde::de::DeserializeOwned>(
        &self,
        args: &serde_json::Value,
    ) -> Result<A, crate::tool::ArgumentError> {
        let schema = self.value();
        crate::tool::check_args_shape(args, schema)?;
        let validator = self.validator.get_or_init(|| jsonschema::validator_for(schema).ok());
        if let Some(e) = validator.as_ref().and_then(|v| v.iter_errors(args).next()) {
            let at = e.instance_path().to_string();
            let at = if at.is_empty() { "/".to_string() } else { at };
            return Err(crate::tool::ArgumentError(format!(
                "argument `{at}` breaks the schema's `{}` rule: {e}",
                e.kind().keyword()
            )));
        }
        let decoded = match integral_floats_as_ints(args) {
            Some(normal) => A::deserialize(&normal),
            None => A::deserialize(args),
        };
        decoded.map_err(|e| crate::tool::ArgumentError(e.to_string()))
    }
}

/// `args` with every integral float (`1.0`) written as an integer, or `None` when there is none.
#[cfg(feature = "mcp")]
fn integral_floats_as_ints(args: &serde_json::Value) -> Option<serde_json::Value> {
    use serde_json::Value;
    fn has(v: &Value) -> bool {
        match v {
            Value::Number(n) => as_int(n).is_some(),
            Value::Array(items) => items.iter().any(has),
            Value::Object(map) => map.values().any(has),
            _ => false,
        }
    }
    fn as_int(n: &serde_json::Number) -> Option<i64> {
        let f = n.as_f64().filter(|_| n.is_f64())?;
        // Within the range where every integral f64 is exact: no rounding passes as a match.
        (f.fract() == 0.0 && f.abs() <= 9_007_199_254_740_992.0).then_some(f as i64)
    }
    fn normal(v: &Value) -> Value {
        match v {
            Value::Number(n) => as_int(n).map_or_else(|| v.clone(), Value::from),
            Value::Array(items) => Value::Array(items.iter().map(normal).collect()),
            Value::Object(map) => Value::Object(map.iter().map(|(k, v)| (k.clone(), normal(v))).collect()),
            other => other.clone(),
        }
    }
    has(args).then(|| normal(args))
}
