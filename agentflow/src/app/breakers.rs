//! The App's circuit-breaker configuration (`App::circuit_breaker`). Kept
//! out of `breaker.rs`, which the runtime's core files import, so that no
//! file the App imports imports the App back.

use crate::app::App;
use crate::breaker::{Breaker, BreakerConfigError};
use crate::core::state::State;

impl<S: State, D> App<S, D> {
    /// Guards `tool` with a circuit breaker (replacing an earlier one for
    /// it; it takes precedence over [`App::circuit_breakers`](crate::App::circuit_breakers)).
    /// See the [`breaker`](crate::breaker) module for the rule.
    ///
    /// # Errors
    ///
    /// [`BreakerConfigError::UnknownTool`] when no node of the graph, nor of
    /// its subgraphs (whose tools the App's breakers guard too), lists `tool`
    /// in its `tools = [..]`.
    pub fn circuit_breaker(mut self, tool: &str, breaker: Breaker) -> Result<Self, BreakerConfigError> {
        let below = self.setup.graph.tools_below();
        if self.setup.graph.tool(tool).is_none() && !below.contains(&tool) {
            let mut tools: Vec<&'static str> = crate::graph::tool_names(&self.setup.graph);
            tools.extend(below);
            tools.sort_unstable();
            tools.dedup();
            return Err(BreakerConfigError::UnknownTool {
                graph: self.setup.graph.name(),
                tool: tool.to_string(),
                tools,
            });
        }
        std::sync::Arc::make_mut(&mut std::sync::Arc::make_mut(&mut self.setup.gateway).breakers)
            .per_tool
            .insert(tool.to_string(), breaker);
        Ok(self)
    }

    /// Guards every tool of the graph that has no breaker of its own
    /// ([`App::circuit_breaker`](crate::App::circuit_breaker)) with `breaker`,
    /// each tool with its own state.
    #[must_use]
    pub fn circuit_breakers(mut self, breaker: Breaker) -> Self {
        std::sync::Arc::make_mut(&mut std::sync::Arc::make_mut(&mut self.setup.gateway).breakers).every = Some(breaker);
        self
    }
}
