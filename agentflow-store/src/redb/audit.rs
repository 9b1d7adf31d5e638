//! The audit log: appending entries, numbered per thread from 1.

use std::path::Path;

use redb::{ReadableTable, Table};

use crate::audit_chain::seal;
use crate::checks::check_detail;
use crate::error::{AuditError, StorageError};
use crate::record::{AuditEntry, NewAuditEntry};
use crate::redb::error::WithPath;
use crate::redb::reads;
use crate::redb::tables;
use crate::redb::writer::Tx;

/// Appends one audit entry, chained to the one before it (see [`crate::audit_chain`]); returns
/// its seq.
pub(crate) fn append_audit(
    path: &Path,
    audit: &mut Table<'_, (&'static str, u64), &'static [u8]>,
    thread: &str,
    entry: NewAuditEntry,
) -> Result<u64, StorageError> {
    let (seq, prev) = match audit.range((thread, 0)..=(thread, u64::MAX)).ctx(path)?.next_back() {
        None => (1, String::new()),
        Some(last) => {
            let (k, v) = last.ctx(path)?;
            let last_seq = k.value().1;
            let key = || format!("({thread:?}, {last_seq})");
            let before = reads::decode(path, tables::AUDIT, key, v.value(), AuditEntry::decode)?;
            (last_seq.saturating_add(1), before.link)
        }
    };
    let mut entry = AuditEntry {
        thread: thread.to_string(),
        seq,
        at: entry.at,
        actor: entry.actor,
        kind: entry.kind,
        detail: entry.detail,
        detail_hash: String::new(),
        link: String::new(),
    };
    seal(&mut entry, &prev);
    audit.insert((thread, seq), entry.encode().as_slice()).ctx(path)?;
    Ok(seq)
}

pub(crate) fn stage_append_audit(tx: &Tx<'_>, thread: &str, entry: &NewAuditEntry) -> Result<u64, AuditError> {
    check_detail(thread, entry)?;
    let mut audit = tx.txn.open_table(tables::AUDIT).ctx(tx.path)?;
    tx.wrote();
    Ok(append_audit(tx.path, &mut audit, thread, entry.clone())?)
}
