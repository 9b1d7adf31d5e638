//! Every word the macros give a meaning to, in one place: attribute names,
//! their arguments, reducer and risk names, and the names the body scan
//! looks for. Parsers match on these constants and messages list them, so a
//! keyword cannot be accepted under one spelling and suggested under another.

/// The route target that ends a branch.
pub const END: &str = "END";

/// `#[graph(state = S, deps = D, start = node, max_steps = N, id = "..", version = N, locks = "..", migrate(..))]`.
pub mod graph {
    pub const STATE: &str = "state";
    pub const DEPS: &str = "deps";
    pub const START: &str = "start";
    pub const MAX_STEPS: &str = "max_steps";
    /// How deep the graph may delegate through subgraphs.
    pub const MAX_DEPTH: &str = "max_depth";
    /// `max_depth` when none is given.
    pub const DEFAULT_MAX_DEPTH: u32 = 3;
    /// The graph's stable id, naming its lock directory; declaring it (or `version`) releases the graph.
    pub const ID: &str = "id";
    /// The graph's version, 1 and up.
    pub const VERSION: &str = "version";
    /// The lock directory, relative to the source file holding the `#[graph]`.
    pub const LOCKS: &str = "locks";
    /// `locks` when none is given.
    pub const DEFAULT_LOCKS: &str = "graphs";
    /// `migrate(from = K, nodes(..), tools(..), args(..))`: how threads of version K move on.
    pub const MIGRATE: &str = "migrate";
    /// Every argument, in the order the docs list them.
    pub const ARGS: &[&str] = &[STATE, DEPS, START, MAX_STEPS, MAX_DEPTH, ID, VERSION, LOCKS, MIGRATE];
}

/// `migrate(from = K, nodes(a -> b), tools(a -> b, c -> cancel), args(tool = path, other = cancel))`.
pub mod migrate {
    /// The version the migration starts from; it leads to `from + 1`.
    pub const FROM: &str = "from";
    /// Node renames: `nodes(old -> new, gone -> END)`.
    pub const NODES: &str = "nodes";
    /// Tool renames: `tools(old -> new, gone -> cancel)`.
    pub const TOOLS: &str = "tools";
    /// Argument rewrites of pending approvals: `args(tool = path::to::fn, other = cancel)`.
    pub const ARGS_MAP: &str = "args";
    /// Cancels the pending approvals of a tool.
    pub const CANCEL: &str = "cancel";
    /// The lock file of version N is `v<N>.lock`.
    pub const LOCK_PREFIX: &str = "v";
    /// See [`LOCK_PREFIX`].
    pub const LOCK_SUFFIX: &str = ".lock";
    /// The variable that, set to [`LOCK_WRITE`] at compile time, lets the current version's lock
    /// be rewritten (the generated test writes it).
    pub const LOCK_ENV: &str = "AGENTFLOW_LOCK";
    /// See [`LOCK_ENV`].
    pub const LOCK_WRITE: &str = "write";
    /// The lock format the macro reads.
    pub const LOCK_FORMAT: u64 = 1;
    /// Every argument of `migrate(..)`.
    pub const ARGS: &[&str] = &[FROM, NODES, TOOLS, ARGS_MAP];
}

/// `#[node(goto = [..], writes = [..], tools = [..], retry = N, timeout = 2s, interrupt, sleep)]`.
pub mod node {
    /// The attribute itself.
    pub const ATTR: &str = "node";
    pub const GOTO: &str = "goto";
    pub const WRITES: &str = "writes";
    pub const TOOLS: &str = "tools";
    pub const RETRY: &str = "retry";
    pub const TIMEOUT: &str = "timeout";
    pub const INTERRUPT: &str = "interrupt";
    /// The node may wait on a durable timer (`cx.sleep(..)`).
    pub const SLEEP: &str = "sleep";
    /// How many instances of a map worker run at once.
    pub const PARALLEL: &str = "parallel";
    /// The parameter attribute marking a map worker's payload: `#[payload] task: &Task`.
    pub const PAYLOAD: &str = "payload";
    /// The graphs the node may run as children.
    pub const SUBGRAPHS: &str = "subgraphs";
    /// Every argument, in the order the docs list them.
    pub const ARGS: &[&str] = &[GOTO, WRITES, TOOLS, SUBGRAPHS, RETRY, TIMEOUT, INTERRUPT, SLEEP, PARALLEL];
}

/// `retry(attempts = N, base = 10ms, max_delay = 1s, jitter = false)`.
pub mod retry {
    pub const ATTEMPTS: &str = "attempts";
    pub const BASE: &str = "base";
    pub const MAX_DELAY: &str = "max_delay";
    pub const JITTER: &str = "jitter";
    /// Every argument.
    pub const ARGS: &[&str] = &[ATTEMPTS, BASE, MAX_DELAY, JITTER];
}

/// Duration suffixes of `timeout = ..` and the `retry(..)` delays, with
/// their length in milliseconds.
pub const DURATION_UNITS: &[(&str, u64)] = &[("ms", 1), ("s", 1_000), ("m", 60_000)];

/// `#[tool(risk = read)]`.
pub mod tool {
    pub const RISK: &str = "risk";
    /// The tool honours its idempotency key, so a call cut off mid-way may run again.
    pub const IDEMPOTENT: &str = "idempotent";
    /// The tool that undoes a completed call: `compensate = cancel_order`.
    pub const COMPENSATE: &str = "compensate";
    /// Every argument.
    pub const ARGS: &[&str] = &[RISK, IDEMPOTENT, COMPENSATE];
    /// The risk classes whose calls may name a compensation.
    pub const COMPENSABLE: &[&str] = &["reversible", "external"];
    /// The risk classes a tool may declare, least to most dangerous.
    pub const RISKS: &[&str] = &["read", "reversible", "external", "irreversible"];
}

/// `mcp_tools! { pub mod name from "snapshot.json" { tool: risk [idempotent], .. } }`.
pub mod mcp {
    /// The word between the module's name and the snapshot's path.
    pub const FROM: &str = "from";
    /// After a tool's risk: the server honours the call's idempotency key (as `#[tool(idempotent)]`).
    pub const IDEMPOTENT: &str = super::tool::IDEMPOTENT;
    /// The risk classes a tool may be given (as `#[tool(risk = ..)]`).
    pub const RISKS: &[&str] = super::tool::RISKS;
    /// The module's items the macro adds besides the tools: a tool whose Rust name is one of
    /// these gets a `_` after it (`connect_`).
    pub const RESERVED: &[&str] = &["connect"];
    /// How deep the argument types nest before a level is typed `serde_json::Value`.
    pub const MAX_TYPE_DEPTH: usize = 16;
}

/// `#[derive(State)]` with `#[state(version = N)]`, `#[reduce(..)]` and the field marks
/// `#[state(pii)]`, `#[state(credential)]`.
pub mod state {
    /// The container attribute.
    pub const ATTR: &str = "state";
    pub const VERSION: &str = "version";
    /// The field attribute.
    pub const REDUCE: &str = "reduce";
    pub const APPEND: &str = "append";
    pub const ADD: &str = "add";
    pub const MERGE: &str = "merge";
    pub const MESSAGES: &str = "messages";
    pub const CUSTOM: &str = "custom";
    /// The reducer names `#[reduce(..)]` accepts.
    pub const REDUCERS: &[&str] = &[APPEND, ADD, MERGE, MESSAGES, CUSTOM];
    /// The field mark for personal data: `#[state(pii)]`.
    pub const PII: &str = "pii";
    /// The field mark for values that may look like credentials: `#[state(credential)]`.
    pub const CREDENTIAL: &str = "credential";
    /// The marks a field's `#[state(..)]` accepts.
    pub const FIELD_MARKS: &[&str] = &[PII, CREDENTIAL];
    /// The type name whose fields may not take a reducer.
    pub const SECRET: &str = "Secret";
}

/// Names the scan of a node body recognises.
pub mod body {
    /// The routing macro.
    pub const GOTO: &str = "goto";
    /// `State::update()`, the start of a chain of field setters.
    pub const UPDATE: &str = "update";
    /// Methods of the update type that are not field setters.
    pub const NOT_SETTERS: &[&str] = &["clone", "touched", "is_empty"];
    /// `cx.run_tool(tool, args)`.
    pub const RUN_TOOL: &str = "run_tool";
    /// `cx.interrupt(..)`.
    pub const INTERRUPT: &str = "interrupt";
    /// `cx.subgraph(child, input)`.
    pub const SUBGRAPH: &str = "subgraph";
    /// `cx.sleep(..)` and `cx.sleep_until(..)`.
    pub const SLEEPS: &[&str] = &["sleep", "sleep_until"];
    /// The context type of a node's second parameter.
    pub const CTX: &str = "Ctx";
    /// `each(worker, payloads)` in a `goto!`: one worker instance per payload.
    pub const EACH: &str = "each";
}
