//! Audit log entries: one to append, and one as stored with its seq.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::codec::{Dec, DecodeResult, Enc};
use crate::record::payload::RECORD_VERSION;

/// An audit entry to append; the store assigns its sequence number.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewAuditEntry {
    /// Unix millis of the event.
    pub at: u64,
    /// Who did it (user, executor id, `system`).
    pub actor: String,
    /// What happened, e.g. `update_state`, `approval.approved`.
    pub kind: String,
    /// Structured detail.
    pub detail: Value,
}

impl NewAuditEntry {
    /// Builds an entry.
    pub fn new(at: u64, actor: impl Into<String>, kind: impl Into<String>, detail: Value) -> Self {
        NewAuditEntry { at, actor: actor.into(), kind: kind.into(), detail }
    }
}

/// One entry of a thread's append-only audit log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// Thread the entry belongs to.
    pub thread: String,
    /// Position in the thread's log, from 1, without gaps.
    pub seq: u64,
    /// Unix millis of the event.
    pub at: u64,
    /// Who did it.
    pub actor: String,
    /// What happened.
    pub kind: String,
    /// Structured detail.
    pub detail: Value,
    /// Hex SHA-256 of the detail as written (see [`crate::audit_chain`]); kept when the detail
    /// is later replaced by the [purge marker](crate::audit_chain::PURGED_DETAIL). Empty for
    /// an entry read from an export of an older build, which the store chains on restore.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail_hash: String,
    /// Hex SHA-256 linking the entry to the one before it in the thread's log (see
    /// [`crate::audit_chain::link`]), so an entry changed, removed or moved afterwards is found
    /// by [`Store::verify_audit`](crate::Store::verify_audit). Empty as `detail_hash` is.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub link: String,
}

impl AuditEntry {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut e = Enc::new(RECORD_VERSION);
        e.str(&self.thread).u64(self.seq).u64(self.at).str(&self.actor).str(&self.kind).json(&self.detail);
        e.str(&self.detail_hash).str(&self.link);
        e.finish()
    }

    /// The entry as store format 5 and older wrote it, without `detail_hash` and `link`: for
    /// tests of the upgrade of such files.
    #[doc(hidden)]
    pub fn encode_format_5(&self) -> Vec<u8> {
        let mut e = Enc::new(RECORD_VERSION);
        e.str(&self.thread).u64(self.seq).u64(self.at).str(&self.actor).str(&self.kind).json(&self.detail);
        e.finish()
    }

    /// Encodes the entry as a store keeps it (for tools and tests that write a store file's
    /// tables).
    #[doc(hidden)]
    pub fn encode_stored(&self) -> Vec<u8> {
        self.encode()
    }

    /// Decodes a stored entry (for tools and tests that read a store file's tables).
    #[doc(hidden)]
    pub fn decode_stored(buf: &[u8]) -> Result<Self, String> {
        Self::decode(buf)
    }

    pub(crate) fn decode(buf: &[u8]) -> DecodeResult<Self> {
        let mut d = Dec::new(buf, RECORD_VERSION)?;
        let entry = AuditEntry {
            thread: d.str("thread")?,
            seq: d.u64("seq")?,
            at: d.u64("at")?,
            actor: d.str("actor")?,
            kind: d.str("kind")?,
            detail: d.json("detail")?,
            detail_hash: String::new(),
            link: String::new(),
        };
        // An entry of store format 5 or older ends here, without its hashes: they stay empty
        // until the file is moved to format 6 (which chains its log).
        let (detail_hash, link) =
            if d.at_end() { (String::new(), String::new()) } else { (d.str("detail_hash")?, d.str("link")?) };
        d.end()?;
        Ok(AuditEntry { detail_hash, link, ..entry })
    }
}
