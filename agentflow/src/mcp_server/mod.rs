//! A graph served as an MCP tool: an MCP host (an IDE, a desktop assistant, another agent)
//! starts or continues a durable thread of an App's graph with one tool call, as the actor the
//! program names. Public as `agentflow::mcp::{serve_stdio, serve_io, ServeOptions}`.

mod call;
mod stdio;

pub use stdio::{ServeOptions, serve_io, serve_stdio};
