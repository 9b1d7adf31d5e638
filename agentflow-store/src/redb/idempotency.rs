//! The idempotency keys of run starts in a [`RedbStore`](crate::RedbStore) file (see
//! [`NewRun::idempotency`]): checked and kept in the write transaction that queues the run, so
//! of concurrent starts with one key (all staged by the store's one writer) exactly one queues.
//!
//! A key's row is [`tables::IDEMPOTENCY_KEYS`]; [`tables::IDEMPOTENCY_BY_TIME`] orders the keys
//! by age, so each keyed start also removes a few expired ones, and
//! [`tables::IDEMPOTENCY_BY_THREAD`] finds a thread's keys for a purge.

use std::path::Path;

use redb::{ReadableTable, Table};

use crate::codec::{Dec, DecodeResult, Enc};
use crate::error::StorageError;
use crate::queue::{NewRun, QueueError};
use crate::record::{IDEMPOTENCY_KEY_TTL_MS, RECORD_VERSION};
use crate::redb::error::WithPath;
use crate::redb::reads::decode;
use crate::redb::tables;
use crate::redb::writer::Tx;

/// How many expired keys a keyed start removes at most.
const SWEEP: usize = 16;

/// What a kept key says: the thread its start queued, the request's digest, and when.
struct Kept {
    thread: String,
    request: String,
    created: u64,
}

fn encode(kept: &Kept) -> Vec<u8> {
    let mut e = Enc::new(RECORD_VERSION);
    e.str(&kept.thread).str(&kept.request).u64(kept.created);
    e.finish()
}

fn decode_kept(buf: &[u8]) -> DecodeResult<Kept> {
    let mut d = Dec::new(buf, RECORD_VERSION)?;
    let kept = Kept { thread: d.str("thread")?, request: d.str("request")?, created: d.u64("created")? };
    d.end()?;
    Ok(kept)
}

/// Whether a key kept since `created` has expired at `at`.
fn expired(created: u64, at: u64) -> bool {
    at.saturating_sub(created) >= IDEMPOTENCY_KEY_TTL_MS
}

type Keys<'t> = Table<'t, (&'static str, &'static str), &'static [u8]>;

/// The key `(scope, key)` as kept, if it is.
fn kept(
    path: &Path,
    keys: &impl ReadableTable<(&'static str, &'static str), &'static [u8]>,
    scope: &str,
    key: &str,
) -> Result<Option<Kept>, StorageError> {
    match keys.get((scope, key)).ctx(path)? {
        None => Ok(None),
        Some(v) => {
            decode(path, tables::IDEMPOTENCY_KEYS, || format!("({scope:?}, {key:?})"), v.value(), decode_kept).map(Some)
        }
    }
}

/// Refuses `run` with [`QueueError::KeyUsed`] when its idempotency key is kept and unexpired at
/// `run.at`. Writes nothing.
pub(crate) fn refuse_used(tx: &Tx<'_>, run: &NewRun) -> Result<(), QueueError> {
    let Some(key) = &run.idempotency else { return Ok(()) };
    let keys = tx.txn.open_table(tables::IDEMPOTENCY_KEYS).ctx(tx.path)?;
    match kept(tx.path, &keys, &key.scope, &key.key)? {
        Some(kept) if !expired(kept.created, run.at) => Err(QueueError::KeyUsed {
            key: key.key.clone(),
            same_request: kept.request == key.request,
            thread: kept.thread,
        }),
        _ => Ok(()),
    }
}

/// Keeps `run`'s idempotency key (replacing the expired one [`refuse_used`] let through) and
/// removes a few keys expired at `run.at`. Called after the job counted its writes.
pub(crate) fn keep(tx: &Tx<'_>, run: &NewRun) -> Result<(), StorageError> {
    let Some(key) = &run.idempotency else { return Ok(()) };
    let path = tx.path;
    let (scope, name) = (key.scope.as_str(), key.key.as_str());
    let mut keys = tx.txn.open_table(tables::IDEMPOTENCY_KEYS).ctx(path)?;
    let mut by_time = tx.txn.open_table(tables::IDEMPOTENCY_BY_TIME).ctx(path)?;
    let mut by_thread = tx.txn.open_table(tables::IDEMPOTENCY_BY_THREAD).ctx(path)?;
    if let Some(old) = kept(path, &keys, scope, name)? {
        by_time.remove((old.created, scope, name)).ctx(path)?;
        by_thread.remove((old.thread.as_str(), scope, name)).ctx(path)?;
    }
    let row = Kept { thread: run.thread.clone(), request: key.request.clone(), created: run.at };
    keys.insert((scope, name), encode(&row).as_slice()).ctx(path)?;
    by_time.insert((run.at, scope, name), ()).ctx(path)?;
    by_thread.insert((run.thread.as_str(), scope, name), ()).ctx(path)?;
    sweep(path, &mut keys, &mut by_time, &mut by_thread, run.at)
}

/// Removes up to [`SWEEP`] keys expired at `at`, oldest first.
fn sweep(
    path: &Path,
    keys: &mut Keys<'_>,
    by_time: &mut Table<'_, (u64, &'static str, &'static str), ()>,
    by_thread: &mut Table<'_, (&'static str, &'static str, &'static str), ()>,
    at: u64,
) -> Result<(), StorageError> {
    let Some(cutoff) = at.checked_sub(IDEMPOTENCY_KEY_TTL_MS) else { return Ok(()) };
    let mut old = Vec::new();
    for row in by_time.range((0u64, "", "")..).ctx(path)?.take(SWEEP) {
        let (k, _) = row.ctx(path)?;
        let (created, scope, key) = k.value();
        if created > cutoff {
            break;
        }
        old.push((created, scope.to_string(), key.to_string()));
    }
    for (created, scope, key) in old {
        by_time.remove((created, scope.as_str(), key.as_str())).ctx(path)?;
        match kept(path, keys, &scope, &key) {
            // Replaced since: the newer key stays.
            Ok(Some(row)) if row.created != created => continue,
            Ok(Some(row)) => {
                by_thread.remove((row.thread.as_str(), scope.as_str(), key.as_str())).ctx(path)?;
            }
            Ok(None) => continue,
            // A damaged row of an expired key goes too.
            Err(StorageError::Decode { .. }) => {}
            Err(e) => return Err(e),
        }
        keys.remove((scope.as_str(), key.as_str())).ctx(path)?;
    }
    Ok(())
}

/// Removes the idempotency keys of `thread` (its purge); how many.
pub(crate) fn purge(tx: &Tx<'_>, thread: &str) -> Result<u64, StorageError> {
    let path = tx.path;
    let mut by_thread = tx.txn.open_table(tables::IDEMPOTENCY_BY_THREAD).ctx(path)?;
    let mut found = Vec::new();
    for row in by_thread.range((thread, "", "")..).ctx(path)? {
        let (k, _) = row.ctx(path)?;
        let (t, scope, key) = k.value();
        if t != thread {
            break;
        }
        found.push((scope.to_string(), key.to_string()));
    }
    if found.is_empty() {
        return Ok(0);
    }
    let mut keys = tx.txn.open_table(tables::IDEMPOTENCY_KEYS).ctx(path)?;
    let mut by_time = tx.txn.open_table(tables::IDEMPOTENCY_BY_TIME).ctx(path)?;
    let mut removed = 0;
    for (scope, key) in found {
        by_thread.remove((thread, scope.as_str(), key.as_str())).ctx(path)?;
        let row = match kept(path, &keys, &scope, &key) {
            Ok(Some(row)) if row.thread == thread => Some(row),
            // Kept for another thread now (an index row left behind): that key stays.
            Ok(_) => continue,
            Err(StorageError::Decode { .. }) => None,
            Err(e) => return Err(e),
        };
        if let Some(row) = row {
            by_time.remove((row.created, scope.as_str(), key.as_str())).ctx(path)?;
        }
        keys.remove((scope.as_str(), key.as_str())).ctx(path)?;
        removed += 1;
    }
    Ok(removed)
}
