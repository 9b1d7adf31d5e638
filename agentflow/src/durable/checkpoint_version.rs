//! The version of its graph (and of its state) a thread's checkpoint was written by, for a fork
//! to it: a thread moved to a newer version of its graph (`graph_migration`) keeps the
//! checkpoints its older version wrote, whose cursor, kept writes and map payloads name that
//! version's nodes. Forked to one of them, the thread takes that version's graph fingerprint
//! and state version again, so that its next resume moves it through the declared migrations
//! as it moved the first time.
//!
//! Each move's `graph.migrated` audit entry names the checkpoint it wrote (`checkpoint`), the
//! thread's graph fingerprint and state version before and after it (`fingerprints`, `state`).
//! Checkpoints are numbered in the order they are written, so a checkpoint before a move's was
//! written by the version the thread moved from; the move's own checkpoint names the new
//! version's nodes and holds the state as it was before the move; one after the last move was
//! written by the version the thread moved to last.

use agentflow_store::{Store, ThreadRecord};
use serde_json::Value;

use super::error::{HistoryError, PersistError};
use super::stored_version::MIGRATED_KIND;

/// What a thread forked to a checkpoint carries: the graph fingerprint and state version of
/// the version that wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WrittenBy {
    /// The graph fingerprint the thread takes.
    pub(crate) fingerprint: String,
    /// The state version the thread takes (`ThreadRecord::schema_version`).
    pub(crate) schema_version: u32,
}

/// One move of a thread, as its audit entry recorded it.
struct Move {
    checkpoint: u64,
    from: u32,
    to: u32,
    fingerprints: (Option<String>, Option<String>),
    state: (Option<u32>, Option<u32>),
}

impl Move {
    fn of(detail: &Value) -> Option<Move> {
        let version = |key: &str| detail.get(key).and_then(Value::as_u64).and_then(|v| u32::try_from(v).ok());
        let text = |outer: &str, key: &str| detail.get(outer)?.get(key)?.as_str().map(str::to_string);
        let number = |outer: &str, key: &str| u32::try_from(detail.get(outer)?.get(key)?.as_u64()?).ok();
        Some(Move {
            checkpoint: detail.get("checkpoint")?.as_u64()?,
            from: version("from")?,
            to: version("to")?,
            fingerprints: (text("fingerprints", "from"), text("fingerprints", "to")),
            state: (number("state", "from"), number("state", "to")),
        })
    }
}

/// What thread `record` must carry once forked to its checkpoint `seq`, when that is not what
/// it carries now (see the module docs); `None` for a thread never moved, or one that carries
/// it already.
///
/// # Errors
/// [`HistoryError::ForkAcrossVersions`] for a checkpoint before a move whose entry does not
/// name the fingerprint the thread had before it.
pub(crate) fn written_by(s: &dyn Store, record: &ThreadRecord, seq: u64) -> Result<Option<WrittenBy>, HistoryError> {
    let audit = s.list_audit(&record.id).map_err(PersistError::from)?;
    let mut moves: Vec<Move> =
        audit.iter().filter(|e| e.kind == MIGRATED_KIND).filter_map(|e| Move::of(&e.detail)).collect();
    moves.sort_by_key(|m| m.checkpoint);
    let (fingerprint, state) = match moves.iter().find(|m| m.checkpoint >= seq) {
        Some(m) if m.checkpoint > seq => {
            let Some(fingerprint) = m.fingerprints.0.clone() else {
                return Err(HistoryError::ForkAcrossVersions {
                    thread: record.id.clone(),
                    seq,
                    moved_at: m.checkpoint,
                    from: m.from,
                    to: m.to,
                });
            };
            (fingerprint, m.state.0)
        }
        // The move's own checkpoint: the new version's nodes, the state as before the move.
        Some(m) => (m.fingerprints.1.clone().unwrap_or_else(|| record.graph_fingerprint.clone()), m.state.0),
        None => match moves.last() {
            Some(m) => (m.fingerprints.1.clone().unwrap_or_else(|| record.graph_fingerprint.clone()), m.state.1),
            None => return Ok(None),
        },
    };
    let schema_version = state.unwrap_or(record.schema_version);
    if fingerprint == record.graph_fingerprint && schema_version == record.schema_version {
        return Ok(None);
    }
    Ok(Some(WrittenBy { fingerprint, schema_version }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_move_reads_back_from_its_audit_entry() {
        let detail = json!({
            "from": 1, "to": 2, "checkpoint": 7,
            "fingerprints": { "from": "aa", "to": "bb" }, "state": { "from": 1, "to": 2 },
        });
        let m = Move::of(&detail).unwrap();
        assert_eq!((m.checkpoint, m.from, m.to), (7, 1, 2));
        assert_eq!(m.fingerprints, (Some("aa".into()), Some("bb".into())));
        assert_eq!(m.state, (Some(1), Some(2)));
        // An entry of an earlier build names neither.
        let m = Move::of(&json!({ "from": 1, "to": 2, "checkpoint": 7 })).unwrap();
        assert_eq!((m.fingerprints, m.state), ((None, None), (None, None)));
        assert!(Move::of(&json!({ "from": 1, "to": 2 })).is_none());
    }
}
