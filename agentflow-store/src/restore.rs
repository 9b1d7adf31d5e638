//! Moving a thread between stores: [`dump_thread`] reads everything stored for one thread,
//! and [`Store::restore_thread`](crate::Store::restore_thread) writes it into another store
//! as it was (a backup, or a move from a redb file to PostgreSQL).

use redb::ReadableTable;

use crate::error::{CommitError, Ctx, ReadError};
use crate::record::{ApprovalRecord, AuditEntry, Checkpoint, EffectKey, Payload, PendingWrite, Snapshot, ThreadRecord};
use crate::store::Store;
use crate::tables;
use crate::writer::Tx;

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

/// Reads everything `store` keeps for `thread` (`None`: no such thread) through the `Store`
/// methods, so it works on every backend. Reads are not one snapshot: dump a thread no run
/// is changing (a finished or paused one, or with the app stopped).
pub fn dump_thread(store: &dyn Store, thread: &str) -> Result<Option<ThreadDump>, ReadError> {
    let Some(record) = store.thread(thread)? else { return Ok(None) };
    let mut dump = ThreadDump::new(record);
    dump.wake_at = store.thread_timer(thread)?;
    for summary in store.list_checkpoints(thread)? {
        let Some(cp) = store.checkpoint(thread, summary.seq)? else { continue };
        dump.pending_writes.extend(store.pending_writes(thread, cp.seq)?);
        for key in store.effect_keys(thread, cp.seq)? {
            if let Some(result) = store.effect(&key)? {
                dump.effects.push((key, result));
            }
        }
        dump.checkpoints.push(cp);
    }
    dump.audit = store.list_audit(thread)?;
    dump.approvals = store.list_approvals(thread)?;
    Ok(Some(dump))
}

/// Checks a dump before anything is written: every part belongs to the thread, the
/// checkpoints are in increasing order and each has its parent (or a snapshot).
pub(crate) fn check_dump(d: &ThreadDump) -> Result<(), CommitError> {
    let tid = d.thread.id.as_str();
    let invalid = |reason: String| CommitError::Invalid { thread: tid.to_string(), reason };
    if tid.is_empty() {
        return Err(invalid("the thread id is empty".to_string()));
    }
    let mut seen: Vec<u64> = Vec::new();
    for cp in &d.checkpoints {
        if cp.thread != tid {
            return Err(invalid(format!("checkpoint {} belongs to thread `{}`", cp.seq, cp.thread)));
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
    Ok(())
}

/// A checkpoint whose parent is not in the dump (dropped by compaction) is restored as a root:
/// it carries a snapshot (checked by [`check_dump`]).
pub(crate) fn parent_in_dump(d: &ThreadDump, cp: &Checkpoint) -> Option<u64> {
    cp.parent.filter(|p| d.checkpoints.iter().any(|c| c.seq == *p))
}

/// The redb side of `restore_thread`: every part in the transaction of `tx`.
pub(crate) fn stage_restore(tx: &Tx<'_>, d: &ThreadDump) -> Result<(), CommitError> {
    let path = tx.path;
    let tid = d.thread.id.as_str();
    check_dump(d)?;
    let mut threads = tx.txn.open_table(tables::THREADS).ctx(path)?;
    let mut approvals = tx.txn.open_table(tables::APPROVALS).ctx(path)?;
    if threads.get(tid).ctx(path)?.is_some() {
        return Err(CommitError::Invalid {
            thread: tid.to_string(),
            reason: "the thread exists already in this store".to_string(),
        });
    }
    for a in &d.approvals {
        if approvals.get(a.id.as_str()).ctx(path)?.is_some() {
            return Err(CommitError::Invalid {
                thread: tid.to_string(),
                reason: format!("approval `{}` exists already in this store", a.id),
            });
        }
    }
    let mut checkpoints = tx.txn.open_table(tables::CHECKPOINTS).ctx(path)?;
    let mut snapshots = tx.txn.open_table(tables::SNAPSHOTS).ctx(path)?;
    let mut pending = tx.txn.open_table(tables::PENDING_WRITES).ctx(path)?;
    let mut effects = tx.txn.open_table(tables::EFFECTS).ctx(path)?;
    let mut audit = tx.txn.open_table(tables::AUDIT).ctx(path)?;
    let mut by_thread = tx.txn.open_table(tables::APPROVALS_BY_THREAD).ctx(path)?;
    let mut waiting = tx.txn.open_table(tables::APPROVALS_PENDING).ctx(path)?;
    tx.wrote();
    let record = ThreadRecord { lease: None, ..d.thread.clone() };
    threads.insert(tid, record.encode().as_slice()).ctx(path)?;
    crate::step_commit::set_timer(tx, tid, d.wake_at)?;
    for cp in &d.checkpoints {
        let cp = Checkpoint { parent: parent_in_dump(d, cp), ..cp.clone() };
        checkpoints.insert((tid, cp.seq), cp.summary().encode_row(&cp.delta).as_slice()).ctx(path)?;
        if let Some(state) = &cp.snapshot {
            snapshots.insert((tid, cp.seq), Snapshot::encode(state).as_slice()).ctx(path)?;
        }
    }
    for w in &d.pending_writes {
        pending.insert((tid, w.seq, w.node.as_str(), w.idx), Payload::encode(&w.value).as_slice()).ctx(path)?;
    }
    for (k, result) in &d.effects {
        effects.insert((tid, k.seq, k.node.as_str(), k.key.as_str()), Payload::encode(result).as_slice()).ctx(path)?;
    }
    for e in &d.audit {
        audit.insert((tid, e.seq), e.encode().as_slice()).ctx(path)?;
    }
    for a in &d.approvals {
        approvals.insert(a.id.as_str(), a.encode().as_slice()).ctx(path)?;
        by_thread.insert((tid, a.id.as_str()), ()).ctx(path)?;
        if a.status.is_waiting() {
            waiting.insert(a.id.as_str(), ()).ctx(path)?;
        }
    }
    Ok(())
}
