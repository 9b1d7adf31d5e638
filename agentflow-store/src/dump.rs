//! [`ThreadDump`]: everything a store keeps for one thread, as
//! [`Store::dump_thread`](crate::Store::dump_thread) reads it and
//! [`Store::restore_thread`](crate::Store::restore_thread) writes it back.

use crate::codec::MAX_DOCUMENT_DEPTH;
use crate::error::{CommitError, JsonTooDeep};
use crate::record::{
    ApprovalRecord, AuditEntry, Checkpoint, EffectKey, MAX_CHECKPOINT_SEQ, PendingWrite, ThreadRecord, seq_too_large,
};

/// Everything a store keeps for one thread. The thread's lease and its place in a run queue
/// are not part of it (they belong to the processes running it).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ThreadDump {
    /// The thread's record (its `lease` is ignored on restore).
    pub thread: ThreadRecord,
    /// Its durable timer, if it sleeps.
    pub wake_at: Option<u64>,
    /// Every checkpoint, ordered by seq, with snapshots and deltas.
    pub checkpoints: Vec<Checkpoint>,
    /// Every pending write, ordered by (seq, node, idx).
    pub pending_writes: Vec<PendingWrite>,
    /// Every journaled effect result, ordered by (seq, node, key).
    pub effects: Vec<(EffectKey, Vec<u8>)>,
    /// The audit log, oldest first, with its seqs.
    pub audit: Vec<AuditEntry>,
    /// The thread's approvals, ordered by id, each with its current status.
    pub approvals: Vec<ApprovalRecord>,
}

impl ThreadDump {
    /// A dump (for code that builds one from another source, such as an export file).
    pub fn new(thread: ThreadRecord) -> Self {
        ThreadDump {
            thread,
            wake_at: None,
            checkpoints: Vec::new(),
            pending_writes: Vec::new(),
            effects: Vec::new(),
            audit: Vec::new(),
            approvals: Vec::new(),
        }
    }
}

/// Checks a dump before anything is written: every part belongs to the thread, the
/// checkpoints are in increasing order and each has its parent (or a snapshot).
pub(crate) fn check_dump(d: &ThreadDump) -> Result<(), CommitError> {
    let tid = d.thread.id.as_str();
    let invalid = |reason: String| CommitError::Invalid { thread: tid.to_string(), reason };
    if tid.is_empty() {
        return Err(invalid("the thread id is empty".to_string()));
    }
    if let Some(reason) = d.thread.parent_problem() {
        return Err(invalid(reason));
    }
    let mut seen: Vec<u64> = Vec::new();
    for cp in &d.checkpoints {
        if cp.thread != tid {
            return Err(invalid(format!("checkpoint {} belongs to thread `{}`", cp.seq, cp.thread)));
        }
        if cp.seq > MAX_CHECKPOINT_SEQ {
            return Err(invalid(seq_too_large(cp.seq)));
        }
        if seen.last().is_some_and(|last| *last >= cp.seq) {
            return Err(invalid(format!("checkpoint {} is out of order", cp.seq)));
        }
        match cp.parent {
            Some(p) if !seen.contains(&p) && cp.snapshot.is_none() => {
                return Err(invalid(format!("checkpoint {} has neither its parent {p} nor a snapshot", cp.seq)));
            }
            None if cp.snapshot.is_none() => {
                return Err(invalid(format!("checkpoint {} has no parent, so it must carry a snapshot", cp.seq)));
            }
            _ => {}
        }
        seen.push(cp.seq);
    }
    if let Some(e) = d.audit.iter().find(|e| e.thread != tid) {
        return Err(invalid(format!("audit entry {} belongs to thread `{}`", e.seq, e.thread)));
    }
    if let Some(a) = d.approvals.iter().find(|a| a.thread != tid) {
        return Err(invalid(format!("approval `{}` belongs to thread `{}`", a.id, a.thread)));
    }
    if let Some((k, _)) = d.effects.iter().find(|(k, _)| k.thread != tid) {
        return Err(invalid(format!("effect `{}` belongs to thread `{}`", k.key, k.thread)));
    }
    // The JSON the store reads back itself is held to the limits a commit is (an edited dump
    // must not make the thread unreadable): checkpoint metadata, audit details, conditions.
    let too_deep = |source| CommitError::TooDeep { thread: tid.to_string(), source };
    for cp in &d.checkpoints {
        let root = format!("checkpoint {}: metadata.extra", cp.seq);
        JsonTooDeep::check(&cp.metadata.extra, MAX_DOCUMENT_DEPTH, &root).map_err(too_deep)?;
    }
    for e in &d.audit {
        JsonTooDeep::check(&e.detail, MAX_DOCUMENT_DEPTH, &format!("audit entry {}: detail", e.seq))
            .map_err(too_deep)?;
    }
    for a in &d.approvals {
        crate::approvals::check_conditions(&a.id, a.conditions.as_ref())?;
    }
    Ok(())
}

/// A checkpoint whose parent is not in the dump (dropped by compaction) is restored as a root:
/// it carries a snapshot (checked by [`check_dump`]).
pub(crate) fn parent_in_dump(d: &ThreadDump, cp: &Checkpoint) -> Option<u64> {
    cp.parent.filter(|p| d.checkpoints.iter().any(|c| c.seq == *p))
}
