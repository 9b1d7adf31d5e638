//! Procedural macros of agentflow: `#[derive(State)]`, `#[graph]`, `#[node]`,
//! `#[tool]` and `mcp_tools!`. Use them through the `agentflow` crate, which re-exports
//! them and documents each one, every argument with an example.
//!
//! # Pipeline
//!
//! Each macro runs the same stages, one module each:
//!
//! 1. **parse** (`parse.rs`): syn -> an IR of plain data (`ir.rs`): names are
//!    strings, places are opaque `Loc`s; the tokens the IR does not hold
//!    (types, bodies) stay with the parser for the expansion. Syntax errors
//!    are collected, not returned at the first one.
//! 2. **resolve** (`graph/resolve.rs`): every name (nodes, `goto` entries,
//!    `goto!` targets, written fields) mapped to what it denotes, with the
//!    close match of a misspelt one. Pure; reports nothing.
//! 3. **check** (`check.rs`): rules, each a pure function over the IR and
//!    its resolution that reports into one `Diagnostics` sink; no rule reads
//!    another's result, so their order is only the order errors print in.
//!    The sink is a drop bomb: errors cannot be collected and then lost.
//! 4. **expand** (`expand.rs`): IR -> tokens, emitted next to the errors so
//!    one mistake does not cascade into rustc errors about missing items;
//!    facts only rustc can judge (field types, reducers) become spanned
//!    compile-time assertions.
//!
//! Every keyword the macros accept lives in `keywords.rs`, and every
//! "did you mean" in `diag.rs`.

mod diag;
mod graph;
mod keywords;
mod mcp;
mod source_path;
mod state;
mod tool;

use proc_macro::TokenStream;

// Derives `agentflow::State`: a reducer per field and a typed partial update. Documented where `agentflow` re-exports it.
#[proc_macro_derive(State, attributes(state, reduce))]
pub fn derive_state(input: TokenStream) -> TokenStream {
    state::expand::derive(input.into()).into()
}

// Turns an inline module of `#[node]` async fns into a checked, compiled graph. Documented where `agentflow` re-exports it.
#[proc_macro_attribute]
pub fn graph(args: TokenStream, input: TokenStream) -> TokenStream {
    graph::expand::graph(args.into(), input.into()).into()
}

// Marks an async fn as a node of the enclosing `#[graph]` module. Documented where `agentflow` re-exports it.
#[proc_macro_attribute]
pub fn node(args: TokenStream, input: TokenStream) -> TokenStream {
    graph::expand::stray_node(args.into(), input.into()).into()
}

// Turns an async fn with a typed argument struct into a tool a model can call. Documented where `agentflow` re-exports it.
#[proc_macro_attribute]
pub fn tool(args: TokenStream, input: TokenStream) -> TokenStream {
    tool::expand::tool(args.into(), input.into()).into()
}

// Types an MCP server's tools from its committed snapshot. Documented where `agentflow` re-exports it.
#[proc_macro]
pub fn mcp_tools(input: TokenStream) -> TokenStream {
    mcp::expand::mcp_tools(input.into()).into()
}
