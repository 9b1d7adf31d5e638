//! How the graph a thread was stored by stands to the current graph's release, for a thread
//! stored under another fingerprint: the same graph (its id) at an older version, which the
//! declared migrations move to the current one (`graph_migration`); the same version built
//! otherwise; a newer version; or another graph.
//!
//! The stored graph's id is the one its stored description names (under the thread's
//! fingerprint), else the one the thread's first checkpoint names (a graph's versions share
//! their id); a description or checkpoint written before graphs had ids names the graph, which
//! an unversioned graph's id is. Its version is the one `graph_migration` reads.

use agentflow_store::{ReadError, Store};
use serde_json::Value;

use super::keys::GRAPH;
use super::stored_version::stored_version;
use crate::release::Release;

/// How a thread's stored graph stands to the current one (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StoredRelease {
    /// The same graph at an older version: the migrations move the thread.
    Older(u32),
    /// The same graph and version, built otherwise (another fingerprint).
    SameVersion,
    /// The same graph at a newer version: a build of that version or later continues it.
    Newer(u32),
    /// Another graph (its id, when known).
    OtherGraph(Option<String>),
}

/// How thread `thread`, stored under `fingerprint`, stands to `release` (see the module docs).
pub(crate) fn stored_release(
    s: &dyn Store,
    thread: &str,
    fingerprint: &str,
    release: &Release,
) -> Result<StoredRelease, ReadError> {
    let id = stored_id(s, thread, fingerprint)?;
    if id.as_deref() != Some(release.id) {
        return Ok(StoredRelease::OtherGraph(id));
    }
    let stored = stored_version(s, thread, fingerprint)?;
    Ok(match stored.cmp(&release.version) {
        std::cmp::Ordering::Less => StoredRelease::Older(stored),
        std::cmp::Ordering::Equal => StoredRelease::SameVersion,
        std::cmp::Ordering::Greater => StoredRelease::Newer(stored),
    })
}

/// The id of the graph thread `thread` was stored by, if its description or first checkpoint
/// names it.
fn stored_id(s: &dyn Store, thread: &str, fingerprint: &str) -> Result<Option<String>, ReadError> {
    let id_of = |v: &Value| {
        let id = v.get("id").or_else(|| v.get("name"))?;
        id.as_str().map(str::to_string)
    };
    let described = s.graph_description(fingerprint)?.and_then(|text| serde_json::from_str::<Value>(&text).ok());
    if let Some(id) = described.as_ref().and_then(id_of) {
        return Ok(Some(id));
    }
    let root = s.checkpoint(thread, 0)?;
    Ok(root.as_ref().and_then(|c| c.metadata.extra.get(GRAPH)).and_then(id_of))
}
