//! Cron schedules in a [`RedbStore`](crate::RedbStore) file: table [`tables::SCHEDULES`], by
//! id. A fire ([`Store::fire_schedule`](crate::Store::fire_schedule)) is one writer job, so its
//! compare-and-set of `next_at` and the run it queues are one transaction, and of two fires of
//! one `next_at` (both staged by the store's one writer) exactly one is made.

use std::path::Path;

use redb::{ReadTransaction, ReadableTable};

use crate::checks::check_detail;
use crate::codec::{Dec, DecodeResult, Enc};
use crate::error::StorageError;
use crate::listing::Listing;
use crate::queue::{QueueError, ScheduleFire};
use crate::record::{RECORD_VERSION, ScheduleRecord};
use crate::redb::audit::stage_append_audit;
use crate::redb::error::WithPath;
use crate::redb::reads::{decode, get_str};
use crate::redb::writer::Tx;
use crate::redb::{idempotency, queue, tables};

fn encode(s: &ScheduleRecord) -> Vec<u8> {
    let mut e = Enc::with_capacity(RECORD_VERSION, s.input.len() + 128);
    e.str(&s.graph).str(&s.cron).bytes(&s.input).str(&s.owner).opt_str(s.tenant.as_deref());
    e.opt_str(s.webhook.as_deref()).u64(s.next_at).u64(s.created_at).opt_u64(s.last_fired_at);
    e.opt_str(s.last_thread.as_deref());
    e.finish()
}

/// Decodes a schedule's row (its id is the key: the caller sets it).
fn decode_row(buf: &[u8]) -> DecodeResult<ScheduleRecord> {
    let mut d = Dec::new(buf, RECORD_VERSION)?;
    let (graph, cron, input, owner) = (d.str("graph")?, d.str("cron")?, d.bytes("input")?, d.str("owner")?);
    let mut s = ScheduleRecord::new("", &graph, &cron, input, &owner, 0, 0);
    s.tenant = d.opt_str("tenant")?;
    s.webhook = d.opt_str("webhook")?;
    s.next_at = d.u64("next_at")?;
    s.created_at = d.u64("created_at")?;
    s.last_fired_at = d.opt_u64("last_fired_at")?;
    s.last_thread = d.opt_str("last_thread")?;
    d.end()?;
    Ok(s)
}

fn with_id(mut s: ScheduleRecord, id: &str) -> ScheduleRecord {
    s.id = id.to_string();
    s
}

/// Schedule `id`, if kept.
pub(crate) fn get(txn: &ReadTransaction, path: &Path, id: &str) -> Result<Option<ScheduleRecord>, StorageError> {
    let table = txn.open_table(tables::SCHEDULES).ctx(path)?;
    Ok(get_str(path, &table, tables::SCHEDULES, id, decode_row)?.map(|s| with_id(s, id)))
}

/// Every schedule, by id, but those whose row does not decode: each is reported instead.
pub(crate) fn scan(txn: &ReadTransaction, path: &Path) -> Result<Listing<ScheduleRecord>, StorageError> {
    let table = txn.open_table(tables::SCHEDULES).ctx(path)?;
    let (mut items, mut skipped) = (Vec::new(), Vec::new());
    for row in table.iter().ctx(path)? {
        let (k, v) = row.ctx(path)?;
        let id = k.value();
        match decode(path, tables::SCHEDULES, || format!("{id:?}"), v.value(), decode_row) {
            Ok(s) => items.push(with_id(s, id)),
            Err(e @ StorageError::Decode { .. }) => skipped.push(e),
            Err(e) => return Err(e),
        }
    }
    Ok(Listing::new(items, skipped))
}

/// Keeps `schedule`, replacing one of its id.
pub(crate) fn stage_put(tx: &Tx<'_>, schedule: &ScheduleRecord) -> Result<(), QueueError> {
    tx.wrote();
    let mut table = tx.txn.open_table(tables::SCHEDULES).ctx(tx.path)?;
    table.insert(schedule.id.as_str(), encode(schedule).as_slice()).ctx(tx.path)?;
    Ok(())
}

/// Removes schedule `id`; whether there was one.
pub(crate) fn stage_delete(tx: &Tx<'_>, id: &str) -> Result<bool, QueueError> {
    let mut table = tx.txn.open_table(tables::SCHEDULES).ctx(tx.path)?;
    if table.get(id).ctx(tx.path)?.is_none() {
        return Ok(false);
    }
    tx.wrote();
    table.remove(id).ctx(tx.path)?;
    Ok(true)
}

/// The fire `fire`: `false`, writing nothing, when the schedule is gone or its `next_at` moved;
/// else the run queued (with its key and audit entry) and the schedule moved on.
pub(crate) fn stage_fire(tx: &Tx<'_>, fire: &ScheduleFire) -> Result<bool, QueueError> {
    let path = tx.path;
    let current = {
        let table = tx.txn.open_table(tables::SCHEDULES).ctx(path)?;
        get_str(path, &table, tables::SCHEDULES, &fire.id, decode_row)?
    };
    let Some(mut schedule) = current.map(|s| with_id(s, &fire.id)) else { return Ok(false) };
    if schedule.next_at != fire.expected_next {
        return Ok(false);
    }
    // Everything that may refuse the fire is checked before its first write.
    check_detail(&fire.run.thread, &fire.entry)?;
    idempotency::refuse_used(tx, &fire.run)?;
    queue::stage_enqueue(tx, &fire.run)?;
    idempotency::keep(tx, &fire.run)?;
    stage_append_audit(tx, &fire.run.thread, &fire.entry)?;
    schedule.next_at = fire.next_at;
    schedule.last_fired_at = Some(fire.fired_at);
    schedule.last_thread = Some(fire.run.thread.clone());
    let mut table = tx.txn.open_table(tables::SCHEDULES).ctx(path)?;
    table.insert(fire.id.as_str(), encode(&schedule).as_slice()).ctx(path)?;
    Ok(true)
}
