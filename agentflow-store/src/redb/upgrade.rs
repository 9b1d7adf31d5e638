//! Moving a [`RedbStore`](crate::RedbStore) file of an older store format to this build's, in
//! the transaction that opens it (a failure or a crash leaves the file as it was).
//!
//! Formats 3 and 4 differ from 5 in two ways this changes:
//! - checkpoints and snapshots were keyed by thread id: [`crate::redb::thread_numbers::renumber`];
//! - the run queue's rows and the circuit breakers were plain JSON: each is wrapped in the record
//!   encoding every other stored value has (a version byte, the bytes, a CRC-32);
//! - a durable timer's wake time was a bare `u64`: it becomes a record too.
//!
//! (Format 3's thread records without a parent are read as they are.)
//!
//! Format 6 adds to each audit entry its `detail_hash` and `link` (the audit log's hash chain,
//! see [`crate::audit_chain`]): [`to_format_6`] chains every thread's log as it stands, so a
//! change made to a log before the move cannot be detected. Thread records of format 5 and
//! older end before the tenant, and are read with none.
//!
//! Format 7 adds the legal holds table, which opening any file creates. Format 8 changes no
//! stored row: thread records of format 7 and older end before the trace context, and are read
//! with none (the first commit that brings one stores it). Format 9 adds the tables of the
//! threads' event logs and of the idempotency keys, which opening any file creates (the move
//! changes no row).

use std::path::Path;

use redb::{ReadableTable, TableDefinition, WriteTransaction};

use crate::audit_chain::seal;
use crate::error::StorageError;
use crate::record::{AuditEntry, Payload, WakeAt};
use crate::redb::error::WithPath;
use crate::redb::tables;
use crate::redb::thread_numbers;

/// Moves a file of format 3 or 4 to format 5, in `txn`.
pub(crate) fn to_format_5(txn: &WriteTransaction, path: &Path) -> Result<(), StorageError> {
    // Each step works on tables of formats 3 and 4 that it renames or rewrites in place, so the
    // names listed before the first are the ones each looks for.
    let names: Vec<String> = txn.list_tables().ctx(path)?.map(|t| redb::TableHandle::name(&t).to_string()).collect();
    let has = |table: &str| names.iter().any(|n| n == table);
    thread_numbers::renumber(txn, path, has)?;
    for table in [tables::RUN_QUEUE, tables::BREAKERS] {
        if has(redb::TableHandle::name(&table)) {
            checksum_json_rows(txn, path, table)?;
        }
    }
    if has(redb::TableHandle::name(&BARE_TIMER_OF)) {
        timers_as_records(txn, path)?;
    }
    Ok(())
}

/// How many audit entries [`to_format_6`] reads before it writes them back.
const AUDIT_BATCH: usize = 1024;

/// Moves a file of format 5 to format 6, in `txn`: every audit entry gets its `detail_hash`
/// and its `link` to the entry before it, thread by thread in seq order. An entry that does not
/// decode is left as it is (reading it reports it, as before) and the next one is chained after
/// the last that did.
pub(crate) fn to_format_6(txn: &WriteTransaction, path: &Path) -> Result<(), StorageError> {
    let mut audit = txn.open_table(tables::AUDIT).ctx(path)?;
    let mut from: Option<(String, u64)> = None;
    let mut prev = (String::new(), String::new());
    loop {
        let batch: Vec<((String, u64), Vec<u8>)> = {
            let rows = match &from {
                None => audit.range::<(&str, u64)>(..).ctx(path)?,
                Some((thread, seq)) => audit.range((thread.as_str(), *seq)..).ctx(path)?,
            };
            rows.skip(usize::from(from.is_some()))
                .take(AUDIT_BATCH)
                .map(|row| {
                    row.ctx(path).map(|(k, v)| {
                        let (thread, seq) = k.value();
                        ((thread.to_string(), seq), v.value().to_vec())
                    })
                })
                .collect::<Result<_, _>>()?
        };
        let Some((last, _)) = batch.last() else { return Ok(()) };
        from = Some(last.clone());
        for ((thread, seq), bytes) in batch {
            if prev.0 != thread {
                prev = (thread.clone(), String::new());
            }
            let Ok(mut entry) = AuditEntry::decode(&bytes) else { continue };
            seal(&mut entry, &prev.1);
            audit.insert((thread.as_str(), seq), entry.encode().as_slice()).ctx(path)?;
            prev.1 = entry.link;
        }
    }
}

/// `agentflow.timer_of` as formats 3 and 4 had it: the bare wake time.
const BARE_TIMER_OF: TableDefinition<&str, u64> = TableDefinition::new("agentflow.timer_of");
/// Where [`timers_as_records`] moves it while it copies its entries.
const OLD_TIMER_OF: TableDefinition<&str, u64> = TableDefinition::new("agentflow.timer_of.bare");

/// Rewrites each wake time of `agentflow.timer_of` as a record.
fn timers_as_records(txn: &WriteTransaction, path: &Path) -> Result<(), StorageError> {
    txn.rename_table(BARE_TIMER_OF, OLD_TIMER_OF).ctx(path)?;
    {
        let old = txn.open_table(OLD_TIMER_OF).ctx(path)?;
        let mut new = txn.open_table(tables::TIMER_OF).ctx(path)?;
        for entry in old.iter().ctx(path)? {
            let (thread, at) = entry.ctx(path)?;
            new.insert(thread.value(), WakeAt::encode(at.value()).as_slice()).ctx(path)?;
        }
    }
    txn.delete_table(OLD_TIMER_OF).ctx(path)?;
    Ok(())
}

/// Wraps each value of `table` (plain JSON) in the record encoding.
fn checksum_json_rows(
    txn: &WriteTransaction,
    path: &Path,
    table: TableDefinition<&str, &[u8]>,
) -> Result<(), StorageError> {
    let mut rows = txn.open_table(table).ctx(path)?;
    let plain: Vec<(String, Vec<u8>)> = rows
        .iter()
        .ctx(path)?
        .map(|entry| entry.ctx(path).map(|(k, v)| (k.value().to_string(), v.value().to_vec())))
        .collect::<Result<_, _>>()?;
    for (key, json) in plain {
        rows.insert(key.as_str(), Payload::encode(&json).as_slice()).ctx(path)?;
    }
    Ok(())
}
