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

use std::path::Path;

use redb::{ReadableTable, TableDefinition, WriteTransaction};

use crate::error::StorageError;
use crate::record::{Payload, WakeAt};
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
