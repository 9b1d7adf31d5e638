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
}

impl AuditEntry {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut e = Enc::new(RECORD_VERSION);
        e.str(&self.thread).u64(self.seq).u64(self.at).str(&self.actor).str(&self.kind).json(&self.detail);
        e.finish()
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
        };
        d.end()?;
        Ok(entry)
    }
}
