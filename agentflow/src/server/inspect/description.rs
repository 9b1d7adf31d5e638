//! A thread's graph description as the store keeps it (JSON, under the graph's fingerprint):
//! read for a thread, and the graph names it gives, for listings.

use std::collections::BTreeMap;

use agentflow_store::{Store, ThreadRecord};
use serde_json::Value;

use super::error::InspectError;

/// The graph's description stored under the thread's fingerprint, if any.
pub fn description(store: &dyn Store, thread: &ThreadRecord) -> Result<Option<Value>, InspectError> {
    let Some(text) = store.graph_description(&thread.graph_fingerprint).map_err(InspectError::store)? else {
        return Ok(None);
    };
    serde_json::from_str(&text).map(Some).map_err(|e| {
        InspectError::store(format!("the stored description of graph {} is not JSON: {e}", thread.graph_fingerprint))
    })
}

/// Graph names by fingerprint, read from the stored descriptions once each.
#[derive(Debug, Default)]
pub struct Names(BTreeMap<String, Option<String>>);

impl Names {
    /// The name of the graph of `thread`, if its description is stored (and reads).
    pub fn of(&mut self, store: &dyn Store, thread: &ThreadRecord) -> Option<String> {
        self.0
            .entry(thread.graph_fingerprint.clone())
            .or_insert_with(|| {
                description(store, thread).ok().flatten().and_then(|d| d["name"].as_str().map(str::to_string))
            })
            .clone()
    }
}
