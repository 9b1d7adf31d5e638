//! The audit log: appending entries, numbered per thread from 1.

use std::path::Path;

use redb::Table;

use crate::checks::check_detail;
use crate::error::{AuditError, StorageError};
use crate::record::{AuditEntry, NewAuditEntry};
use crate::redb::error::WithPath;
use crate::redb::reads::latest_seq;
use crate::redb::tables;
use crate::redb::writer::Tx;

/// Appends one audit entry; returns its seq.
pub(crate) fn append_audit(
    path: &Path,
    audit: &mut Table<'_, (&'static str, u64), &'static [u8]>,
    thread: &str,
    entry: NewAuditEntry,
) -> Result<u64, StorageError> {
    let seq = latest_seq(path, audit, thread)?.map_or(1, |s| s.saturating_add(1));
    let entry = AuditEntry {
        thread: thread.to_string(),
        seq,
        at: entry.at,
        actor: entry.actor,
        kind: entry.kind,
        detail: entry.detail,
    };
    audit.insert((thread, seq), entry.encode().as_slice()).ctx(path)?;
    Ok(seq)
}

pub(crate) fn stage_append_audit(tx: &Tx<'_>, thread: &str, entry: &NewAuditEntry) -> Result<u64, AuditError> {
    check_detail(thread, entry)?;
    let mut audit = tx.txn.open_table(tables::AUDIT).ctx(tx.path)?;
    tx.wrote();
    Ok(append_audit(tx.path, &mut audit, thread, entry.clone())?)
}
