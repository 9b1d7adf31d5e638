//! The App's MCP servers: where the tools `mcp_tools!` generated are called (feature `mcp`).

use std::sync::Arc;

use super::App;
use crate::core::state::State;
use crate::mcp_client::{McpClient, McpServers};

impl<S: State, D> App<S, D> {
    /// Connects the App's MCP tools to a server: calls of the tools that
    /// [`mcp_tools!`](crate::mcp_tools) generated for `client`'s server (the module's name) go
    /// to it, through the same gateway as every tool. A second client for the same server
    /// replaces the first. A run whose node calls an MCP tool of a server the App was not
    /// given fails that call with a fatal error naming the server.
    #[must_use]
    pub fn mcp(mut self, client: McpClient) -> Self {
        let servers = self.mcp_servers().with(client);
        Arc::make_mut(&mut self.setup.gateway).remote = Some(Arc::new(servers));
        self
    }

    /// The MCP servers [`App::mcp`] gave this App.
    pub fn mcp_servers(&self) -> McpServers {
        let current = self.setup.gateway.remote.as_ref().and_then(|r| r.as_any().downcast_ref::<McpServers>());
        current.cloned().unwrap_or_default()
    }
}
