//! The version of its graph (and of its state) a thread's checkpoint was written by, for a fork
//! to it: a thread moved to a newer version of its graph (`graph_migration`) keeps the
//! checkpoints its older version wrote, whose cursor, kept writes and map payloads name that
//! version's nodes. Forked to one of them, the thread takes that version's graph fingerprint
//! and state version again, so that its next resume moves it through the declared migrations
//! as it moved the first time.
//!
//! Each move's `graph.migrated` audit entry names the checkpoint it wrote (`checkpoint`), the
//! thread's graph fingerprint and state version before and after it (`fingerprints`, `state`).
//! A thread forked back and moved again has several branches, each with moves of its own, so
//! checkpoint numbers alone do not tell which version wrote a checkpoint: its `parent` links
//! lead back to the nearest move on its own branch, or to the thread's start.
//! - The move's own checkpoint names the new version's nodes and holds the state as it was
//!   before the move.
//! - One after it was written by the version the thread moved to; its state is the migrated
//!   one once a checkpoint on the way back to the move holds a whole state (the first step run
//!   after a state migration writes one), else still the state as before the move (a fork or a
//!   state update right after the move writes none).
//! - One with no move before it on its branch was written by the version the thread started
//!   on: the one its first move moved it from.
//!
//! - A checkpoint that names the version it was written under (`written_by`: a rollback's
//!   restart, whose parent is from before the run it replaced, maybe before a move) says it for
//!   itself and the checkpoints after it on its branch.
//!
//! A checkpoint on the way back that retention removed leaves numbers alone: the latest move
//! numbered at or before it is taken.

use std::collections::BTreeMap;

use agentflow_store::{Store, ThreadRecord};
use serde_json::Value;

use super::error::{HistoryError, PersistError};
use super::keys::WRITTEN_BY;
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
#[derive(Debug)]
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
/// [`HistoryError::ForkAcrossVersions`] for a checkpoint before every move on its branch when
/// the thread's first move's entry does not name the fingerprint the thread had before it.
pub(crate) fn written_by(s: &dyn Store, record: &ThreadRecord, seq: u64) -> Result<Option<WrittenBy>, HistoryError> {
    let audit = s.list_audit(&record.id).map_err(PersistError::from)?;
    let mut moves: Vec<Move> =
        audit.iter().filter(|e| e.kind == MIGRATED_KIND).filter_map(|e| Move::of(&e.detail)).collect();
    moves.sort_by_key(|m| m.checkpoint);
    let Some(first) = moves.first() else { return Ok(None) };
    let links: BTreeMap<u64, Link> = s
        .list_checkpoints(&record.id)
        .map_err(PersistError::from)?
        .into_iter()
        .map(|c| {
            (c.seq, Link { parent: c.parent, snapshot: c.has_snapshot, written: written_under(&c.metadata.extra) })
        })
        .collect();
    let moved_to = |m: &Move| m.fingerprints.1.clone().unwrap_or_else(|| record.graph_fingerprint.clone());
    let (fingerprint, state) = match nearest(&moves, &links, seq) {
        // The move's own checkpoint: the new version's nodes, the state as before the move.
        Nearest::Marked(fingerprint, state) => (fingerprint.clone(), Some(*state)),
        Nearest::Own(m) => (moved_to(m), m.state.0),
        Nearest::After { by, snapshot } => (moved_to(by), if snapshot { by.state.1 } else { by.state.0 }),
        Nearest::Start => {
            let Some(fingerprint) = first.fingerprints.0.clone() else {
                return Err(HistoryError::ForkAcrossVersions {
                    thread: record.id.clone(),
                    seq,
                    moved_at: first.checkpoint,
                    from: first.from,
                    to: first.to,
                });
            };
            (fingerprint, first.state.0)
        }
    };
    let schema_version = state.unwrap_or(record.schema_version);
    if fingerprint == record.graph_fingerprint && schema_version == record.schema_version {
        return Ok(None);
    }
    Ok(Some(WrittenBy { fingerprint, schema_version }))
}

/// A checkpoint's link to the one it continues, whether it holds a whole state, and the
/// version it says it was written under, if it says.
#[derive(Debug, Clone)]
struct Link {
    parent: Option<u64>,
    snapshot: bool,
    written: Option<(String, u32)>,
}

/// The graph fingerprint and state version a checkpoint's `extra` says it was written under.
fn written_under(extra: &Value) -> Option<(String, u32)> {
    let by = extra.get(WRITTEN_BY)?;
    let fingerprint = by.get("fingerprint")?.as_str()?.to_string();
    let state = u32::try_from(by.get("state")?.as_u64()?).ok()?;
    Some((fingerprint, state))
}

/// The move a checkpoint's branch last made before (or at) it.
#[derive(Debug)]
enum Nearest<'a> {
    /// The checkpoint, or one before it on its branch and after any move, names the version it
    /// was written under (fingerprint, state version).
    Marked(&'a String, &'a u32),
    /// The checkpoint is the move's own.
    Own(&'a Move),
    /// The move is the checkpoint's nearest ancestor of its kind; `snapshot`: a checkpoint after
    /// the move, up to and with the one asked for, holds a whole state.
    After { by: &'a Move, snapshot: bool },
    /// No move comes before the checkpoint on its branch.
    Start,
}

/// The nearest move at or before checkpoint `seq` on its branch, following `parent` links
/// (`moves` sorted by checkpoint).
fn nearest<'a>(moves: &'a [Move], links: &'a BTreeMap<u64, Link>, seq: u64) -> Nearest<'a> {
    let move_at = |at: u64| moves.iter().find(|m| m.checkpoint == at);
    if let Some(m) = move_at(seq) {
        return Nearest::Own(m);
    }
    let mut snapshot = false;
    let mut at = seq;
    loop {
        let parent = match links.get(&at) {
            Some(Link { written: Some((fingerprint, state)), .. }) => return Nearest::Marked(fingerprint, state),
            Some(link) => {
                snapshot |= link.snapshot;
                match link.parent {
                    None => return Nearest::Start,
                    // A parent is written before its child; anything else is not a link to follow.
                    Some(parent) if parent < at => parent,
                    Some(_) => return by_number(moves, at),
                }
            }
            // Removed by retention: numbers are all that is left.
            None => return by_number(moves, at),
        };
        if let Some(m) = move_at(parent) {
            return Nearest::After { by: m, snapshot };
        }
        at = parent;
    }
}

/// The latest move numbered at or before `seq`, taken to hold a whole migrated state since.
fn by_number(moves: &[Move], seq: u64) -> Nearest<'_> {
    match moves.iter().rev().find(|m| m.checkpoint <= seq) {
        Some(m) if m.checkpoint == seq => Nearest::Own(m),
        Some(m) => Nearest::After { by: m, snapshot: true },
        None => Nearest::Start,
    }
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

    fn moved(checkpoint: u64) -> Move {
        let detail = json!({
            "from": 1, "to": 2, "checkpoint": checkpoint,
            "fingerprints": { "from": "v1", "to": "v2" }, "state": { "from": 1, "to": 2 },
        });
        Move::of(&detail).unwrap()
    }

    fn at(nearest: Nearest<'_>) -> (&'static str, Option<u64>, bool) {
        match nearest {
            Nearest::Own(m) => ("own", Some(m.checkpoint), false),
            Nearest::After { by, snapshot } => ("after", Some(by.checkpoint), snapshot),
            Nearest::Start => ("start", None, false),
            Nearest::Marked(..) => ("marked", None, false),
        }
    }

    #[test]
    fn the_nearest_move_is_the_one_on_the_checkpoints_own_branch() {
        // 0 <- 1 <- 2 (move) <- 3 (snapshot); 4 forks to 1; 5 moves it again; 6 after it;
        // 7 forks to 2.
        let link = |parent: Option<u64>, snapshot| Link { parent, snapshot, written: None };
        let links: BTreeMap<u64, Link> = [
            (0, link(None, true)),
            (1, link(Some(0), false)),
            (2, link(Some(1), false)),
            (3, link(Some(2), true)),
            (4, link(Some(1), false)),
            (5, link(Some(4), false)),
            (6, link(Some(5), true)),
            (7, link(Some(2), false)),
        ]
        .into();
        let moves = [moved(2), moved(5)];
        assert_eq!(at(nearest(&moves, &links, 1)), ("start", None, false));
        assert_eq!(at(nearest(&moves, &links, 2)), ("own", Some(2), false));
        assert_eq!(at(nearest(&moves, &links, 3)), ("after", Some(2), true), "numbered before the second move");
        assert_eq!(at(nearest(&moves, &links, 4)), ("start", None, false));
        assert_eq!(at(nearest(&moves, &links, 6)), ("after", Some(5), true));
        assert_eq!(at(nearest(&moves, &links, 7)), ("after", Some(2), false), "no whole state since the move");
        // Retention removed checkpoint 1: numbers decide from there.
        let mut kept = links.clone();
        kept.remove(&1);
        assert_eq!(at(nearest(&moves, &kept, 4)), ("start", None, false));
        kept.insert(4, link(Some(3), false));
        kept.remove(&3);
        assert_eq!(at(nearest(&moves, &kept, 4)), ("after", Some(2), true));
        // A link that does not lead back is not followed.
        kept.insert(8, link(Some(9), false));
        assert_eq!(at(nearest(&moves, &kept, 8)), ("after", Some(5), true));
        // A rollback after the move went back to 1 (before it), saying what wrote it: 9 and 10
        // after it are that version's, not the start's.
        let mut rolled = links.clone();
        rolled.insert(9, Link { parent: Some(1), snapshot: false, written: Some(("v2".into(), 2)) });
        rolled.insert(10, link(Some(9), true));
        assert!(matches!(nearest(&moves, &rolled, 9), Nearest::Marked(f, 2) if f == "v2"));
        assert!(matches!(nearest(&moves, &rolled, 10), Nearest::Marked(f, 2) if f == "v2"));
        assert_eq!(at(nearest(&moves, &rolled, 1)), ("start", None, false), "before the rollback, as before");
    }
}
