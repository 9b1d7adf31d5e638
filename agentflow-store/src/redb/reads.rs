//! Record-level reads shared by the store's read methods and its write staging: decoding a
//! stored value (naming its table and key on failure), thread records, checkpoint rows and
//! state chains.

use std::path::Path;

use redb::{ReadableTable, TableHandle};

use crate::codec::DecodeResult;
use crate::error::{ReadError, StorageError};
use crate::record::{ChainStep, CheckpointSummary, Row, Snapshot, StateChain, ThreadRecord};
use crate::redb::error::WithPath;
use crate::redb::leases::Leases;
use crate::redb::tables;
use crate::redb::thread_numbers::{ByNumber, Numbered};

/// A table keyed by a string (threads, leases, approvals).
pub(crate) trait ByStr: ReadableTable<&'static str, &'static [u8]> {}
impl<T: ReadableTable<&'static str, &'static [u8]>> ByStr for T {}

/// A table keyed by (thread id, seq) (the audit log).
pub(crate) trait BySeq: ReadableTable<(&'static str, u64), &'static [u8]> {}
impl<T: ReadableTable<(&'static str, u64), &'static [u8]>> BySeq for T {}

/// Decodes a stored value, naming the table and key on failure.
pub(crate) fn decode<T>(
    path: &Path,
    table: impl TableHandle,
    key: impl FnOnce() -> String,
    bytes: &[u8],
    f: fn(&[u8]) -> DecodeResult<T>,
) -> Result<T, StorageError> {
    f(bytes).map_err(|reason| StorageError::Decode {
        path: path.to_path_buf(),
        table: table.name().to_string(),
        key: key(),
        reason,
    })
}

pub(crate) fn get_str<T>(
    path: &Path,
    table: &impl ByStr,
    table_name: impl TableHandle,
    id: &str,
    f: fn(&[u8]) -> DecodeResult<T>,
) -> Result<Option<T>, StorageError> {
    match table.get(id).ctx(path)? {
        None => Ok(None),
        Some(v) => decode(path, table_name, || format!("{id:?}"), v.value(), f).map(Some),
    }
}

pub(crate) fn thread_record(
    path: &Path,
    threads: &impl ByStr,
    leases: &Leases,
    id: &str,
) -> Result<Option<ThreadRecord>, StorageError> {
    let Some(mut record) = get_str(path, threads, tables::THREADS, id, ThreadRecord::decode)? else {
        return Ok(None);
    };
    record.lease = leases.get(id);
    Ok(Some(record))
}

/// A checkpoint's row: its summary and delta blobs.
pub(crate) fn row(
    path: &Path,
    checkpoints: &impl ByNumber,
    thread: Numbered<'_>,
    seq: u64,
) -> Result<Option<Row>, StorageError> {
    match checkpoints.get(thread.key(seq)).ctx(path)? {
        None => Ok(None),
        Some(v) => {
            let row =
                decode(path, tables::CHECKPOINTS, || thread.describe(seq), v.value(), CheckpointSummary::decode_row)?;
            owned(path, thread, seq, &row.0)?;
            Ok(Some(row))
        }
    }
}

/// Checks that the row stored under the thread's number and `seq` is that thread's checkpoint
/// `seq`: the row names its thread, so damage to a thread's number (or to the counter that
/// gave it) is a decode error, never another thread's history read or extended as this one's.
pub(crate) fn owned(
    path: &Path,
    thread: Numbered<'_>,
    seq: u64,
    summary: &CheckpointSummary,
) -> Result<(), StorageError> {
    if summary.thread == thread.id && summary.seq == seq {
        return Ok(());
    }
    Err(StorageError::Decode {
        path: path.to_path_buf(),
        table: tables::CHECKPOINTS.name().to_string(),
        key: thread.describe(seq),
        reason: format!(
            "the row holds checkpoint {} of thread {:?}: the thread numbers ({}) are damaged",
            summary.seq,
            summary.thread,
            tables::THREAD_NUMBERS.name()
        ),
    })
}

/// The snapshot of a checkpoint whose summary says it has one; its absence is corruption.
pub(crate) fn snapshot(
    path: &Path,
    snapshots: &impl ByNumber,
    thread: Numbered<'_>,
    seq: u64,
) -> Result<Vec<u8>, StorageError> {
    let key = || thread.describe(seq);
    match snapshots.get(thread.key(seq)).ctx(path)? {
        Some(v) => decode(path, tables::SNAPSHOTS, key, v.value(), Snapshot::decode),
        None => Err(StorageError::Decode {
            path: path.to_path_buf(),
            table: tables::SNAPSHOTS.name().to_string(),
            key: key(),
            reason: "the checkpoint says it carries a snapshot, but the snapshot is missing".to_string(),
        }),
    }
}

/// Every (seq, encoded value) of a (thread, seq) table for one thread, in seq order.
pub(crate) fn thread_range(
    path: &Path,
    table: &impl BySeq,
    thread: &str,
    mut each: impl FnMut(u64, &[u8]) -> Result<(), StorageError>,
) -> Result<(), StorageError> {
    for entry in table.range((thread, 0u64)..=(thread, u64::MAX)).ctx(path)? {
        let (k, v) = entry.ctx(path)?;
        each(k.value().1, v.value())?;
    }
    Ok(())
}

/// The summaries of the thread's checkpoints, in seq order (none: the thread has no number).
pub(crate) fn summaries(
    path: &Path,
    checkpoints: &impl ByNumber,
    thread: Option<Numbered<'_>>,
) -> Result<Vec<CheckpointSummary>, StorageError> {
    let Some(thread) = thread else { return Ok(Vec::new()) };
    let mut out = Vec::new();
    for entry in checkpoints.range(thread.key(0)..=thread.key(u64::MAX)).ctx(path)? {
        let (k, v) = entry.ctx(path)?;
        let seq = k.value().1;
        let summary = decode(path, tables::CHECKPOINTS, || thread.describe(seq), v.value(), CheckpointSummary::decode)?;
        owned(path, thread, seq, &summary)?;
        out.push(summary);
    }
    Ok(out)
}

/// The seq of the thread's latest checkpoint (none: no checkpoint, or no number).
pub(crate) fn latest_checkpoint_seq(
    path: &Path,
    checkpoints: &impl ByNumber,
    thread: Option<Numbered<'_>>,
) -> Result<Option<u64>, StorageError> {
    let Some(thread) = thread else { return Ok(None) };
    let mut range = checkpoints.range(thread.key(0)..=thread.key(u64::MAX)).ctx(path)?;
    match range.next_back() {
        None => Ok(None),
        Some(entry) => {
            let (k, v) = entry.ctx(path)?;
            let seq = k.value().1;
            let summary =
                decode(path, tables::CHECKPOINTS, || thread.describe(seq), v.value(), CheckpointSummary::decode)?;
            owned(path, thread, seq, &summary)?;
            Ok(Some(seq))
        }
    }
}

/// Walks parent links from `seq` back to the nearest snapshot.
pub(crate) fn state_chain(
    path: &Path,
    checkpoints: &impl ByNumber,
    snapshots: &impl ByNumber,
    thread: Option<Numbered<'_>>,
    seq: u64,
) -> Result<Option<StateChain>, ReadError> {
    let Some(thread) = thread else { return Ok(None) };
    let mut steps = Vec::new();
    let mut cur = seq;
    loop {
        let broken =
            || ReadError::BrokenChain { path: path.to_path_buf(), thread: thread.id.to_string(), seq, missing: cur };
        let Some((header, delta)) = row(path, checkpoints, thread, cur)? else {
            return if cur == seq { Ok(None) } else { Err(broken()) };
        };
        if header.has_snapshot {
            let snapshot = snapshot(path, snapshots, thread, cur)?;
            steps.reverse();
            return Ok(Some(StateChain { snapshot_seq: cur, snapshot, steps }));
        }
        steps.push(ChainStep { seq: cur, delta });
        let corrupt = |reason: &str| StorageError::Decode {
            path: path.to_path_buf(),
            table: tables::CHECKPOINTS.name().to_string(),
            key: thread.describe(cur),
            reason: reason.to_string(),
        };
        match header.parent {
            None => return Err(corrupt("a root checkpoint without a snapshot").into()),
            Some(parent) if parent >= cur => {
                return Err(corrupt("its parent link does not go back in history").into());
            }
            Some(parent) => cur = parent,
        }
    }
}
