//! The audit log's hash chain: what makes a changed, removed or reordered entry visible.
//!
//! Each [`AuditEntry`] carries two hex SHA-256 digests, computed by the store when it appends
//! the entry:
//! - `detail_hash`, of the entry's detail as canonical JSON (object keys in byte order, no
//!   whitespace): [`detail_hash`];
//! - `link`, over the previous entry's `link` (the empty string for the first entry), the
//!   thread id, the seq, the time, the actor, the kind and the `detail_hash`, each part
//!   length-prefixed so no field can slide into its neighbour: [`link`].
//!
//! [`verify_chain`] walks a thread's log and names the first entry where the chain breaks: a
//! detail that no longer matches its hash, an entry whose fields no longer match its link, a
//! seq missing, or entries out of order. The chain covers the detail's *hash*, so replacing a
//! detail with the [`PURGED_DETAIL`] marker (erasing personal data, say) keeps the rest of the
//! chain verifiable; verification counts purged entries instead of checking their detail.
//!
//! What it does not do: the digests are not signed, so whoever can write the store can also
//! rewrite an entry and recompute every link after it, and removing the newest entries leaves a
//! shorter chain that verifies. Keep the [`ChainReport::head`] of a verification somewhere else
//! (a ticket, another system's log) to detect that. A log chained when its file was moved to
//! store format 6 (or its PostgreSQL schema to version 9) is chained as it stood then: changes
//! made before cannot be detected.

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::record::{AuditEntry, PURGED_KIND};

/// The detail of an audit entry whose detail was purged: `{"purged":true}`, exactly.
///
/// An entry whose detail is this keeps its `detail_hash` (of the detail it was written with),
/// and [`verify_chain`] checks its link but not its detail, counting it in
/// [`ChainReport::purged`]. Any other detail, `{"purged":true}` with more keys included, is
/// checked against its hash.
pub const PURGED_DETAIL: &str = r#"{"purged":true}"#;

/// The [`PURGED_DETAIL`] marker as a JSON value.
pub fn purged_detail() -> Value {
    serde_json::json!({ "purged": true })
}

/// Whether `detail` is the [`PURGED_DETAIL`] marker.
pub fn is_purged(detail: &Value) -> bool {
    matches!(detail, Value::Object(map) if map.len() == 1 && map.get("purged") == Some(&Value::Bool(true)))
}

/// Tells the link of one log from a digest of anything else.
const LINK_DOMAIN: &[u8] = b"agentflow.audit.link.v1";

/// Hex SHA-256 of `detail` as canonical JSON: object keys sorted by their bytes, no whitespace,
/// strings and numbers as serde_json writes them.
pub fn detail_hash(detail: &Value) -> String {
    let mut bytes = Vec::with_capacity(64);
    canonical(detail, &mut bytes);
    hex(&Sha256::digest(&bytes))
}

/// Hex SHA-256 of an entry's place in its thread's log: `prev` (the previous entry's link, `""`
/// for seq 1), `thread`, `seq`, `at`, `actor`, `kind` and `detail_hash`, each part preceded by
/// its length (8 bytes, big endian), numbers as 8 bytes big endian.
pub fn link(prev: &str, thread: &str, seq: u64, at: u64, actor: &str, kind: &str, detail_hash: &str) -> String {
    let mut h = Sha256::new();
    let mut part = |bytes: &[u8]| {
        h.update((bytes.len() as u64).to_be_bytes());
        h.update(bytes);
    };
    part(LINK_DOMAIN);
    part(prev.as_bytes());
    part(thread.as_bytes());
    part(&seq.to_be_bytes());
    part(&at.to_be_bytes());
    part(actor.as_bytes());
    part(kind.as_bytes());
    part(detail_hash.as_bytes());
    hex(&h.finalize())
}

/// Fills in `entry.detail_hash` (from its detail) and `entry.link` (after `prev`, the link of
/// the entry before it, `""` for the first).
pub fn seal(entry: &mut AuditEntry, prev: &str) {
    entry.detail_hash = detail_hash(&entry.detail);
    entry.link = link_of(entry, &entry.thread, prev);
}

/// The link `entry` should carry after `prev` in `thread`'s log.
fn link_of(entry: &AuditEntry, thread: &str, prev: &str) -> String {
    link(prev, thread, entry.seq, entry.at, &entry.actor, &entry.kind, &entry.detail_hash)
}

/// A thread's audit log that verified.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ChainReport {
    /// The thread.
    pub thread: String,
    /// How many entries the log holds.
    pub entries: u64,
    /// How many of them had their detail purged (their link verified, their detail could not).
    pub purged: u64,
    /// The link of the newest entry (`""` for an empty log): kept elsewhere, it lets a later
    /// verification tell whether entries were removed from the end or the chain rewritten.
    pub head: String,
}

/// Why a thread's audit log does not verify.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "reason")]
pub enum BrokenReason {
    /// The entry's detail no longer matches the hash written with it.
    DetailChanged,
    /// Another field of the entry (time, actor, kind, the detail's hash, its thread) no longer
    /// matches its link, or the entry before it was changed.
    EntryChanged,
    /// The entry with this seq is missing (removed, or the log starts later than 1).
    EntryMissing,
    /// The entry at this seq was written at another place in the log: entries were moved or
    /// swapped.
    OutOfOrder {
        /// The seq the entry found here was written with.
        found: u64,
    },
}

impl BrokenReason {
    /// A stable name: `detail_changed`, `entry_changed`, `entry_missing`, `out_of_order`.
    pub fn as_str(self) -> &'static str {
        match self {
            BrokenReason::DetailChanged => "detail_changed",
            BrokenReason::EntryChanged => "entry_changed",
            BrokenReason::EntryMissing => "entry_missing",
            BrokenReason::OutOfOrder { .. } => "out_of_order",
        }
    }
}

/// The first place where a thread's audit log does not verify.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("thread {thread}, entry {seq}: {}", .reason.describe())]
pub struct BrokenLink {
    /// The thread.
    pub thread: String,
    /// The seq of the first entry that does not verify (for a missing entry, its seq).
    pub seq: u64,
    /// Why.
    #[serde(flatten)]
    pub reason: BrokenReason,
}

impl BrokenReason {
    /// What happened, for a person.
    pub fn describe(self) -> String {
        match self {
        BrokenReason::DetailChanged => "its details were changed after it was written".to_string(),
        BrokenReason::EntryChanged => {
            "it was changed after it was written (its time, actor, kind or details' hash), or the entry before it was"
                .to_string()
        }
        BrokenReason::EntryMissing => "it is missing: the entry was removed from the log".to_string(),
        BrokenReason::OutOfOrder { found } => {
            format!("the entries are out of order: the one found here was written as entry {found}")
        }
    }
    }
}

/// Verifies `thread`'s audit log, `entries` oldest first as the store lists them: seqs run 1,
/// 2, .. without gaps, each detail matches its `detail_hash` (unless it is the
/// [`PURGED_DETAIL`] marker of a purge, which a later `thread.purged` entry of the same log
/// records) and each link matches the entry and the link before it.
pub fn verify_chain(thread: &str, entries: &[AuditEntry]) -> Result<ChainReport, BrokenLink> {
    let broken = |seq: u64, reason: BrokenReason| BrokenLink { thread: thread.to_string(), seq, reason };
    let mut prev = String::new();
    let mut purged = 0u64;
    // The first purged detail not yet followed by the purge's own `thread.purged` entry: a
    // marker nobody's purge explains is a changed detail.
    let mut unexplained: Option<u64> = None;
    for (i, e) in entries.iter().enumerate() {
        let expected = i as u64 + 1;
        if e.seq != expected {
            // The entry that belongs here comes later, or this one came before: moved. Else it
            // is gone.
            let moved = e.seq < expected || entries[i..].iter().any(|x| x.seq == expected);
            let reason = if moved { BrokenReason::OutOfOrder { found: e.seq } } else { BrokenReason::EntryMissing };
            return Err(broken(expected, reason));
        }
        if is_purged(&e.detail) {
            purged += 1;
            unexplained.get_or_insert(e.seq);
        } else if detail_hash(&e.detail) != e.detail_hash {
            return Err(broken(e.seq, BrokenReason::DetailChanged));
        }
        if e.thread != thread || link_of(e, thread, &prev) != e.link {
            return Err(broken(e.seq, moved_from(thread, entries, e).unwrap_or(BrokenReason::EntryChanged)));
        }
        if e.kind == PURGED_KIND {
            unexplained = None;
        }
        prev.clone_from(&e.link);
    }
    if let Some(seq) = unexplained {
        return Err(broken(seq, BrokenReason::DetailChanged));
    }
    Ok(ChainReport { thread: thread.to_string(), entries: entries.len() as u64, purged, head: prev })
}

/// Whether `e`, which does not link at its place, is an intact entry written at another seq `j`
/// of the log (moved by rewriting its seq, where the store keys entries by seq): its link
/// verifies as entry `j` after the entry now at `j - 1`, or, two neighbours swapped, after the
/// one now at `j`. Costs two links per entry of the log, only for a log that does not verify.
fn moved_from(thread: &str, entries: &[AuditEntry], e: &AuditEntry) -> Option<BrokenReason> {
    (1..=entries.len() as u64).filter(|&j| j != e.seq).find_map(|j| {
        let at = j as usize - 1;
        let before = if at == 0 { Some("") } else { entries.get(at - 1).map(|p| p.link.as_str()) };
        let here = entries.get(at).map(|p| p.link.as_str());
        [before, here].into_iter().flatten().find_map(|prev| {
            let candidate = link(prev, thread, j, e.at, &e.actor, &e.kind, &e.detail_hash);
            (candidate == e.link).then_some(BrokenReason::OutOfOrder { found: j })
        })
    })
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    out
}

/// Writes `v` as canonical JSON: keys sorted by their bytes (whatever order the map keeps).
fn canonical(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push(b'{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                scalar(&Value::String(k.clone()), out);
                out.push(b':');
                if let Some(item) = map.get(k) {
                    canonical(item, out);
                }
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                canonical(item, out);
            }
            out.push(b']');
        }
        other => scalar(other, out),
    }
}

/// A string, number, bool or null as serde_json writes it.
fn scalar(v: &Value, out: &mut Vec<u8>) {
    // Writing a scalar into a Vec cannot fail; were it to, the text form is the same bytes.
    if serde_json::to_writer(&mut *out, v).is_err() {
        out.extend_from_slice(v.to_string().as_bytes());
    }
}

#[cfg(test)]
mod tests;
