//! Moving a thread between stores, the redb side: [`Store::dump_thread`](crate::Store::dump_thread)
//! reads everything stored for one thread, and
//! [`Store::restore_thread`](crate::Store::restore_thread) writes it into another store as it
//! was (a backup, or a move from a redb file to PostgreSQL).

use redb::ReadableTable;

use crate::dump::{ThreadDump, chained_audit, check_dump, left_over, parent_in_dump};
use crate::error::CommitError;
use crate::record::{Checkpoint, Payload, Snapshot, ThreadRecord};
use crate::redb::error::WithPath;
use crate::redb::tables;
use crate::redb::thread_numbers::{has_rows, number_for, number_of};
use crate::redb::writer::Tx;

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
    // Records of the thread without its record (a submitted run's audit entry and queue row):
    // the dump would be merged into them.
    if audit.range((tid, 0)..=(tid, u64::MAX)).ctx(path)?.next().is_some() {
        return Err(left_over(tid, "audit entries"));
    }
    if tx.txn.open_table(tables::RUN_QUEUE).ctx(path)?.get(tid).ctx(path)?.is_some() {
        return Err(left_over(tid, "a queued run"));
    }
    let number = number_of(path, &tx.txn.open_table(tables::THREAD_NUMBERS).ctx(path)?, tid)?;
    if let Some(n) = number
        && (has_rows(path, &checkpoints, n)? || has_rows(path, &snapshots, n)?)
    {
        return Err(left_over(tid, "checkpoints"));
    }
    let journaled = match effects.range((tid, 0, "", "")..).ctx(path)?.next() {
        Some(entry) => entry.ctx(path)?.0.value().0 == tid,
        None => false,
    };
    let pending_writes = match pending.range((tid, 0, "", 0)..).ctx(path)?.next() {
        Some(entry) => entry.ctx(path)?.0.value().0 == tid,
        None => false,
    };
    if journaled || pending_writes {
        return Err(left_over(tid, "journaled results or pending writes"));
    }
    let events = tx.txn.open_table(tables::EVENTS).ctx(path)?;
    if events.range((tid, 0, 0)..=(tid, u64::MAX, u32::MAX)).ctx(path)?.next().is_some() {
        return Err(left_over(tid, "an event log"));
    }
    drop(events);
    let mut by_thread = tx.txn.open_table(tables::APPROVALS_BY_THREAD).ctx(path)?;
    let mut waiting = tx.txn.open_table(tables::APPROVALS_PENDING).ctx(path)?;
    tx.wrote();
    let record = ThreadRecord { lease: None, ..d.thread.clone() };
    threads.insert(tid, record.encode().as_slice()).ctx(path)?;
    crate::redb::step_commit::set_timer(tx, tid, d.wake_at)?;
    if !d.checkpoints.is_empty() {
        let number = match number {
            Some(number) => number,
            None => number_for(tx.txn, path, tid, &|n| has_rows(path, &checkpoints, n))?,
        };
        for cp in &d.checkpoints {
            let cp = Checkpoint { parent: parent_in_dump(d, cp), ..cp.clone() };
            checkpoints.insert((number, cp.seq), cp.encode_row().as_slice()).ctx(path)?;
            if let Some(state) = &cp.snapshot {
                snapshots.insert((number, cp.seq), Snapshot::encode(state).as_slice()).ctx(path)?;
            }
        }
    }
    for w in &d.pending_writes {
        pending.insert((tid, w.seq, w.node.as_str(), w.idx), Payload::encode(&w.value).as_slice()).ctx(path)?;
    }
    for (k, result) in &d.effects {
        effects.insert((tid, k.seq, k.node.as_str(), k.key.as_str()), Payload::encode(result).as_slice()).ctx(path)?;
    }
    for e in &chained_audit(d) {
        audit.insert((tid, e.seq), e.encode().as_slice()).ctx(path)?;
    }
    crate::redb::event_log::restore(tx, tid, &d.events)?;
    for a in &d.approvals {
        approvals.insert(a.id.as_str(), a.encode().as_slice()).ctx(path)?;
        by_thread.insert((tid, a.id.as_str()), ()).ctx(path)?;
        if a.status.is_waiting() {
            waiting.insert(a.id.as_str(), ()).ctx(path)?;
        }
    }
    Ok(())
}
