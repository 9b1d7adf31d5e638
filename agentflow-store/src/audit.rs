//! The audit log: appending entries, numbered per thread from 1.

use std::path::Path;

use redb::Table;

use crate::codec::MAX_DOCUMENT_DEPTH;
use crate::error::{AuditError, Ctx, JsonTooDeep, StorageError};
use crate::reads::latest_seq;
use crate::record::{AuditEntry, NewAuditEntry};
use crate::tables;
use crate::writer::Tx;

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

/// Refuses an entry whose detail nests deeper than the store reads back
/// ([`MAX_DOCUMENT_DEPTH`]): every backend checks before it writes a standalone entry.
pub(crate) fn check_detail(thread: &str, entry: &NewAuditEntry) -> Result<(), AuditError> {
    JsonTooDeep::check(&entry.detail, MAX_DOCUMENT_DEPTH, "detail").map_err(|source| AuditError::TooDeep {
        thread: thread.to_string(),
        kind: entry.kind.clone(),
        source,
    })
}

pub(crate) fn stage_append_audit(tx: &Tx<'_>, thread: &str, entry: &NewAuditEntry) -> Result<u64, AuditError> {
    check_detail(thread, entry)?;
    let mut audit = tx.txn.open_table(tables::AUDIT).ctx(tx.path)?;
    tx.wrote();
    Ok(append_audit(tx.path, &mut audit, thread, entry.clone())?)
}
