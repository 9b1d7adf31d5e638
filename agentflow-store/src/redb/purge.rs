//! Purging a thread of a [`RedbStore`](crate::RedbStore) and its legal holds: one writer job,
//! so one write transaction, so a crash leaves all of a purge or none of it.

use std::path::Path;

use redb::{ReadableTable, Table};

use crate::audit_chain::{is_purged, purged_detail};
use crate::checks::check_detail;
use crate::error::{PurgeError, StorageError};
use crate::record::{
    ApprovalRecord, ApprovalStatus, AuditEntry, LegalHold, NewAuditEntry, PURGED_KIND, PurgeReport, ThreadRecord,
    ThreadStatus, keeps_detail, purge_approval,
};
use crate::redb::audit::append_audit;
use crate::redb::error::WithPath;
use crate::redb::reads::{self, ByStr};
use crate::redb::step_commit::{set_timer, timer_of};
use crate::redb::tables;
use crate::redb::thread_numbers::number_of;
use crate::redb::writer::Tx;
use crate::thread_tree::descendants;

/// The purge of `thread` and its subgraph children, staged in `tx` (see
/// [`Store::purge_thread`](crate::Store::purge_thread)). Everything it refuses is refused
/// before its first write.
pub(crate) fn stage_purge(tx: &Tx<'_>, thread: &str, entry: &NewAuditEntry) -> Result<PurgeReport, PurgeError> {
    let path = tx.path;
    check_detail(thread, entry).map_err(PurgeError::from)?;
    let records = family(tx, thread)?;
    let holds = tx.txn.open_table(tables::HOLDS).ctx(path)?;
    for record in &records {
        if let Some(hold) = hold_in(path, &holds, &record.id)? {
            return Err(PurgeError::Held { thread: record.id.clone(), hold });
        }
    }
    // A hold on a thread keeps its subgraph children too: none of them is purged on its own.
    let threads = tx.txn.open_table(tables::THREADS).ctx(path)?;
    let parent = records.first().and_then(|r| r.parent.clone());
    if let Some((held, hold)) = hold_above(path, &threads, &holds, parent)? {
        return Err(PurgeError::Held { thread: held, hold });
    }
    drop((threads, holds));
    tx.wrote();
    let mut report = PurgeReport::new();
    let children: Vec<String> = records.iter().map(|r| r.id.clone()).filter(|id| id != thread).collect();
    for record in records {
        let one = purge_one(tx, record, entry)?;
        report = report.merge(one);
    }
    let mut audit = tx.txn.open_table(tables::AUDIT).ctx(path)?;
    // Each purged log records its purge, which is what lets its emptied details verify.
    for child in &children {
        let detail = serde_json::json!({ "purged_with": thread });
        append_audit(path, &mut audit, child, NewAuditEntry::new(entry.at, entry.actor.clone(), PURGED_KIND, detail))?;
    }
    let detail = report.tombstone_detail(entry.detail.clone());
    let tombstone = NewAuditEntry::new(entry.at, entry.actor.clone(), PURGED_KIND, detail);
    append_audit(path, &mut audit, thread, tombstone)?;
    Ok(report)
}

/// Sets or releases the hold of `thread`, with its audit entry, in `tx`.
pub(crate) fn stage_hold(
    tx: &Tx<'_>,
    thread: &str,
    hold: Option<&LegalHold>,
    entry: &NewAuditEntry,
) -> Result<(), PurgeError> {
    let path = tx.path;
    check_detail(thread, entry).map_err(PurgeError::from)?;
    let threads = tx.txn.open_table(tables::THREADS).ctx(path)?;
    if threads.get(thread).ctx(path)?.is_none() {
        return Err(PurgeError::UnknownThread { thread: thread.to_string() });
    }
    drop(threads);
    tx.wrote();
    let mut holds = tx.txn.open_table(tables::HOLDS).ctx(path)?;
    match hold {
        Some(hold) => holds.insert(thread, hold.encode().as_slice()).ctx(path)?,
        None => holds.remove(thread).ctx(path)?,
    };
    let mut audit = tx.txn.open_table(tables::AUDIT).ctx(path)?;
    append_audit(path, &mut audit, thread, entry.clone())?;
    Ok(())
}

/// The hold of `thread` in `holds`, if any.
pub(crate) fn hold_in(path: &Path, holds: &impl ByStr, thread: &str) -> Result<Option<LegalHold>, StorageError> {
    reads::get_str(path, holds, tables::HOLDS, thread, LegalHold::decode)
}

/// The first legal hold found on `parent` or on the threads above it (each thread's
/// [`parent`](ThreadRecord::parent), up to a root), with the held thread's id. A chain that
/// loops back (only an edited store holds one) is walked once.
pub(crate) fn hold_above(
    path: &Path,
    threads: &impl ByStr,
    holds: &impl ByStr,
    parent: Option<String>,
) -> Result<Option<(String, LegalHold)>, StorageError> {
    let mut seen = std::collections::HashSet::new();
    let mut next = parent;
    while let Some(id) = next.take() {
        if !seen.insert(id.clone()) {
            break;
        }
        if let Some(hold) = hold_in(path, holds, &id)? {
            return Ok(Some((id, hold)));
        }
        next = reads::get_str(path, threads, tables::THREADS, &id, ThreadRecord::decode)?.and_then(|r| r.parent);
    }
    Ok(None)
}

/// `thread`'s record, then its subgraph children's at every level (each after its parent). A
/// child's id extends its parent's with `/`, so they are all among the ids under `thread/`.
fn family(tx: &Tx<'_>, thread: &str) -> Result<Vec<ThreadRecord>, PurgeError> {
    let path = tx.path;
    let threads = tx.txn.open_table(tables::THREADS).ctx(path)?;
    let Some(root) = reads::get_str(path, &threads, tables::THREADS, thread, ThreadRecord::decode)? else {
        return Err(PurgeError::UnknownThread { thread: thread.to_string() });
    };
    let prefix = format!("{thread}/");
    let mut under = Vec::new();
    for entry in threads.range(prefix.as_str()..).ctx(path)? {
        let (k, v) = entry.ctx(path)?;
        let id = k.value();
        if !id.starts_with(&prefix) {
            break;
        }
        under.push(reads::decode(path, tables::THREADS, || format!("{id:?}"), v.value(), ThreadRecord::decode)?);
    }
    let children: Vec<ThreadRecord> = descendants(&under, thread).into_iter().cloned().collect();
    Ok(std::iter::once(root).chain(children).collect())
}

/// Removes one thread's data and leaves its record as a tombstone.
fn purge_one(tx: &Tx<'_>, mut record: ThreadRecord, entry: &NewAuditEntry) -> Result<PurgeReport, StorageError> {
    let path = tx.path;
    let id = record.id.clone();
    let id = id.as_str();
    let mut report = PurgeReport::new();
    report.threads.push(id.to_string());
    if let Some(number) = number_of(path, &tx.txn.open_table(tables::THREAD_NUMBERS).ctx(path)?, id)? {
        let range = (number, 0)..=(number, u64::MAX);
        let mut checkpoints = tx.txn.open_table(tables::CHECKPOINTS).ctx(path)?;
        let mut removed = 0u64;
        checkpoints
            .retain_in(range.clone(), |_, _| {
                removed += 1;
                false
            })
            .ctx(path)?;
        report.checkpoints = removed;
        let mut snapshots = tx.txn.open_table(tables::SNAPSHOTS).ctx(path)?;
        snapshots.retain_in(range, |_, _| false).ctx(path)?;
    }
    let mut pending = tx.txn.open_table(tables::PENDING_WRITES).ctx(path)?;
    let mut keys = Vec::new();
    for row in pending.range((id, 0u64, "", 0u32)..).ctx(path)? {
        let (k, _) = row.ctx(path)?;
        let (t, seq, node, idx) = k.value();
        if t != id {
            break;
        }
        keys.push((seq, node.to_string(), idx));
    }
    report.pending_writes = keys.len() as u64;
    for (seq, node, idx) in keys {
        pending.remove((id, seq, node.as_str(), idx)).ctx(path)?;
    }
    drop(pending);
    let mut effects = tx.txn.open_table(tables::EFFECTS).ctx(path)?;
    let mut keys = Vec::new();
    for row in effects.range((id, 0u64, "", "")..).ctx(path)? {
        let (k, _) = row.ctx(path)?;
        let (t, seq, node, key) = k.value();
        if t != id {
            break;
        }
        keys.push((seq, node.to_string(), key.to_string()));
    }
    report.effects = keys.len() as u64;
    for (seq, node, key) in keys {
        effects.remove((id, seq, node.as_str(), key.as_str())).ctx(path)?;
    }
    drop(effects);
    if timer_of(path, &tx.txn.open_table(tables::TIMER_OF).ctx(path)?, id)?.is_some() {
        set_timer(tx, id, None)?;
        report.timers = 1;
    }
    let mut queue = tx.txn.open_table(tables::RUN_QUEUE).ctx(path)?;
    report.queued_runs = u64::from(queue.remove(id).ctx(path)?.is_some());
    drop(queue);
    report.queued_runs += crate::redb::follow_ups::purge(tx, id)?;
    report.webhooks = crate::redb::webhooks::purge(tx, id)?;
    report.events = crate::redb::event_log::purge(tx, id)?;
    crate::redb::idempotency::purge(tx, id)?;
    report.approvals = purge_approvals(tx, id, entry)?;
    report.audit_details = purge_audit(path, &mut tx.txn.open_table(tables::AUDIT).ctx(path)?, id)?;
    if record.status != ThreadStatus::Purged || !record.detail.is_empty() || record.trace.is_some() {
        record.status = ThreadStatus::Purged;
        record.detail.clear();
        record.trace = None;
        record.updated_at = entry.at;
        let mut threads = tx.txn.open_table(tables::THREADS).ctx(path)?;
        threads.insert(id, record.encode().as_slice()).ctx(path)?;
    }
    Ok(report)
}

/// Empties the thread's approvals (see [`purge_approval`]); how many changed.
fn purge_approvals(tx: &Tx<'_>, thread: &str, entry: &NewAuditEntry) -> Result<u64, StorageError> {
    let path = tx.path;
    let by_thread = tx.txn.open_table(tables::APPROVALS_BY_THREAD).ctx(path)?;
    let mut ids = Vec::new();
    for row in by_thread.range((thread, "")..).ctx(path)? {
        let (k, _) = row.ctx(path)?;
        let (t, id) = k.value();
        if t != thread {
            break;
        }
        ids.push(id.to_string());
    }
    let mut approvals = tx.txn.open_table(tables::APPROVALS).ctx(path)?;
    let mut pending = tx.txn.open_table(tables::APPROVALS_PENDING).ctx(path)?;
    let mut changed = 0;
    for id in ids {
        let Some(mut record) = reads::get_str(path, &approvals, tables::APPROVALS, &id, ApprovalRecord::decode)? else {
            continue;
        };
        if !purge_approval(&mut record, &entry.actor, entry.at) {
            continue;
        }
        approvals.insert(id.as_str(), record.encode().as_slice()).ctx(path)?;
        if record.status == ApprovalStatus::Cancelled {
            pending.remove(id.as_str()).ctx(path)?;
        }
        changed += 1;
    }
    Ok(changed)
}

/// Replaces the detail of the thread's audit entries with the purge marker, but for the
/// governance entries (purges, holds); how many changed. Each keeps its `detail_hash` and
/// link, so the log still verifies.
fn purge_audit(
    path: &Path,
    audit: &mut Table<'_, (&'static str, u64), &'static [u8]>,
    thread: &str,
) -> Result<u64, StorageError> {
    let mut purged = Vec::new();
    reads::thread_range(path, audit, thread, |seq, bytes| {
        let entry = reads::decode(path, tables::AUDIT, || format!("({thread:?}, {seq})"), bytes, AuditEntry::decode)?;
        if !is_purged(&entry.detail) && !keeps_detail(&entry.kind) {
            purged.push(AuditEntry { detail: purged_detail(), ..entry });
        }
        Ok(())
    })?;
    for entry in &purged {
        audit.insert((thread, entry.seq), entry.encode().as_slice()).ctx(path)?;
    }
    Ok(purged.len() as u64)
}
