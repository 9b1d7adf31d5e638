//! The committed snapshot of a server's tool list, which `mcp_tools!` types the tools from and
//! `connect` compares the live server with.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::McpError;

/// The snapshot format this version writes and reads.
pub const SNAPSHOT_FORMAT: u32 = 1;

/// A server's tool list as committed (`mcp/everything.json`): what `agentflow mcp snapshot`
/// prints and `mcp_tools!` reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Snapshot {
    /// The snapshot format, [`SNAPSHOT_FORMAT`].
    pub format: u32,
    /// The server as it introduced itself (its `serverInfo`); shown, never checked.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub server: Value,
    /// The tools, as the server listed them (those left out when it was taken are not here).
    pub tools: Vec<SnapshotTool>,
}

/// One tool of a [`Snapshot`], in MCP's own field names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SnapshotTool {
    /// The name the server calls it by.
    pub name: String,
    /// A display name; not compared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// What the model reads; a changed description is drift.
    #[serde(default)]
    pub description: String,
    /// The JSON schema of the arguments; any change is drift.
    #[serde(rename = "inputSchema")]
    pub input_schema: Value,
    /// The JSON schema of `structuredContent`, if the server gives one; any change is drift.
    #[serde(rename = "outputSchema", default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// The server's hints (`readOnlyHint`, `idempotentHint`, ..): shown, never trusted over the
    /// risk class the program gives the tool, and not compared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Value>,
}

impl Snapshot {
    /// Reads a snapshot (the bytes `mcp_tools!` embeds).
    pub fn parse(bytes: &[u8]) -> Result<Snapshot, McpError> {
        let snapshot: Snapshot =
            serde_json::from_slice(bytes).map_err(|e| McpError::Snapshot(format!("it is not a snapshot: {e}")))?;
        if snapshot.format != SNAPSHOT_FORMAT {
            return Err(McpError::Snapshot(format!(
                "it is in format {}, and this version reads format {SNAPSHOT_FORMAT}: take it again with \
                 `agentflow mcp snapshot`",
                snapshot.format
            )));
        }
        Ok(snapshot)
    }

    /// The tool named `name`.
    pub fn tool(&self, name: &str) -> Option<&SnapshotTool> {
        self.tools.iter().find(|t| t.name == name)
    }

    /// The snapshot as its file holds it: pretty JSON, tools in name order, a final newline.
    pub fn to_file_text(&self) -> String {
        let mut sorted = self.clone();
        sorted.tools.sort_by(|a, b| a.name.cmp(&b.name));
        let mut text = serde_json::to_string_pretty(&sorted).unwrap_or_default();
        text.push('\n');
        text
    }
}
