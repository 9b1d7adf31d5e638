//! Sealing the payloads of each record kind on the way in ([`Sealer`]) and opening them on the
//! way out ([`Opener`]), leaving what queries need (ids, statuses, times) as it is.
//!
//! Bytes become a sealed envelope; a JSON value becomes `{"$sealed": "<base64>"}`; a text
//! becomes `$sealed:<base64>`. A value that is not sealed (written before the store sealed,
//! or written by the store itself: an `approval.requested` entry, a purge marker) is read as
//! it is.

use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::Value;

use crate::record::{
    ApprovalPatch, ApprovalRecord, AuditEntry, Checkpoint, NewAuditEntry, PendingWrite, StateChain, ThreadRecord,
};
use crate::sealed::cipher::{DataKey, Envelope};
use crate::sealed::error::SealError;
use crate::sealed::keyring::Keyring;

/// The key of the object a sealed JSON value becomes.
pub(crate) const SEALED_KEY: &str = "$sealed";
/// The key of the object a restored audit entry's detail becomes: its detail sealed with the
/// hashes the dump gave it, which a caller reads back as they were.
pub(crate) const RESTORED_KEY: &str = "$sealed_restored";
/// The prefix of a sealed text.
const SEALED_TEXT: &str = "$sealed:";

/// The payload kinds, each its own associated data: a sealed value moved to another kind of
/// field does not open.
pub(crate) mod kind {
    pub(crate) const SNAPSHOT: &str = "checkpoint snapshot";
    pub(crate) const DELTA: &str = "checkpoint update";
    pub(crate) const EXTRA: &str = "checkpoint metadata";
    pub(crate) const PENDING: &str = "pending write";
    pub(crate) const EFFECT: &str = "effect result";
    pub(crate) const AUDIT: &str = "audit detail";
    pub(crate) const RESTORED: &str = "restored audit entry";
    pub(crate) const ARGS: &str = "approval arguments";
    pub(crate) const CONDITIONS: &str = "approval conditions";
    pub(crate) const NOTE: &str = "approval note";
    pub(crate) const INPUT: &str = "queued run input";
    pub(crate) const DETAIL: &str = "thread detail";
    pub(crate) const EVENT: &str = "event data";
    pub(crate) const SCHEDULE: &str = "schedule input";
    pub(crate) const WEBHOOK: &str = "webhook payload";
}

/// What a thread's sealed detail reads as when it does not open (its key is destroyed, or
/// the text was changed): a listing still lists the thread.
pub(crate) const UNOPENED_DETAIL: &str = "(sealed)";

/// Seals the payloads of one thread with its data key.
pub(crate) struct Sealer<'a> {
    thread: &'a str,
    key: Arc<DataKey>,
}

impl<'a> Sealer<'a> {
    /// A sealer for `thread` (its data key made now, durably, if it has none).
    pub(crate) fn new(ring: &Keyring, thread: &'a str) -> Result<Self, SealError> {
        Ok(Sealer { thread, key: ring.for_write(thread)? })
    }

    pub(crate) fn bytes(&self, kind: &str, msg: &[u8]) -> Result<Vec<u8>, SealError> {
        self.key.seal(self.thread, kind, msg)
    }

    pub(crate) fn json(&self, kind: &str, value: &Value) -> Result<Value, SealError> {
        let text = serde_json::to_vec(value).unwrap_or_default();
        let sealed = self.bytes(kind, &text)?;
        Ok(serde_json::json!({ SEALED_KEY: B64.encode(sealed) }))
    }

    pub(crate) fn text(&self, kind: &str, text: &str) -> Result<String, SealError> {
        Ok(format!("{SEALED_TEXT}{}", B64.encode(self.bytes(kind, text.as_bytes())?)))
    }

    /// A thread record with its detail (the status line, which may quote values) sealed; an
    /// empty detail stays empty.
    pub(crate) fn thread(&self, mut t: ThreadRecord) -> Result<ThreadRecord, SealError> {
        if !t.detail.is_empty() {
            t.detail = self.text(kind::DETAIL, &t.detail)?;
        }
        Ok(t)
    }

    pub(crate) fn checkpoint(&self, mut cp: Checkpoint) -> Result<Checkpoint, SealError> {
        if let Some(snapshot) = &cp.snapshot {
            cp.snapshot = Some(self.bytes(kind::SNAPSHOT, snapshot)?);
        }
        cp.delta = cp.delta.iter().map(|d| self.bytes(kind::DELTA, d)).collect::<Result<_, _>>()?;
        cp.metadata.extra = self.json(kind::EXTRA, &cp.metadata.extra)?;
        Ok(cp)
    }

    pub(crate) fn pending(&self, mut w: PendingWrite) -> Result<PendingWrite, SealError> {
        w.value = self.bytes(kind::PENDING, &w.value)?;
        Ok(w)
    }

    pub(crate) fn audit(&self, mut entry: NewAuditEntry) -> Result<NewAuditEntry, SealError> {
        entry.detail = self.json(kind::AUDIT, &entry.detail)?;
        Ok(entry)
    }

    /// An audit entry of a dump (a purged one is left as it is): its detail is sealed with
    /// the hashes the dump gave it (read back as they were, so a restored log verifies, or
    /// fails to, as the dump does); the wrapped store's hashes are made anew by
    /// [`rechain`](crate::sealed::audit_view::rechain).
    pub(crate) fn audit_entry(&self, mut entry: AuditEntry) -> Result<AuditEntry, SealError> {
        if crate::audit_chain::is_purged(&entry.detail) {
            return Ok(entry);
        }
        // `detail_hash \n link \n detail`: the hashes are hex, and the detail keeps its depth.
        let mut text = format!("{}\n{}\n", entry.detail_hash, entry.link).into_bytes();
        text.extend(serde_json::to_vec(&entry.detail).unwrap_or_default());
        entry.detail = serde_json::json!({ RESTORED_KEY: B64.encode(self.bytes(kind::RESTORED, &text)?) });
        Ok(entry)
    }

    fn conditions(&self, conditions: Option<Value>) -> Result<Option<Value>, SealError> {
        match conditions {
            // Null conditions are no conditions (and clear them in a patch): left as they are.
            Some(c) if !c.is_null() => Ok(Some(self.json(kind::CONDITIONS, &c)?)),
            other => Ok(other),
        }
    }

    pub(crate) fn approval(&self, mut a: ApprovalRecord) -> Result<ApprovalRecord, SealError> {
        a.args = self.text(kind::ARGS, &a.args)?;
        a.conditions = self.conditions(a.conditions.take())?;
        a.decision_note = a.decision_note.map(|n| self.text(kind::NOTE, &n)).transpose()?;
        Ok(a)
    }

    pub(crate) fn patch(&self, mut p: ApprovalPatch) -> Result<ApprovalPatch, SealError> {
        p.conditions = self.conditions(p.conditions.take())?;
        p.note = p.note.map(|n| self.text(kind::NOTE, &n)).transpose()?;
        if let Some(args) = &mut p.args {
            args.canonical = self.text(kind::ARGS, &args.canonical)?;
        }
        Ok(p)
    }
}

/// Opens the payloads of one thread, asking the keyring for its key at the first sealed one.
pub(crate) struct Opener<'a> {
    ring: &'a Keyring,
    thread: &'a str,
    key: Option<Arc<DataKey>>,
}

impl<'a> Opener<'a> {
    pub(crate) fn new(ring: &'a Keyring, thread: &'a str) -> Self {
        Opener { ring, thread, key: None }
    }

    fn tampered(&self, kind: &str, detail: &str) -> SealError {
        SealError::Tampered { thread: self.thread.to_string(), what: kind.to_string(), detail: detail.to_string() }
    }

    pub(crate) fn bytes(&mut self, kind: &str, stored: Vec<u8>) -> Result<Vec<u8>, SealError> {
        if !Envelope::is_sealed(&stored) {
            return Ok(stored);
        }
        let header =
            Envelope::parse(&stored).ok_or_else(|| self.tampered(kind, "a sealed envelope of another format"))?;
        let key = match &self.key {
            Some(k) if k.generation == header.generation => k.clone(),
            _ => {
                let k = self.ring.for_read(self.thread, header.generation)?;
                self.key = Some(k.clone());
                k
            }
        };
        key.open(self.thread, kind, &stored)
    }

    pub(crate) fn json(&mut self, kind: &str, value: Value) -> Result<Value, SealError> {
        let Some(b64) = sealed_json(&value) else { return Ok(value) };
        let bytes = B64.decode(b64).map_err(|_| self.tampered(kind, "its base64 text does not decode"))?;
        let text = self.bytes(kind, bytes)?;
        serde_json::from_slice(&text).map_err(|e| self.tampered(kind, &format!("it opens to invalid JSON: {e}")))
    }

    pub(crate) fn text(&mut self, kind: &str, text: String) -> Result<String, SealError> {
        let Some(b64) = text.strip_prefix(SEALED_TEXT) else { return Ok(text) };
        let bytes = B64.decode(b64).map_err(|_| self.tampered(kind, "its base64 text does not decode"))?;
        let opened = self.bytes(kind, bytes)?;
        String::from_utf8(opened).map_err(|_| self.tampered(kind, "it opens to text that is not UTF-8"))
    }

    /// A thread's detail opened; one that does not open reads as [`UNOPENED_DETAIL`].
    pub(crate) fn detail(&mut self, detail: String) -> String {
        self.text(kind::DETAIL, detail).unwrap_or_else(|_| UNOPENED_DETAIL.to_string())
    }

    pub(crate) fn checkpoint(&mut self, mut cp: Checkpoint) -> Result<Checkpoint, SealError> {
        cp.snapshot = cp.snapshot.map(|s| self.bytes(kind::SNAPSHOT, s)).transpose()?;
        cp.delta =
            std::mem::take(&mut cp.delta).into_iter().map(|d| self.bytes(kind::DELTA, d)).collect::<Result<_, _>>()?;
        cp.metadata.extra = self.json(kind::EXTRA, std::mem::take(&mut cp.metadata.extra))?;
        Ok(cp)
    }

    pub(crate) fn extra(&mut self, extra: Value) -> Result<Value, SealError> {
        self.json(kind::EXTRA, extra)
    }

    pub(crate) fn chain(&mut self, mut chain: StateChain) -> Result<StateChain, SealError> {
        chain.snapshot = self.bytes(kind::SNAPSHOT, std::mem::take(&mut chain.snapshot))?;
        for step in &mut chain.steps {
            step.delta = std::mem::take(&mut step.delta)
                .into_iter()
                .map(|d| self.bytes(kind::DELTA, d))
                .collect::<Result<_, _>>()?;
        }
        Ok(chain)
    }

    pub(crate) fn pending(&mut self, mut w: PendingWrite) -> Result<PendingWrite, SealError> {
        w.value = self.bytes(kind::PENDING, std::mem::take(&mut w.value))?;
        Ok(w)
    }

    /// An audit entry: its detail if the whole is sealed (and the hashes a restored entry
    /// carries), else (an entry the store wrote for an approval's transition) the sealed
    /// conditions and note inside it.
    pub(crate) fn audit(&mut self, mut entry: AuditEntry) -> Result<AuditEntry, SealError> {
        let detail = std::mem::take(&mut entry.detail);
        entry.detail = if let Some(b64) = restored_json(&detail) {
            let bytes =
                B64.decode(b64).map_err(|_| self.tampered(kind::RESTORED, "its base64 text does not decode"))?;
            let text = self.bytes(kind::RESTORED, bytes)?;
            let mut parts = text.splitn(3, |b| *b == b'\n');
            let (hash, link, json) = (parts.next(), parts.next(), parts.next());
            let (Some(hash), Some(link), Some(json)) = (hash, link, json) else {
                return Err(self.tampered(kind::RESTORED, "it opens to an entry without its hashes"));
            };
            entry.detail_hash = String::from_utf8_lossy(hash).into_owned();
            entry.link = String::from_utf8_lossy(link).into_owned();
            serde_json::from_slice(json)
                .map_err(|e| self.tampered(kind::RESTORED, &format!("it opens to invalid JSON: {e}")))?
        } else if sealed_json(&detail).is_some() {
            self.json(kind::AUDIT, detail)?
        } else if let Value::Object(mut map) = detail {
            if let Some(c) = map.get_mut("conditions") {
                *c = self.json(kind::CONDITIONS, std::mem::take(c))?;
            }
            if let Some(Value::String(note)) = map.get_mut("note") {
                *note = self.text(kind::NOTE, std::mem::take(note))?;
            }
            Value::Object(map)
        } else {
            detail
        };
        Ok(entry)
    }

    pub(crate) fn approval(&mut self, mut a: ApprovalRecord) -> Result<ApprovalRecord, SealError> {
        a.args = self.text(kind::ARGS, std::mem::take(&mut a.args))?;
        a.conditions = a.conditions.map(|c| self.json(kind::CONDITIONS, c)).transpose()?;
        a.decision_note = a.decision_note.map(|n| self.text(kind::NOTE, n)).transpose()?;
        Ok(a)
    }
}

/// Whether a thread's `detail` is sealed (and needs its key to be read).
pub(crate) fn is_sealed_text(text: &str) -> bool {
    text.starts_with(SEALED_TEXT)
}

/// The base64 text of a restored audit entry's sealed detail, if `value` is one.
pub(crate) fn restored_json(value: &Value) -> Option<&str> {
    match value {
        Value::Object(map) if map.len() == 1 => map.get(RESTORED_KEY).and_then(Value::as_str),
        _ => None,
    }
}

/// The base64 text of a sealed JSON value, if `value` is one.
fn sealed_json(value: &Value) -> Option<&str> {
    match value {
        Value::Object(map) if map.len() == 1 => map.get(SEALED_KEY).and_then(Value::as_str),
        _ => None,
    }
}
