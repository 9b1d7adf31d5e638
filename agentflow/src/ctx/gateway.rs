//! How a graph's tool calls are governed: the policy, approvals' lifetime, what a rejection
//! does, the circuit breakers, the crash test's probe and where remote tools are called. An App
//! holds one; every run of it (and every subgraph run below) shares it.

use std::sync::Arc;
use std::time::Duration;

use crate::tool::{OnReject, Policy, RiskPolicy};

/// How the graph's tool calls are governed.
#[derive(Clone)]
pub(crate) struct Gateway {
    pub(crate) policy: Arc<dyn Policy>,
    pub(crate) approval_ttl: Duration,
    pub(crate) on_reject: OnReject,
    pub(crate) breakers: Arc<crate::breaker::Breakers>,
    /// What a crash test watches ([`crate::testing`]); `None` otherwise.
    pub(crate) probe: Option<Arc<dyn crate::probe::Probe>>,
    /// Where the App's remote tools are called: its MCP servers (`App::mcp`, feature `mcp`).
    pub(crate) remote: Option<Arc<dyn crate::tool::RemoteTools>>,
}

impl Default for Gateway {
    fn default() -> Self {
        Gateway {
            policy: Arc::new(RiskPolicy::default()),
            approval_ttl: Duration::from_secs(24 * 3600),
            on_reject: OnReject::default(),
            breakers: Arc::default(),
            probe: None,
            remote: None,
        }
    }
}
