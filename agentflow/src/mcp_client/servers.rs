//! The MCP connections an [`App`](crate::App) holds, and the one path from a generated MCP
//! tool to its server.

use std::any::Any;
use std::sync::Arc;

use serde_json::Value;

use super::McpClient;
use crate::tool::{RemoteCall, RemoteTools, ToolError};

/// The MCP servers an App's MCP tools call, by the name `mcp_tools!` gave each (the module
/// name). Cheap to clone; `App::mcp` adds one.
#[derive(Clone, Default)]
pub struct McpServers {
    servers: Arc<Vec<McpClient>>,
}

impl std::fmt::Debug for McpServers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.servers.iter().map(McpClient::server)).finish()
    }
}

impl McpServers {
    /// These servers and `client`, which replaces a server of the same name.
    #[must_use]
    pub fn with(&self, client: McpClient) -> Self {
        let mut servers: Vec<McpClient> =
            self.servers.iter().filter(|c| c.server() != client.server()).cloned().collect();
        servers.push(client);
        McpServers { servers: Arc::new(servers) }
    }

    /// The connection to the server named `server`.
    pub fn get(&self, server: &str) -> Option<&McpClient> {
        self.servers.iter().find(|c| c.server() == server)
    }

    /// The servers' names, in the order they were added.
    pub fn names(&self) -> Vec<&str> {
        self.servers.iter().map(McpClient::server).collect()
    }
}

impl RemoteTools for McpServers {
    /// Calls `tool` of `server` for a tool `mcp_tools!` generated; the gateway has checked the
    /// call (allow-list, arguments, policy, approval) and journals it.
    fn call<'a>(&'a self, server: &'a str, tool: &'a str, args: Value) -> RemoteCall<'a> {
        Box::pin(async move {
            let Some(client) = self.get(server) else {
                return Err(ToolError::Fatal(format!(
                    "`{tool}` is a tool of the MCP server `{server}`, and this App has no connection to it (it has \
                     {:?}): connect with `{server}::connect(..)` and pass the client to `App::mcp`",
                    self.names()
                )));
            };
            client.call_tool(tool, args).await
        })
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
