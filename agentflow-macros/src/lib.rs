//! Procedural macros of agentflow: `#[derive(State)]`, `#[graph]` and `#[node]`.
//!
//! Each macro runs the same pipeline: parse (syn to IR), check (pure rules
//! over the IR, every error collected), expand (IR to tokens). Use them
//! through the `agentflow` crate, which re-exports them.

mod diag;
mod graph;
mod state;
mod tool;

use proc_macro::TokenStream;

/// Derives `agentflow::State`: a reducer per field and a typed partial update.
#[proc_macro_derive(State, attributes(state, reduce))]
pub fn derive_state(input: TokenStream) -> TokenStream {
    state::expand::derive(input.into()).into()
}

/// Turns an inline module of `#[node]` async fns into a checked, compiled graph.
#[proc_macro_attribute]
pub fn graph(args: TokenStream, input: TokenStream) -> TokenStream {
    graph::expand::graph(args.into(), input.into()).into()
}

/// Marks an async fn as a node of the enclosing `#[graph]` module.
#[proc_macro_attribute]
pub fn node(args: TokenStream, input: TokenStream) -> TokenStream {
    graph::expand::stray_node(args.into(), input.into()).into()
}

/// Turns an async fn with a typed argument struct into a tool a model can call.
#[proc_macro_attribute]
pub fn tool(args: TokenStream, input: TokenStream) -> TokenStream {
    tool::expand::tool(args.into(), input.into()).into()
}
