//! Each thread's number: the first part of its checkpoint and snapshot keys in a
//! [`RedbStore`](crate::RedbStore) file (see [`tables::THREAD_NUMBERS`]).
//!
//! A thread is numbered when its first checkpoint is written, so the newest thread's rows go at
//! the end of the checkpoint table whatever its id: a `Sync` step then costs redb what an
//! append does. None is ever removed (no store method deletes a thread), and a new number that
//! already holds rows (a damaged counter) is refused, so none is reused; the reads check that a
//! row found under a thread's number is that thread's (`reads::owned`).

use std::path::Path;

use redb::{ReadTransaction, ReadableTable, TableDefinition, TableHandle, WriteTransaction};

use crate::error::StorageError;
use crate::redb::error::WithPath;
use crate::redb::tables;

/// The key in [`tables::META`] of the number the next thread gets.
const NEXT: &str = "next_thread_number";

/// A table keyed by (thread number, seq): checkpoints and snapshots.
pub(crate) trait ByNumber: ReadableTable<(u64, u64), &'static [u8]> {}
impl<T: ReadableTable<(u64, u64), &'static [u8]>> ByNumber for T {}

/// A thread as the checkpoint and snapshot tables key it: its number for the keys, its id for
/// what an error names.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Numbered<'a> {
    pub(crate) id: &'a str,
    pub(crate) number: u64,
}

impl Numbered<'_> {
    /// The key of checkpoint `seq` of this thread.
    pub(crate) fn key(self, seq: u64) -> (u64, u64) {
        (self.number, seq)
    }

    /// How an error names the row of checkpoint `seq`: by the thread's id.
    pub(crate) fn describe(self, seq: u64) -> String {
        format!("({:?} (thread number {}), {seq})", self.id, self.number)
    }
}

/// The thread's number, if it has one (it has written a checkpoint).
pub(crate) fn number_of(
    path: &Path,
    numbers: &impl ReadableTable<&'static str, u64>,
    id: &str,
) -> Result<Option<u64>, StorageError> {
    Ok(numbers.get(id).ctx(path)?.map(|v| v.value()))
}

/// The thread's number in a read transaction (`None`: the thread has no checkpoint).
pub(crate) fn number_in(txn: &ReadTransaction, path: &Path, id: &str) -> Result<Option<u64>, StorageError> {
    number_of(path, &txn.open_table(tables::THREAD_NUMBERS).ctx(path)?, id)
}

/// Whether a number already holds rows (of the table the caller has open): a number the counter
/// gives a new thread must not.
pub(crate) type Taken<'a> = &'a dyn Fn(u64) -> Result<bool, StorageError>;

/// Whether `table` holds rows under thread number `number`.
pub(crate) fn has_rows(path: &Path, table: &impl ByNumber, number: u64) -> Result<bool, StorageError> {
    Ok(table.range((number, 0)..=(number, u64::MAX)).ctx(path)?.next().is_some())
}

/// The thread's number, given it now if it has none. A new number that `taken` says holds rows
/// already (a damaged counter) is refused: the thread would take over another's history.
pub(crate) fn number_for(txn: &WriteTransaction, path: &Path, id: &str, taken: Taken<'_>) -> Result<u64, StorageError> {
    let mut numbers = txn.open_table(tables::THREAD_NUMBERS).ctx(path)?;
    if let Some(number) = number_of(path, &numbers, id)? {
        return Ok(number);
    }
    let mut meta = txn.open_table(tables::META).ctx(path)?;
    let number = match meta.get(NEXT).ctx(path)? {
        None => 0,
        Some(v) => <[u8; 8]>::try_from(v.value()).map(u64::from_le_bytes).map_err(|_| StorageError::Decode {
            path: path.to_path_buf(),
            table: tables::META.name().to_string(),
            key: format!("{NEXT:?}"),
            reason: format!("{} bytes where a u64 (8 bytes) was expected", v.value().len()),
        })?,
    };
    let next = number.checked_add(1).ok_or_else(|| StorageError::Corrupted {
        path: path.to_path_buf(),
        detail: format!("`{NEXT}` is at u64::MAX: no thread number is left for thread {id:?}"),
    })?;
    if taken(number)? {
        return Err(StorageError::Corrupted {
            path: path.to_path_buf(),
            detail: format!(
                "thread number {number}, which `{NEXT}` gives the new thread {id:?}, already holds another thread's \
                 rows: the counter is damaged"
            ),
        });
    }
    meta.insert(NEXT, next.to_le_bytes().as_slice()).ctx(path)?;
    numbers.insert(id, number).ctx(path)?;
    Ok(number)
}

/// The checkpoint and snapshot tables as store formats 3 and 4 keyed them: by thread id.
const BY_ID_CHECKPOINTS: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("agentflow.checkpoints");
const BY_ID_SNAPSHOTS: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("agentflow.snapshots");
/// Where [`renumber`] moves them while it copies their rows.
const OLD_CHECKPOINTS: TableDefinition<(&str, u64), &[u8]> =
    TableDefinition::new("agentflow.checkpoints.keyed_by_thread_id");
const OLD_SNAPSHOTS: TableDefinition<(&str, u64), &[u8]> =
    TableDefinition::new("agentflow.snapshots.keyed_by_thread_id");

/// Moves a file of store format 3 or 4, whose checkpoints and snapshots are keyed by thread id,
/// to keys by thread number: numbers every thread that has a checkpoint (in the order of their
/// ids) and copies each row under its new key, all in `txn`, so a failure leaves the file as
/// it was. `has` says whether the file has a table of that name.
pub(crate) fn renumber(txn: &WriteTransaction, path: &Path, has: impl Fn(&str) -> bool) -> Result<(), StorageError> {
    let pairs = [
        (BY_ID_CHECKPOINTS, OLD_CHECKPOINTS, tables::CHECKPOINTS),
        (BY_ID_SNAPSHOTS, OLD_SNAPSHOTS, tables::SNAPSHOTS),
    ];
    for (by_id, old, _) in pairs {
        if has(by_id.name()) {
            txn.rename_table(by_id, old).ctx(path)?;
        }
    }
    for (by_id, old, new) in pairs {
        if !has(by_id.name()) {
            continue;
        }
        let rows = txn.open_table(old).ctx(path)?;
        let mut new = txn.open_table(new).ctx(path)?;
        // The rows come in id order: one lookup per thread.
        let mut last: Option<(String, u64)> = None;
        for entry in rows.iter().ctx(path)? {
            let (key, value) = entry.ctx(path)?;
            let (id, seq) = key.value();
            let number = match &last {
                Some((last_id, number)) if last_id == id => *number,
                _ => {
                    let number = number_for(txn, path, id, &|n| has_rows(path, &new, n))?;
                    last = Some((id.to_string(), number));
                    number
                }
            };
            new.insert((number, seq), value.value()).ctx(path)?;
        }
        drop(rows);
        txn.delete_table(old).ctx(path)?;
    }
    Ok(())
}
