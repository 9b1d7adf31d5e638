//! What connecting to an MCP server, or serving one, can fail with.

use super::Drift;

/// An MCP connection or snapshot that cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    /// The committed snapshot cannot be read.
    #[error("the MCP snapshot cannot be read: {0}")]
    Snapshot(String),
    /// The server could not be started or reached, or did not complete MCP's handshake.
    #[error("MCP server `{server}` could not be reached: {why}")]
    Connect {
        /// The server's name in this program.
        server: String,
        /// What went wrong, and what to check.
        why: String,
    },
    /// The live tools differ from the snapshot: the program was typed against other tools.
    #[error("{}", super::drift::describe(server, drift))]
    Drift {
        /// The server's name in this program.
        server: String,
        /// Each changed or vanished tool, with what changed.
        drift: Vec<Drift>,
    },
    /// The server broke MCP's protocol (a tool list that does not decode, ..).
    #[error("MCP server `{server}`: {why}")]
    Protocol {
        /// The server's name in this program.
        server: String,
        /// What it sent.
        why: String,
    },
}
