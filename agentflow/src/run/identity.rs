//! A run's graph as durable execution sees it: its fingerprint, node names, shape and
//! description, and the state migrations (see [`GraphIdentity`]).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::Setup;
use crate::core::node_id::NodeId;
use crate::core::state::State;
use crate::durable::{GraphIdentity, ResumeError};
use crate::graph::CompiledGraph;

impl<S: State, D> GraphIdentity for Setup<S, D> {
    fn fingerprint(&self) -> &str {
        self.graph.fingerprint()
    }

    fn name(&self) -> &str {
        self.graph.name()
    }

    fn event_log(&self) -> bool {
        self.event_log
    }

    fn start_name(&self) -> &'static str {
        self.graph.node_name(self.graph.start())
    }

    fn node_id(&self, name: &str) -> Option<NodeId> {
        self.graph.node_id(name)
    }

    fn runs_subgraphs(&self) -> bool {
        self.graph.nodes().iter().any(|n| !n.subgraphs.is_empty())
    }

    fn shape(&self) -> Value {
        shape(&self.graph)
    }

    fn description(&self) -> String {
        self.graph.description().to_string()
    }

    fn migrate(&self, thread: &str, stored: u32, state: Value) -> Result<Value, ResumeError> {
        Setup::migrate(self, thread, stored, state)
    }
}

/// The graph's shape, kept in a thread's first checkpoint to explain a fingerprint change.
fn shape<S: State, D>(graph: &CompiledGraph<S, D>) -> Value {
    let nodes: BTreeMap<&str, Vec<&str>> = graph
        .nodes()
        .iter()
        .map(|n| {
            let mut targets: Vec<&str> = n.targets.iter().map(|t| graph.node_name(*t)).collect();
            if n.may_end {
                targets.push("END");
            }
            (n.name, targets)
        })
        .collect();
    let tools: BTreeMap<&str, Vec<String>> = graph
        .nodes()
        .iter()
        .filter(|n| !n.tools.is_empty())
        .map(|n| (n.name, n.tools.iter().map(|t| format!("{}:{}", t.name(), t.risk())).collect()))
        .collect();
    // The rest of what the fingerprint covers, so a refused resume can name it.
    let writes: BTreeMap<&str, Vec<&str>> =
        graph.nodes().iter().filter_map(|n| Some((n.name, S::field_names(n.writes?)))).collect();
    json!({
        "name": graph.name(),
        // The release: a shape stored before these were kept is of version 1.
        "id": graph.release().id,
        "version": graph.version(),
        "nodes": nodes,
        "tools": tools,
        "state": S::NAME,
        "start": graph.node_name(graph.start()),
        "max_steps": graph.max_steps(),
        "writes": writes,
    })
}
