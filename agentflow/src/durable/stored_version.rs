//! The version of its graph a stored thread stands on, as a resume reads it before moving the
//! thread to the current version.

use agentflow_store::{ReadError, Store};
use serde_json::Value;

use super::keys::GRAPH;

/// The audit kind of a thread's move to a newer version of its graph; its detail names the
/// versions it moved `from` and `to`, and the nodes and tools it renamed.
pub const MIGRATED_KIND: &str = "graph.migrated";

/// The version of its graph thread `thread`, stored under graph fingerprint `fingerprint`,
/// stands on: the `version` of the graph description stored under the fingerprint, else the
/// `to` of the thread's last [`MIGRATED_KIND`] audit entry, else the version its first
/// checkpoint recorded; a thread stored before graphs had versions is version 1.
///
/// ```
/// # use agentflow::RedbStore;
/// let store = RedbStore::in_memory().unwrap();
/// assert_eq!(agentflow::persist::stored_version(&store, "t-1", "fp").unwrap(), 1);
/// ```
pub fn stored_version(store: &dyn Store, thread: &str, fingerprint: &str) -> Result<u32, ReadError> {
    let described = store.graph_description(fingerprint)?.and_then(|text| serde_json::from_str::<Value>(&text).ok());
    if let Some(v) = described.as_ref().and_then(version_of) {
        return Ok(v);
    }
    version_without_description(store, thread, fingerprint)
}

/// The version of thread `thread` when no stored description says it: the version one of its
/// [`MIGRATED_KIND`] audit entries names for `fingerprint` (the newest that does; a thread forked
/// back before a move stands on the version it moved from), else the `to` of its last one,
/// else its first checkpoint's, else 1.
fn version_without_description(store: &dyn Store, thread: &str, fingerprint: &str) -> Result<u32, ReadError> {
    let moves: Vec<Value> =
        store.list_audit(thread)?.into_iter().filter(|e| e.kind == MIGRATED_KIND).map(|e| e.detail).collect();
    let named = moves.iter().rev().find_map(|m| {
        let side = ["to", "from"].into_iter().find(|side| {
            m.get("fingerprints").and_then(|f| f.get(*side)).and_then(Value::as_str) == Some(fingerprint)
        })?;
        m.get(side).and_then(Value::as_u64)
    });
    if let Some(v) = named.or_else(|| moves.last().and_then(|m| m.get("to")).and_then(Value::as_u64)) {
        return Ok(u32::try_from(v).unwrap_or(u32::MAX));
    }
    let root = store.checkpoint(thread, 0)?;
    Ok(root.as_ref().and_then(|c| c.metadata.extra.get(GRAPH)).and_then(version_of).unwrap_or(1))
}

/// The `version` a graph description or shape names.
fn version_of(v: &Value) -> Option<u32> {
    v.get("version").and_then(Value::as_u64).and_then(|v| u32::try_from(v).ok())
}

#[cfg(test)]
mod tests;
