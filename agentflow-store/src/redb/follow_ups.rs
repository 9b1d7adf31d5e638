//! The follow-up runs waiting behind a thread's queued run in a [`RedbStore`](crate::RedbStore)
//! file (see [`Store::enqueue_follow_up`](crate::Store::enqueue_follow_up)): table
//! [`tables::FOLLOW_UPS`], keyed by (thread, place), the first to run at the lowest place. A
//! follow-up put at the front takes a negative place, after the other negative ones (from
//! [`FRONT_FIRST`] on: those run in the order they were put there); one put at the back the
//! place after the last, never negative.

use std::path::Path;

use redb::{ReadableTable, TableHandle};

use crate::codec::{Dec, DecodeResult, Enc};
use crate::error::StorageError;
use crate::queue::{FollowUpPlace, NewRun};
use crate::record::RECORD_VERSION;
use crate::redb::error::WithPath;
use crate::redb::reads::decode;
use crate::redb::tables;
use crate::redb::writer::Tx;

/// The place of the first follow-up put at the front of a thread that has none there.
const FRONT_FIRST: i64 = i64::MIN / 2;

/// A follow-up as its row keeps it (its thread is the row's key; it is a follow-up run).
fn encode(run: &NewRun) -> Vec<u8> {
    let mut e = Enc::new(RECORD_VERSION);
    e.str(&run.graph).bool(run.input.is_some()).bytes(run.input.as_deref().unwrap_or_default());
    e.str(&run.owner).u64(run.at).opt_str(run.tenant.as_deref()).opt_u64(run.fork_from);
    e.opt_str(run.webhook.as_deref());
    e.finish()
}

/// Decodes a row of `thread`'s follow-ups.
fn decode_row(buf: &[u8]) -> DecodeResult<NewRun> {
    let mut d = Dec::new(buf, RECORD_VERSION)?;
    let graph = d.str("graph")?;
    let has_input = d.bool("input present")?;
    let input = d.bytes("input")?;
    let owner = d.str("owner")?;
    let at = d.u64("enqueued_at")?;
    let mut run = NewRun::new("", &graph, has_input.then_some(input), &owner, at);
    run.tenant = d.opt_str("tenant")?;
    run.follow_up = true;
    run.fork_from = d.opt_u64("fork_from")?;
    run.webhook = d.opt_str("webhook")?;
    d.end()?;
    Ok(run)
}

/// The first and the last key of `thread`'s rows.
fn bounds(thread: &str) -> std::ops::RangeInclusive<(&str, i64)> {
    (thread, i64::MIN)..=(thread, i64::MAX)
}

/// `thread`'s follow-ups, first first, each with its place.
fn rows(
    path: &Path,
    table: &impl ReadableTable<(&'static str, i64), &'static [u8]>,
    thread: &str,
) -> Result<Vec<(i64, NewRun)>, StorageError> {
    let mut out = Vec::new();
    for row in table.range(bounds(thread)).ctx(path)? {
        let (k, v) = row.ctx(path)?;
        let (_, place) = k.value();
        let mut run = decode(path, tables::FOLLOW_UPS, || format!("({thread:?}, {place})"), v.value(), decode_row)?;
        run.thread = thread.to_string();
        out.push((place, run));
    }
    Ok(out)
}

/// `thread`'s follow-ups in a read transaction, first first.
pub(crate) fn list(txn: &redb::ReadTransaction, path: &Path, thread: &str) -> Result<Vec<NewRun>, StorageError> {
    let table = txn.open_table(tables::FOLLOW_UPS).ctx(path)?;
    Ok(rows(path, &table, thread)?.into_iter().map(|(_, run)| run).collect())
}

/// Puts `run` behind `run.thread`'s other follow-ups (`Back`) or before them (`Front`); how many
/// run before it. The caller counted its writes.
pub(crate) fn push(tx: &Tx<'_>, run: &NewRun, place: FollowUpPlace) -> Result<usize, StorageError> {
    let path = tx.path;
    let thread = run.thread.as_str();
    let mut table = tx.txn.open_table(tables::FOLLOW_UPS).ctx(path)?;
    let mut keys = Vec::new();
    for row in table.range(bounds(thread)).ctx(path)? {
        keys.push(row.ctx(path)?.0.value().1);
    }
    let overflow = || StorageError::Decode {
        path: path.to_path_buf(),
        table: tables::FOLLOW_UPS.name().to_string(),
        key: format!("{thread:?}"),
        reason: "the thread's follow-ups leave no place at that end".to_string(),
    };
    let (at, ahead) = match place {
        FollowUpPlace::Front => {
            let fronts = keys.iter().filter(|k| **k < 0).count();
            // After the last one put at the front; a file of format 9 may have put one at -1
            // (just before the first): then before the first.
            let at = match keys.iter().copied().filter(|k| *k < 0).max() {
                None => Some(FRONT_FIRST),
                Some(last) if last < -1 => Some(last + 1),
                Some(_) => keys.first().and_then(|p| p.checked_sub(1)),
            };
            (at.ok_or_else(overflow)?, fronts)
        }
        _ => (keys.last().map_or(Some(0), |p| p.checked_add(1).map(|p| p.max(0))).ok_or_else(overflow)?, keys.len()),
    };
    table.insert((thread, at), encode(run).as_slice()).ctx(path)?;
    Ok(ahead)
}

/// Whether follow-ups wait behind `thread`'s queued run.
pub(crate) fn any(tx: &Tx<'_>, thread: &str) -> Result<bool, StorageError> {
    let table = tx.txn.open_table(tables::FOLLOW_UPS).ctx(tx.path)?;
    Ok(table.range(bounds(thread)).ctx(tx.path)?.next().is_some())
}

/// Removes and answers `thread`'s first follow-up, if it has one.
pub(crate) fn pop(tx: &Tx<'_>, thread: &str) -> Result<Option<NewRun>, StorageError> {
    let path = tx.path;
    let mut table = tx.txn.open_table(tables::FOLLOW_UPS).ctx(path)?;
    let first = match table.range(bounds(thread)).ctx(path)?.next() {
        None => return Ok(None),
        Some(row) => {
            let (k, v) = row.ctx(path)?;
            let place = k.value().1;
            let run = decode(path, tables::FOLLOW_UPS, || format!("({thread:?}, {place})"), v.value(), decode_row)?;
            (place, run)
        }
    };
    let (place, mut run) = first;
    table.remove((thread, place)).ctx(path)?;
    run.thread = thread.to_string();
    Ok(Some(run))
}

/// Removes `thread`'s follow-ups (its purge); how many.
pub(crate) fn purge(tx: &Tx<'_>, thread: &str) -> Result<u64, StorageError> {
    let mut table = tx.txn.open_table(tables::FOLLOW_UPS).ctx(tx.path)?;
    let mut removed = 0u64;
    table
        .retain_in(bounds(thread), |_, _| {
            removed += 1;
            false
        })
        .ctx(tx.path)?;
    Ok(removed)
}
