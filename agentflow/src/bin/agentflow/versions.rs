//! `threads --versions`: the threads counted by graph id and version, as the stored graph
//! descriptions give them (for a thread whose description is not stored, the version a resume
//! reads for it), with how many may still resume, so an operator knows when the
//! migrations from a version can be dropped.

use std::collections::{BTreeMap, BTreeSet};

use agentflow::Store;
use agentflow::persist::stored_version;
use agentflow::server::inspect::description::description;
use agentflow_store::ThreadRecord;
use serde_json::{Value, json};

use crate::{Outcome, out};

/// A graph id and version: the version is `None` when it cannot be read.
type Key = (String, Option<u32>);

/// The threads of one graph version.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Count {
    /// All of them.
    pub threads: usize,
    /// Those that may still resume (not completed, compensated or purged).
    pub waiting: usize,
    /// The graph fingerprints they run.
    pub fingerprints: BTreeSet<String>,
}

/// The graph id and version of a thread's stored description: `id` (the graph's name in a
/// description written before ids) and `version` (1 in a description written before versions);
/// `None` when no description is stored for its fingerprint (or it does not read).
fn described(store: &dyn Store, thread: &ThreadRecord) -> Option<Key> {
    let d = description(store, thread).ok().flatten()?;
    let id = d["id"].as_str().or_else(|| d["name"].as_str()).unwrap_or(&thread.graph_fingerprint);
    let version = d.get("version").map_or(Some(1), |v| v.as_u64().and_then(|v| u32::try_from(v).ok()));
    Some((id.to_string(), version))
}

/// The key of a thread whose fingerprint has no description: the fingerprint, and the version
/// a resume would read for it (its last `graph.migrated`, else its first checkpoint's, else 1).
fn undescribed(store: &dyn Store, thread: &ThreadRecord) -> Key {
    let version = stored_version(store, &thread.id, &thread.graph_fingerprint).ok();
    (thread.graph_fingerprint.clone(), version)
}

/// The threads counted by graph id and version, in id and version order; each description is
/// read once.
pub fn count(store: &dyn Store, threads: &[&ThreadRecord]) -> BTreeMap<Key, Count> {
    let mut described_by: BTreeMap<&str, Option<Key>> = BTreeMap::new();
    let mut counts: BTreeMap<Key, Count> = BTreeMap::new();
    for t in threads {
        let key = described_by.entry(&t.graph_fingerprint).or_insert_with(|| described(store, t)).clone();
        let key = key.unwrap_or_else(|| undescribed(store, t));
        let count = counts.entry(key).or_default();
        count.threads += 1;
        count.waiting += usize::from(t.status.is_resumable());
        count.fingerprints.insert(t.graph_fingerprint.clone());
    }
    counts
}

/// `threads --versions`: a table `GRAPH VERSION THREADS WAITING`, or with `--json` a list of
/// `{graph, version, threads, waiting, fingerprints}`.
pub fn print(store: &dyn Store, threads: &[&ThreadRecord], as_json: bool) -> Outcome {
    let counts = count(store, threads);
    if as_json {
        let rows = counts.iter().map(|((graph, version), c)| {
            json!({
                "graph": graph,
                "version": version,
                "threads": c.threads,
                "waiting": c.waiting,
                "fingerprints": c.fingerprints,
            })
        });
        return out::json(&Value::Array(rows.collect()));
    }
    let rows: Vec<Vec<String>> = counts
        .iter()
        .map(|((graph, version), c)| {
            let version = version.map_or_else(|| "?".to_string(), |v| v.to_string());
            vec![graph.clone(), version, c.threads.to_string(), c.waiting.to_string()]
        })
        .collect();
    out::table(&["GRAPH", "VERSION", "THREADS", "WAITING"], &rows)
}
