//! A graph's lock: what the committed `v<N>.lock` of a released version holds, built from the
//! graph, written as sorted, pretty JSON and read back with the file named in every error.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use super::declaration::Release;
use super::lock_error::LockError;
use crate::tool::{Risk, Tool};

/// The lock format this crate writes and reads. A lock is a JSON object:
/// `{"format": 1, "id", "version", "graph", "fingerprint", "start", "max_steps",
/// "nodes": {NODE: {"goto": [..], "writes": [..] | null, "tools": [..], "subgraphs": [..],
/// "interrupt": bool, "sleep": bool, "map": bool}}, "tools": {TOOL: {"risk", "approval",
/// "schema"}}, "state": {"name", "version", "fields": [{"name", "type", "reducer",
/// "personal", "credential"}]}}`, keys sorted, lists sorted, pretty-printed.
pub const LOCK_FORMAT: u32 = 1;

/// A graph a lock can be built from: [`CompiledGraph`](crate::CompiledGraph) is one.
pub trait Lockable {
    /// What the lock of the graph's current version is built from.
    fn lock_parts(&self) -> LockParts<'_>;
}

/// What a graph's lock is built from (see [`Lockable`]).
#[derive(Debug)]
#[non_exhaustive]
pub struct LockParts<'a> {
    /// The graph's id, version and migrations.
    pub release: &'a Release,
    /// The graph's name.
    pub name: &'a str,
    /// Its fingerprint.
    pub fingerprint: &'a str,
    /// The name of its start node.
    pub start: &'a str,
    /// Its step bound.
    pub max_steps: u32,
    /// The tools its nodes list, in order, with repeats.
    pub tools: Vec<&'static dyn Tool>,
    /// Its state as the graph's description gives it: `{"name", "version", "fields": [{"name",
    /// "type", "reducer", "personal", "credential"}, ..]}`.
    pub state: Value,
}

/// The lock of one version of a graph: a JSON object laid out as [`LOCK_FORMAT`] says.
#[derive(Debug, Clone, PartialEq)]
pub struct GraphLock {
    value: Value,
}

impl GraphLock {
    /// The lock of `graph`'s current version. Fails only when the node shape `#[graph]`
    /// recorded is not a JSON object.
    pub fn of(graph: &impl Lockable) -> Result<Self, LockError> {
        Self::from_parts(graph.lock_parts())
    }

    /// The lock built from `parts`.
    pub(super) fn from_parts(parts: LockParts<'_>) -> Result<Self, LockError> {
        let release = parts.release;
        let nodes = match serde_json::from_str::<Value>(release.nodes) {
            Ok(nodes @ Value::Object(_)) => nodes,
            Ok(other) => {
                let reason = format!("an object was expected, found {other}");
                return Err(LockError::Shape { id: release.id.into(), reason });
            }
            Err(e) => return Err(LockError::Shape { id: release.id.into(), reason: e.to_string() }),
        };
        let mut tools = BTreeMap::new();
        for tool in &parts.tools {
            tools.entry(tool.name()).or_insert_with(|| {
                json!({
                    "risk": tool.risk().to_string(),
                    "approval": tool.risk() != Risk::Read,
                    "schema": tool.parameters(),
                })
            });
        }
        let value = json!({
            "format": LOCK_FORMAT,
            "id": release.id,
            "version": release.version,
            "graph": parts.name,
            "fingerprint": parts.fingerprint,
            "start": parts.start,
            "max_steps": parts.max_steps,
            "nodes": nodes,
            "tools": tools,
            "state": state_of(&parts.state),
        });
        Ok(GraphLock { value: sorted(value) })
    }

    /// The lock as JSON.
    pub fn value(&self) -> &Value {
        &self.value
    }

    /// The graph id it locks.
    pub fn id(&self) -> &str {
        self.value["id"].as_str().unwrap_or_default()
    }

    /// The version it locks.
    pub fn version(&self) -> u32 {
        self.value["version"].as_u64().and_then(|v| u32::try_from(v).ok()).unwrap_or(1)
    }

    /// The file's text: pretty JSON, keys sorted, ending with a newline.
    pub fn to_text(&self) -> String {
        // A `Value` always serialises; the fallback is never taken.
        let mut text = serde_json::to_string_pretty(&self.value).unwrap_or_else(|_| self.value.to_string());
        text.push('\n');
        text
    }

    /// The lock file of `version` of graph `id` under the lock directory `dir`:
    /// `<dir>/<id>/v<version>.lock`.
    pub fn file(dir: &Path, id: &str, version: u32) -> PathBuf {
        dir.join(id).join(format!("v{version}.lock"))
    }

    /// Reads the lock file at `path`.
    pub fn read(path: &Path) -> Result<Self, LockError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| LockError::Unreadable { path: path.into(), source })?;
        Self::parse(path, &text)
    }

    /// Reads a lock's text; `path` names the file in errors.
    pub fn parse(path: &Path, text: &str) -> Result<Self, LockError> {
        let malformed = |reason: String| LockError::Malformed { path: path.into(), reason };
        let value: Value = serde_json::from_str(text).map_err(|e| malformed(format!("not JSON: {e}")))?;
        let Some(object) = value.as_object() else {
            return Err(malformed("not a JSON object".into()));
        };
        match object.get("format") {
            Some(f) if f.as_u64() == Some(u64::from(LOCK_FORMAT)) => {}
            Some(other) => {
                return Err(LockError::Format { path: path.into(), found: other.to_string(), expected: LOCK_FORMAT });
            }
            None => return Err(malformed("it has no `format`".into())),
        }
        for key in ["nodes", "tools", "state"] {
            if !object.get(key).is_some_and(Value::is_object) {
                return Err(malformed(format!("`{key}` is missing or not an object")));
            }
        }
        if !object.get("version").and_then(Value::as_u64).is_some_and(|v| v >= 1 && u32::try_from(v).is_ok()) {
            return Err(malformed("`version` is missing or not a version number (1 or more)".into()));
        }
        Ok(GraphLock { value: sorted(value) })
    }
}

/// The lock's `state`: the description's name, version and fields, each field with its name,
/// type, reducer and marks, sorted by name.
fn state_of(described: &Value) -> Value {
    let mut fields: Vec<Value> = described["fields"]
        .as_array()
        .map(|fields| {
            fields
                .iter()
                .map(|f| {
                    json!({
                        "name": f["name"],
                        "type": f["type"],
                        "reducer": f["reducer"],
                        "personal": f["personal"].as_bool().unwrap_or(false),
                        "credential": f["credential"].as_bool().unwrap_or(false),
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    fields.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    json!({ "name": described["name"], "version": described["version"], "fields": fields })
}

/// `value` with every object's keys in sorted order, whichever map serde_json was built with.
fn sorted(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(String, Value)> = map.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(entries.into_iter().map(|(k, v)| (k, sorted(v))).collect::<Map<String, Value>>())
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sorted).collect()),
        other => other,
    }
}

#[cfg(test)]
mod tests;
