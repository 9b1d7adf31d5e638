//! Listings of a [`RedbStore`] that skip or refuse a record that does not
//! decode, and the reads of one thread's rows that a dump and the read methods share.

use std::path::Path;

use redb::ReadTransaction;

use crate::error::{ReadError, StorageError};
use crate::record::{ApprovalRecord, AuditEntry, Checkpoint, EffectKey, Payload, PendingWrite, ThreadRecord};
use crate::redb::effects::effect_key;
use crate::redb::error::WithPath;
use crate::redb::reads;
use crate::redb::redb_store::RedbStore;
use crate::redb::tables;
use crate::redb::thread_numbers::{self, ByNumber, Numbered};
use crate::store::Listing;

/// What a listing does with a record that does not decode.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Scan {
    /// Fail the listing.
    Strict,
    /// Skip it and report it in [`Listing::skipped`].
    Skip,
}

/// Collects a listing's records.
pub(super) struct Collect<T> {
    scan: Scan,
    listing: Listing<T>,
}

impl<T> Collect<T> {
    pub(super) fn new(scan: Scan) -> Self {
        Collect { scan, listing: Listing::complete(Vec::new()) }
    }

    /// Adds a decoded record, or handles a decode failure as the scan says; any other failure
    /// of the file fails the listing.
    pub(super) fn push(&mut self, record: Result<T, StorageError>) -> Result<(), StorageError> {
        match record {
            Ok(item) => self.listing.items.push(item),
            Err(e @ StorageError::Decode { .. }) if self.scan == Scan::Skip => self.listing.skipped.push(e),
            Err(e) => return Err(e),
        }
        Ok(())
    }
}

impl RedbStore {
    pub(super) fn threads(&self, scan: Scan) -> Result<Listing<ThreadRecord>, ReadError> {
        self.read(|txn, path| {
            let threads = txn.open_table(tables::THREADS).ctx(path)?;
            let leases = self.shared.leases.snapshot();
            let mut out = Collect::new(scan);
            for entry in redb::ReadableTable::iter(&threads).ctx(path)? {
                let (k, v) = entry.ctx(path)?;
                let id = k.value();
                let record =
                    reads::decode(path, tables::THREADS, || format!("{id:?}"), v.value(), ThreadRecord::decode).map(
                        |mut record| {
                            record.lease = leases.get(id).cloned();
                            record
                        },
                    );
                out.push(record)?;
            }
            Ok(out.listing)
        })
    }

    /// The children of `parent`: a child's id extends its parent's with `/` and one level
    /// (`{node}.{seq}.{call}.{graph}`, no `/`), so they are among the ids one level under
    /// `parent/` (a thread of its own with such an id is not one: its record names no parent).
    pub(super) fn threads_under(&self, parent: &str) -> Result<Listing<ThreadRecord>, ReadError> {
        let prefix = format!("{parent}/");
        self.read(|txn, path| {
            let threads = txn.open_table(tables::THREADS).ctx(path)?;
            let leases = self.shared.leases.snapshot();
            let mut out = Collect::new(Scan::Skip);
            for entry in threads.range(prefix.as_str()..).ctx(path)? {
                let (k, v) = entry.ctx(path)?;
                let id = k.value();
                let Some(level) = id.strip_prefix(&prefix) else { break };
                // Deeper down: a child's own children, unless its record names `parent` (an id
                // whose level holds a `/`), as PostgreSQL selects them by that field.
                let deeper = level.contains('/');
                let record =
                    reads::decode(path, tables::THREADS, || format!("{id:?}"), v.value(), ThreadRecord::decode).map(
                        |mut record| {
                            record.lease = leases.get(id).cloned();
                            record
                        },
                    );
                if record.as_ref().is_ok_and(|r| r.parent.as_deref() != Some(parent)) {
                    continue;
                }
                // An unreadable record further down is its own parent's to report.
                if deeper && record.is_err() {
                    continue;
                }
                out.push(record)?;
            }
            Ok(out.listing)
        })
    }

    pub(super) fn audit(&self, thread: &str, scan: Scan) -> Result<Listing<AuditEntry>, ReadError> {
        self.read(|txn, path| Ok(audit_in(txn, path, thread, scan)?))
    }

    pub(super) fn approvals_of(&self, thread: &str, scan: Scan) -> Result<Listing<ApprovalRecord>, ReadError> {
        self.read(|txn, path| Ok(approvals_in(txn, path, thread, scan)?))
    }

    pub(super) fn pending_approvals(&self, scan: Scan) -> Result<Listing<ApprovalRecord>, ReadError> {
        self.read(|txn, path| {
            let index = txn.open_table(tables::APPROVALS_PENDING).ctx(path)?;
            let approvals = txn.open_table(tables::APPROVALS).ctx(path)?;
            let mut out = Collect::new(scan);
            for entry in redb::ReadableTable::iter(&index).ctx(path)? {
                let (k, _) = entry.ctx(path)?;
                if let Some(record) =
                    reads::get_str(path, &approvals, tables::APPROVALS, k.value(), ApprovalRecord::decode).transpose()
                {
                    out.push(record)?;
                }
            }
            Ok(out.listing)
        })
    }
}

/// The pending writes of `thread` at checkpoint `seq`, or at every checkpoint (`None`), ordered
/// by seq, node and index.
pub(super) fn pending_writes_in(
    txn: &ReadTransaction,
    path: &Path,
    thread: &str,
    seq: Option<u64>,
) -> Result<Vec<PendingWrite>, StorageError> {
    let pending = txn.open_table(tables::PENDING_WRITES).ctx(path)?;
    let mut out = Vec::new();
    for entry in redb::ReadableTable::range(&pending, (thread, seq.unwrap_or(0), "", 0u32)..).ctx(path)? {
        let (k, v) = entry.ctx(path)?;
        let (t, s, node, idx) = k.value();
        if t != thread || seq.is_some_and(|seq| s != seq) {
            break;
        }
        let key = || format!("({thread:?}, {s}, {node:?}, {idx})");
        let value = reads::decode(path, tables::PENDING_WRITES, key, v.value(), Payload::decode)?;
        out.push(PendingWrite { seq: s, node: node.to_string(), idx, value });
    }
    Ok(out)
}

/// The whole effect journal of `thread`, in one range scan.
pub(super) fn thread_effects_in(
    txn: &ReadTransaction,
    path: &Path,
    thread: &str,
) -> Result<Vec<(EffectKey, Vec<u8>)>, StorageError> {
    let effects = txn.open_table(tables::EFFECTS).ctx(path)?;
    let mut journal = Vec::new();
    for entry in redb::ReadableTable::range(&effects, (thread, 0u64, "", "")..).ctx(path)? {
        let (k, v) = entry.ctx(path)?;
        let (t, seq, node, key) = k.value();
        if t != thread {
            break;
        }
        let key = EffectKey::new(t, seq, node, key);
        let result = reads::decode(path, tables::EFFECTS, || effect_key(&key), v.value(), Payload::decode)?;
        journal.push((key, result));
    }
    Ok(journal)
}

/// The durable timer of `thread`, if it has one.
pub(super) fn timer_in(txn: &ReadTransaction, path: &Path, thread: &str) -> Result<Option<u64>, StorageError> {
    crate::redb::step_commit::timer_of(path, &txn.open_table(tables::TIMER_OF).ctx(path)?, thread)
}

/// The audit log of `thread`, oldest first.
pub(super) fn audit_in(
    txn: &ReadTransaction,
    path: &Path,
    thread: &str,
    scan: Scan,
) -> Result<Listing<AuditEntry>, StorageError> {
    let audit = txn.open_table(tables::AUDIT).ctx(path)?;
    let mut out = Collect::new(scan);
    reads::thread_range(path, &audit, thread, |seq, bytes| {
        out.push(reads::decode(path, tables::AUDIT, || format!("({thread:?}, {seq})"), bytes, AuditEntry::decode))
    })?;
    Ok(out.listing)
}

/// The approvals of `thread`, ordered by id.
pub(super) fn approvals_in(
    txn: &ReadTransaction,
    path: &Path,
    thread: &str,
    scan: Scan,
) -> Result<Listing<ApprovalRecord>, StorageError> {
    let index = txn.open_table(tables::APPROVALS_BY_THREAD).ctx(path)?;
    let approvals = txn.open_table(tables::APPROVALS).ctx(path)?;
    let mut out = Collect::new(scan);
    for entry in redb::ReadableTable::range(&index, (thread, "")..).ctx(path)? {
        let (k, _) = entry.ctx(path)?;
        let (t, id) = k.value();
        if t != thread {
            break;
        }
        if let Some(record) =
            reads::get_str(path, &approvals, tables::APPROVALS, id, ApprovalRecord::decode).transpose()
        {
            out.push(record)?;
        }
    }
    Ok(out.listing)
}

/// The thread as the checkpoint tables key it (`None`: it has no checkpoint).
pub(super) fn numbered<'a>(
    txn: &ReadTransaction,
    path: &Path,
    thread: &'a str,
) -> Result<Option<Numbered<'a>>, StorageError> {
    Ok(thread_numbers::number_in(txn, path, thread)?.map(|number| Numbered { id: thread, number }))
}

pub(super) fn load_checkpoint(
    path: &Path,
    checkpoints: &impl ByNumber,
    snapshots: &impl ByNumber,
    thread: Option<Numbered<'_>>,
    seq: u64,
) -> Result<Option<Checkpoint>, ReadError> {
    let Some(thread) = thread else { return Ok(None) };
    let Some((summary, delta)) = reads::row(path, checkpoints, thread, seq)? else {
        return Ok(None);
    };
    let snapshot = if summary.has_snapshot { Some(reads::snapshot(path, snapshots, thread, seq)?) } else { None };
    Ok(Some(Checkpoint::from_parts(summary, snapshot, delta)))
}
