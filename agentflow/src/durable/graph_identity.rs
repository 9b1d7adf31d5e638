//! What durable execution knows of the graph a thread runs, without the graph itself: the
//! checkpointer opens, checks and rebuilds threads through this, and the app provides it.

use serde_json::Value;

use super::error::ResumeError;
use crate::core::node_id::NodeId;

/// The graph of a thread, as the checkpointer sees it.
pub(crate) trait GraphIdentity: Sync {
    /// What a stored thread's graph must match to resume.
    fn fingerprint(&self) -> &str;
    /// The graph's name.
    fn name(&self) -> &str;
    /// Whether its runs write their thread's event log (the app's
    /// [`App::event_log`](crate::App::event_log)).
    fn event_log(&self) -> bool;
    /// The name of the node a new thread starts at.
    fn start_name(&self) -> &'static str;
    /// The node named `name`, if the graph has it.
    fn node_id(&self, name: &str) -> Option<NodeId>;
    /// Whether any node runs a subgraph.
    fn runs_subgraphs(&self) -> bool;
    /// The graph's shape (nodes and routes, tools, writes), kept in a thread's first
    /// checkpoint to explain a later fingerprint change.
    fn shape(&self) -> Value;
    /// The graph's full description, kept under its fingerprint for the tools that read it.
    fn description(&self) -> String;
    /// A state stored at version `stored` migrated to the state's current version.
    fn migrate(&self, thread: &str, stored: u32, state: Value) -> Result<Value, ResumeError>;
}
