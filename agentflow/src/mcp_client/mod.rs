//! Tools from [Model Context Protocol](https://modelcontextprotocol.io) servers, typed at
//! compile time (feature `mcp`; public as `agentflow::mcp`).
//!
//! A server's tools come from a **committed snapshot** of its tool list (names, descriptions,
//! input schemas), written by `agentflow mcp snapshot` and read by
//! [`mcp_tools!`](crate::mcp_tools) at compile time. The macro makes each tool an item a node
//! lists in `tools = [..]` like a `#[tool]`, with a generated argument struct per tool and the
//! risk class the program gives it, so rustc checks the allow-list, the arguments and the class.
//!
//! At run time the generated `connect` starts the server (a child process over stdio) or
//! reaches it (streamable HTTP), lists its live tools and compares them with the snapshot
//! ([`McpError::Drift`] names each changed tool and the JSON pointer of each change); the
//! [`McpClient`] it returns is handed to [`App::mcp`](crate::App::mcp). Every call then goes
//! through the same gateway as any tool: the node's allow-list, budgets, the policy and
//! approvals, the effect journal, circuit breakers, events, audit and metrics. A call sent
//! that gets no answer (the server died mid-call) is
//! [`ToolError::OutcomeUnknown`](crate::tool::ToolError::OutcomeUnknown): a read runs again,
//! any other call waits for a human.
//!
//! `crate::mcp_server` goes the other way: it serves an App's graph as one MCP tool.
//!
//! The guide: `docs/guides/mcp.md`.

mod client;
mod compare;
mod drift;
mod error;
mod http;
mod result;
mod servers;
mod snapshot;
mod transport;

pub use client::{McpClient, snapshot_of};
pub use compare::compare;
pub use drift::{Change, Drift};
pub use error::McpError;
pub use servers::McpServers;
pub use snapshot::{SNAPSHOT_FORMAT, Snapshot, SnapshotTool};
pub use transport::McpTransport;
