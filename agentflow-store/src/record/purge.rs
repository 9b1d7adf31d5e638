//! What a purge removed, and the legal hold that refuses one.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::codec::{Dec, DecodeResult, Enc};
use crate::record::payload::RECORD_VERSION;

/// The kind of the audit entry a purge appends: its detail (counts, no payload) is kept by
/// later purges of the same thread.
pub const PURGED_KIND: &str = "thread.purged";
/// The kinds of the audit entries a legal hold's setting and release append; their details
/// (who, why) are kept by purges.
pub const HELD_KINDS: [&str; 2] = ["thread.held", "thread.released"];

/// Whether a purge keeps the detail of an audit entry of `kind`: the governance entries
/// (purges and holds), which hold no payload of the thread.
pub(crate) fn keeps_detail(kind: &str) -> bool {
    kind == PURGED_KIND || HELD_KINDS.contains(&kind)
}

/// What [`Store::purge_thread`](crate::Store::purge_thread) removed, summed over the thread
/// and its subgraph children.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PurgeReport {
    /// The threads purged: the one asked for first, then its subgraph children (each after
    /// its parent). Their records stay, as tombstones with status `purged`.
    pub threads: Vec<String>,
    /// Checkpoints removed (with their states and updates).
    pub checkpoints: u64,
    /// Pending writes removed.
    pub pending_writes: u64,
    /// Effect journal entries removed (results and markers).
    pub effects: u64,
    /// Approvals whose arguments and conditions were emptied (the records stay, with their
    /// status and who decided).
    pub approvals: u64,
    /// Audit entries whose detail was replaced by the
    /// [purge marker](crate::audit_chain::PURGED_DETAIL).
    pub audit_details: u64,
    /// Timers removed.
    pub timers: u64,
    /// Queued runs removed (with their payloads), the follow-up runs waiting behind them
    /// included.
    pub queued_runs: u64,
    /// Whether the backing file was compacted after the purge (`RedbStore`: the purge's freed
    /// pages are given back where redb can, see [`Store::purge_thread`](crate::Store::purge_thread)).
    pub file_compacted: bool,
    /// Events removed from the threads' event logs ([`Store::read_events`](crate::Store::read_events)).
    /// (Appended last.)
    pub events: u64,
    /// Webhook deliveries removed ([`Store::list_webhooks`](crate::Store::list_webhooks)), sent
    /// or not. (Appended last.)
    pub webhooks: u64,
}

impl PurgeReport {
    /// An empty report (for `Store` implementations outside this crate).
    pub fn new() -> Self {
        PurgeReport::default()
    }

    /// This report with `other`'s threads and counts added.
    pub fn merge(mut self, other: PurgeReport) -> Self {
        self.threads.extend(other.threads);
        self.checkpoints += other.checkpoints;
        self.pending_writes += other.pending_writes;
        self.effects += other.effects;
        self.approvals += other.approvals;
        self.audit_details += other.audit_details;
        self.timers += other.timers;
        self.queued_runs += other.queued_runs;
        self.file_compacted |= other.file_compacted;
        self.events += other.events;
        self.webhooks += other.webhooks;
        self
    }

    /// `detail` (the caller's tombstone detail) with the report's counts added, as the
    /// `thread.purged` entry keeps them: an object detail gets the counts as keys (its own keys
    /// win), any other detail is kept under `"detail"`.
    pub fn tombstone_detail(&self, detail: Value) -> Value {
        let mut counts = self.detail();
        match (detail, &mut counts) {
            (Value::Object(own), Value::Object(map)) => map.extend(own),
            (Value::Null, _) => {}
            (other, Value::Object(map)) => {
                map.insert("detail".to_string(), other);
            }
            _ => {}
        }
        counts
    }

    /// The report as the detail of a `thread.purged` audit entry: the counts, no payload.
    pub fn detail(&self) -> Value {
        serde_json::json!({
            "threads": self.threads,
            "checkpoints": self.checkpoints,
            "pending_writes": self.pending_writes,
            "effects": self.effects,
            "approvals": self.approvals,
            "audit_details": self.audit_details,
            "timers": self.timers,
            "queued_runs": self.queued_runs,
            "events": self.events,
            "webhooks": self.webhooks,
        })
    }
}

/// A legal hold on a thread: while it is set, the thread (and any thread whose subgraph
/// children include it) cannot be purged, by hand or by a retention policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct LegalHold {
    /// Who set it.
    pub by: String,
    /// Why (a case number, a ticket).
    pub reason: String,
    /// Unix millis when it was set.
    pub at: u64,
}

impl LegalHold {
    /// Builds a hold.
    pub fn new(by: impl Into<String>, reason: impl Into<String>, at: u64) -> Self {
        LegalHold { by: by.into(), reason: reason.into(), at }
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut e = Enc::new(RECORD_VERSION);
        e.str(&self.by).str(&self.reason).u64(self.at);
        e.finish()
    }

    pub(crate) fn decode(buf: &[u8]) -> DecodeResult<Self> {
        let mut d = Dec::new(buf, RECORD_VERSION)?;
        let hold = LegalHold { by: d.str("by")?, reason: d.str("reason")?, at: d.u64("at")? };
        d.end()?;
        Ok(hold)
    }
}

/// The note a purge leaves on an approval it cancelled.
pub(crate) const PURGED_NOTE: &str = "thread purged";

/// Empties what an approval of a purged thread held of the thread's data: its arguments, its
/// conditions and its reviewer's note. The record keeps its tool, status, hashes and who
/// decided. A `PENDING` one can no longer run, so it becomes `CANCELLED` (by `actor` at
/// `at`, noted as purged) and leaves the pending list; an `OUTCOME_UNKNOWN` one still waits
/// for a human to say what happened. Whether anything changed.
pub(crate) fn purge_approval(record: &mut crate::record::ApprovalRecord, actor: &str, at: u64) -> bool {
    use crate::record::ApprovalStatus;
    let before = record.clone();
    record.args.clear();
    record.conditions = None;
    if record.status == ApprovalStatus::Pending {
        record.status = ApprovalStatus::Cancelled;
        record.decided_by = Some(actor.to_string());
        record.decision_note = Some(PURGED_NOTE.to_string());
        record.updated_at = at;
    } else if record.decision_note.as_deref() != Some(PURGED_NOTE) {
        record.decision_note = None;
    }
    *record != before
}
