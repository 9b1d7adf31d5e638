//! Moving a [`RedbStore`](crate::RedbStore) file of an older store format to this build's, in
//! the transaction that opens it (a failure or a crash leaves the file as it was).
//!
//! Formats 3 and 4 differ from 5 in two ways this changes:
//! - checkpoints and snapshots were keyed by thread id: [`crate::thread_numbers::renumber`];
//! - the run queue's rows and the circuit breakers were plain JSON: each is wrapped in the record
//!   encoding every other stored value has (a version byte, the bytes, a CRC-32).
//!
//! (Format 3's thread records without a parent are read as they are.)

use std::path::Path;

use redb::{ReadableTable, TableDefinition, WriteTransaction};

use crate::error::{Ctx, StorageError};
use crate::record::Payload;
use crate::tables;
use crate::thread_numbers;

/// Moves a file of format 3 or 4 to format 5, in `txn`.
pub(crate) fn to_format_5(txn: &WriteTransaction, path: &Path) -> Result<(), StorageError> {
    thread_numbers::renumber(txn, path)?;
    checksum_json_rows(txn, path, tables::RUN_QUEUE)?;
    checksum_json_rows(txn, path, tables::BREAKERS)
}

/// Wraps each value of `table` (plain JSON) in the record encoding.
fn checksum_json_rows(
    txn: &WriteTransaction,
    path: &Path,
    table: TableDefinition<&str, &[u8]>,
) -> Result<(), StorageError> {
    let names: Vec<String> = txn.list_tables().ctx(path)?.map(|t| redb::TableHandle::name(&t).to_string()).collect();
    if !names.iter().any(|n| n == redb::TableHandle::name(&table)) {
        return Ok(());
    }
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
