//! Completion webhook deliveries in a [`RedbStore`](crate::RedbStore) file: written by the
//! settle of a run with a webhook ([`Settle::webhook`](crate::Settle::webhook)), then claimed,
//! settled and listed by the dispatchers ([`Store::due_webhooks`](crate::Store::due_webhooks)
//! and after).
//!
//! A delivery's row is [`tables::WEBHOOKS`], keyed by its id (from the counter `META`'s
//! `"next_webhook_id"`, so no id is given twice); [`tables::WEBHOOKS_BY_THREAD`] finds a
//! thread's deliveries and [`tables::WEBHOOKS_DUE`] orders the pending ones by when they are due.

use std::path::Path;

use redb::{ReadTransaction, ReadableTable, TableHandle};

use crate::codec::{Dec, DecodeResult, Enc};
use crate::error::StorageError;
use crate::listing::Listing;
use crate::queue::QueueError;
use crate::record::{DeliveryStatus, NewWebhookDelivery, RECORD_VERSION, WebhookDelivery, WebhookSettle};
use crate::redb::error::WithPath;
use crate::redb::reads::decode;
use crate::redb::tables;
use crate::redb::writer::Tx;

/// The key in [`tables::META`] of the id the next delivery gets.
const NEXT: &str = "next_webhook_id";

fn encode(w: &WebhookDelivery) -> Vec<u8> {
    let mut e = Enc::with_capacity(RECORD_VERSION, w.payload.len() + w.url.len() + 64);
    e.str(&w.thread).str(&w.url).bytes(&w.payload).u64(w.created_at).u32(w.attempts).u64(w.next_at);
    e.str(w.status.as_str()).opt_str(w.last_error.as_deref()).opt_str(w.holder.as_deref()).u64(w.held_until);
    e.finish()
}

/// Decodes a delivery's row (its id is the key: the caller sets it).
fn decode_row(buf: &[u8]) -> DecodeResult<WebhookDelivery> {
    let mut d = Dec::new(buf, RECORD_VERSION)?;
    let (thread, url, payload) = (d.str("thread")?, d.str("url")?, d.bytes("payload")?);
    let (created_at, attempts, next_at) = (d.u64("created_at")?, d.u32("attempts")?, d.u64("next_at")?);
    let status = d.str("status")?;
    let status = DeliveryStatus::parse(&status).ok_or_else(|| format!("unknown delivery status {status:?}"))?;
    let (last_error, holder, held_until) = (d.opt_str("last_error")?, d.opt_str("holder")?, d.u64("held_until")?);
    d.end()?;
    Ok(WebhookDelivery {
        id: 0,
        thread,
        url,
        payload,
        created_at,
        attempts,
        next_at,
        status,
        last_error,
        holder,
        held_until,
    })
}

/// Delivery `id` in `table`, if there is one.
fn get(
    path: &Path,
    table: &impl ReadableTable<u64, &'static [u8]>,
    id: u64,
) -> Result<Option<WebhookDelivery>, StorageError> {
    match table.get(id).ctx(path)? {
        None => Ok(None),
        Some(v) => {
            let mut w = decode(path, tables::WEBHOOKS, || id.to_string(), v.value(), decode_row)?;
            w.id = id;
            Ok(Some(w))
        }
    }
}

/// Writes `delivery` of `thread`, pending and due at its `at`; its id. The caller counted its
/// writes.
pub(crate) fn insert(tx: &Tx<'_>, thread: &str, delivery: &NewWebhookDelivery) -> Result<u64, StorageError> {
    let path = tx.path;
    let mut meta = tx.txn.open_table(tables::META).ctx(path)?;
    let id = match meta.get(NEXT).ctx(path)? {
        None => 1,
        Some(v) => <[u8; 8]>::try_from(v.value()).map(u64::from_le_bytes).map_err(|_| StorageError::Decode {
            path: path.to_path_buf(),
            table: tables::META.name().to_string(),
            key: format!("{NEXT:?}"),
            reason: format!("{} bytes where a u64 (8 bytes) was expected", v.value().len()),
        })?,
    };
    let next = id.checked_add(1).ok_or_else(|| StorageError::Corrupted {
        path: path.to_path_buf(),
        detail: format!("`{NEXT}` is at u64::MAX: no webhook delivery id is left"),
    })?;
    meta.insert(NEXT, next.to_le_bytes().as_slice()).ctx(path)?;
    let row = WebhookDelivery {
        id,
        thread: thread.to_string(),
        url: delivery.url.clone(),
        payload: delivery.payload.clone(),
        created_at: delivery.at,
        attempts: 0,
        next_at: delivery.at,
        status: DeliveryStatus::Pending,
        last_error: None,
        holder: None,
        held_until: 0,
    };
    tx.txn.open_table(tables::WEBHOOKS).ctx(path)?.insert(id, encode(&row).as_slice()).ctx(path)?;
    tx.txn.open_table(tables::WEBHOOKS_BY_THREAD).ctx(path)?.insert((thread, id), ()).ctx(path)?;
    tx.txn.open_table(tables::WEBHOOKS_DUE).ctx(path)?.insert((row.next_at, id), ()).ctx(path)?;
    Ok(id)
}

/// The pending deliveries due at `now` that nobody holds at `now`, by `next_at` then id, at
/// most `limit`. An index key its row does not confirm (the index has no checksum) is skipped;
/// a row that does not decode is skipped and reported (not counted in `limit`).
pub(crate) fn due(
    txn: &ReadTransaction,
    path: &Path,
    now: u64,
    limit: usize,
) -> Result<Listing<WebhookDelivery>, StorageError> {
    let index = txn.open_table(tables::WEBHOOKS_DUE).ctx(path)?;
    let rows = txn.open_table(tables::WEBHOOKS).ctx(path)?;
    let (mut out, mut skipped) = (Vec::new(), Vec::new());
    for key in index.range((0u64, 0u64)..=(now, u64::MAX)).ctx(path)? {
        if out.len() >= limit {
            break;
        }
        let (k, _) = key.ctx(path)?;
        let (next_at, id) = k.value();
        let w = match get(path, &rows, id) {
            Ok(Some(w)) => w,
            Ok(None) => continue,
            Err(e @ StorageError::Decode { .. }) => {
                skipped.push(e);
                continue;
            }
            Err(e) => return Err(e),
        };
        if w.status == DeliveryStatus::Pending && w.next_at == next_at && !held(&w, None, now) {
            out.push(w);
        }
    }
    Ok(Listing::new(out, skipped))
}

/// Whether someone other than `by` holds `w` at `now`.
fn held(w: &WebhookDelivery, by: Option<&str>, now: u64) -> bool {
    w.holder.as_deref().is_some_and(|h| Some(h) != by && w.held_until > now)
}

/// Holds delivery `id` for `holder` until `until`, if it is pending and nobody else holds it at
/// `now` (see [`Store::claim_webhook`](crate::Store::claim_webhook)).
pub(crate) fn stage_claim(tx: &Tx<'_>, id: u64, holder: &str, now: u64, until: u64) -> Result<bool, QueueError> {
    let path = tx.path;
    let mut rows = tx.txn.open_table(tables::WEBHOOKS).ctx(path)?;
    let Some(mut w) = get(path, &rows, id)? else { return Ok(false) };
    if w.status != DeliveryStatus::Pending || held(&w, Some(holder), now) {
        return Ok(false);
    }
    w.holder = Some(holder.to_string());
    w.held_until = until;
    tx.wrote();
    rows.insert(id, encode(&w).as_slice()).ctx(path)?;
    Ok(true)
}

/// Records how `holder`'s attempt at delivery `id` ended (see
/// [`Store::settle_webhook`](crate::Store::settle_webhook)).
pub(crate) fn stage_settle(tx: &Tx<'_>, id: u64, holder: &str, settle: &WebhookSettle) -> Result<bool, QueueError> {
    let path = tx.path;
    let mut rows = tx.txn.open_table(tables::WEBHOOKS).ctx(path)?;
    let Some(mut w) = get(path, &rows, id)? else { return Ok(false) };
    if w.holder.as_deref() != Some(holder) || w.status != DeliveryStatus::Pending {
        return Ok(false);
    }
    let was_due = w.next_at;
    w.attempts = w.attempts.saturating_add(1);
    w.holder = None;
    w.held_until = 0;
    match settle {
        WebhookSettle::Delivered { at } => {
            w.status = DeliveryStatus::Delivered;
            w.next_at = *at;
        }
        WebhookSettle::Retry { next_at, error } => {
            w.next_at = *next_at;
            w.last_error = Some(error.clone());
        }
        WebhookSettle::GiveUp { error } => {
            w.status = DeliveryStatus::Failed;
            w.last_error = Some(error.clone());
        }
    }
    tx.wrote();
    rows.insert(id, encode(&w).as_slice()).ctx(path)?;
    let mut index = tx.txn.open_table(tables::WEBHOOKS_DUE).ctx(path)?;
    index.remove((was_due, id)).ctx(path)?;
    if w.status == DeliveryStatus::Pending {
        index.insert((w.next_at, id), ()).ctx(path)?;
    }
    Ok(true)
}

/// `thread`'s deliveries, oldest first.
pub(crate) fn list(txn: &ReadTransaction, path: &Path, thread: &str) -> Result<Vec<WebhookDelivery>, StorageError> {
    let by_thread = txn.open_table(tables::WEBHOOKS_BY_THREAD).ctx(path)?;
    let rows = txn.open_table(tables::WEBHOOKS).ctx(path)?;
    let mut out = Vec::new();
    for key in by_thread.range((thread, 0u64)..=(thread, u64::MAX)).ctx(path)? {
        let (k, _) = key.ctx(path)?;
        out.extend(get(path, &rows, k.value().1)?);
    }
    Ok(out)
}

/// Removes `thread`'s deliveries (its purge); how many.
pub(crate) fn purge(tx: &Tx<'_>, thread: &str) -> Result<u64, StorageError> {
    let path = tx.path;
    let mut by_thread = tx.txn.open_table(tables::WEBHOOKS_BY_THREAD).ctx(path)?;
    let mut ids = Vec::new();
    for key in by_thread.range((thread, 0u64)..=(thread, u64::MAX)).ctx(path)? {
        ids.push(key.ctx(path)?.0.value().1);
    }
    if ids.is_empty() {
        return Ok(0);
    }
    let mut rows = tx.txn.open_table(tables::WEBHOOKS).ctx(path)?;
    let mut index = tx.txn.open_table(tables::WEBHOOKS_DUE).ctx(path)?;
    for &id in &ids {
        by_thread.remove((thread, id)).ctx(path)?;
        // A row that does not decode goes too; its index key, if any, is left to be skipped.
        let next_at = match get(path, &rows, id) {
            Ok(w) => w.map(|w| w.next_at),
            Err(StorageError::Decode { .. }) => None,
            Err(e) => return Err(e),
        };
        if let Some(next_at) = next_at {
            index.remove((next_at, id)).ctx(path)?;
        }
        rows.remove(id).ctx(path)?;
    }
    Ok(ids.len() as u64)
}
