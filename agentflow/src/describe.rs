//! A graph's description as JSON, kept in the store by fingerprint when a
//! thread of the graph is created, so tools without the graph's Rust types
//! (the `agentflow` command-line tool) can draw the graph, fold a thread's
//! state from its stored updates, and check edited tool arguments.

use serde_json::{Value, json};

use crate::core::state::{ReducerKind, State};
use crate::graph::CompiledGraph;
use crate::release::{LockParts, Lockable};

/// The version of the layout written by [`CompiledGraph::description`].
pub const DESCRIPTION_FORMAT: u32 = 1;

/// The name a reducer has in a description (`overwrite`, `append`, `add`,
/// `merge`, `messages`, `custom`).
pub fn reducer_name(kind: ReducerKind) -> &'static str {
    match kind {
        ReducerKind::Overwrite => "overwrite",
        ReducerKind::Append => "append",
        ReducerKind::Add => "add",
        ReducerKind::Merge => "merge",
        ReducerKind::Messages => "messages",
        ReducerKind::Custom => "custom",
    }
}

impl<S: State, D> CompiledGraph<S, D> {
    /// The graph described as JSON: what the store keeps under the graph's
    /// fingerprint ([`Store::put_graph_description`](agentflow_store::Store::put_graph_description))
    /// when a thread of the graph is created.
    ///
    /// Fields: `format` ([`DESCRIPTION_FORMAT`]), `name`, `id` and `version` (the graph's
    /// release, [`CompiledGraph::release`]; a description stored before these were written is
    /// of version 1), `fingerprint`,
    /// `start`, `mermaid` (as [`CompiledGraph::mermaid`]), `nodes` (each
    /// node's targets, `END` included), `state` (`name`, `version` and the
    /// `fields` in declaration order, each with its `reducer` named as by
    /// [`reducer_name`], its Rust `type` as written, [`Field::ty`](crate::Field::ty), and
    /// whether it is `personal` ([`Field::personal()`](crate::Field::personal())) or may hold a
    /// `credential` ([`Field::credential()`](crate::Field::credential())); a description stored
    /// before these marks reads as neither)
    /// and `tools` (each with the `nodes` that may call it,
    /// `risk`, `idempotent`, `description` and the JSON schema of its
    /// `parameters`).
    pub fn description(&self) -> Value {
        let nodes: serde_json::Map<String, Value> = self
            .nodes()
            .iter()
            .map(|n| {
                let mut targets: Vec<&str> = n.targets.iter().map(|t| self.node_name(*t)).collect();
                if n.may_end {
                    targets.push("END");
                }
                (n.name.to_string(), json!(targets))
            })
            .collect();
        let mut tools: Vec<Value> = Vec::new();
        for node in self.nodes() {
            for tool in node.tools {
                if let Some(known) = tools.iter_mut().find(|t| t["name"] == tool.name()) {
                    if let Some(list) = known["nodes"].as_array_mut() {
                        list.push(json!(node.name));
                    }
                    continue;
                }
                tools.push(json!({
                    "name": tool.name(),
                    "nodes": [node.name],
                    "risk": tool.risk().to_string(),
                    "idempotent": tool.idempotent(),
                    "description": tool.description(),
                    "parameters": tool.parameters(),
                }));
            }
        }
        json!({
            "format": DESCRIPTION_FORMAT,
            "name": self.name(),
            "fingerprint": self.fingerprint(),
            "start": self.node_name(self.start()),
            "mermaid": self.mermaid(),
            "nodes": nodes,
            "id": self.release().id,
            "version": self.version(),
            "state": state_description::<S>(),
            "tools": tools,
        })
    }
}

/// The state as a description gives it: `name`, `version` and the `fields` in declaration
/// order, each with its `reducer`, Rust `type` and `personal` and `credential` marks.
fn state_description<S: State>() -> Value {
    let fields: Vec<Value> = S::FIELDS
        .iter()
        .map(|f| {
            json!({
                "name": f.name,
                "reducer": reducer_name(f.reducer),
                "type": f.ty,
                "personal": f.personal,
                "credential": f.credential,
            })
        })
        .collect();
    json!({ "name": S::NAME, "version": S::VERSION, "fields": fields })
}

impl<S: State, D> Lockable for CompiledGraph<S, D> {
    fn lock_parts(&self) -> LockParts<'_> {
        LockParts {
            release: self.release(),
            name: self.name(),
            fingerprint: self.fingerprint(),
            start: self.node_name(self.start()),
            max_steps: self.max_steps(),
            tools: self.nodes().iter().flat_map(|n| n.tools.iter().copied()).collect(),
            state: state_description::<S>(),
        }
    }
}
