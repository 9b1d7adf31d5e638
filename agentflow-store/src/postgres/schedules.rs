//! Cron schedules on PostgreSQL: table `schedules`, by id. A fire
//! ([`Store::fire_schedule`](crate::Store::fire_schedule)) moves the schedule's `next_at` with a
//! compare-and-set `UPDATE` and queues its run in the same transaction: of concurrent fires of one
//! `next_at`, the first takes the row's lock and the others, once it committed, find `next_at`
//! moved (or, under `SERIALIZABLE`, fail to serialize and are run again, and then find it).

use std::path::Path;

use deadpool_postgres::GenericClient;
use tokio_postgres::Row;

use crate::error::StorageError;
use crate::listing::Listing;
use crate::postgres::approvals::append_audit;
use crate::postgres::error::{Fail, decode_error};
use crate::postgres::pool::PgPool;
use crate::postgres::sql::{self, uint};
use crate::postgres::{idempotency, queue};
use crate::queue::{QueueError, ScheduleFire};
use crate::record::ScheduleRecord;

const COLUMNS: &str = "id, graph, cron, input, owner, tenant, webhook, next_at, created_at, last_fired_at, last_thread";

/// Keeps a schedule, replacing the one of its id.
const PUT: &str = "INSERT INTO schedules (id, graph, cron, input, owner, tenant, webhook, next_at, created_at, \
       last_fired_at, last_thread) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) \
     ON CONFLICT (id) DO UPDATE SET graph = EXCLUDED.graph, cron = EXCLUDED.cron, input = EXCLUDED.input, \
       owner = EXCLUDED.owner, tenant = EXCLUDED.tenant, webhook = EXCLUDED.webhook, next_at = EXCLUDED.next_at, \
       created_at = EXCLUDED.created_at, last_fired_at = EXCLUDED.last_fired_at, last_thread = EXCLUDED.last_thread";

/// Moves schedule `$1` from `next_at` `$2` to `$3`, recording the fire at `$4` of thread `$5`.
const FIRE: &str = "UPDATE schedules SET next_at = $3, last_fired_at = $4, last_thread = $5 \
     WHERE id = $1 AND next_at = $2";

pub(crate) async fn put<C: GenericClient>(ctx: &PgPool, c: &C, s: &ScheduleRecord) -> Result<(), Fail<QueueError>> {
    let int = |what: &str, v: u64| sql::int(&ctx.path, what, v);
    let last_fired_at = s.last_fired_at.map(|v| int("last_fired_at", v)).transpose()?;
    let (next_at, created_at) = (int("next_at", s.next_at)?, int("created_at", s.created_at)?);
    let params: &sql::Params<'_> = &[
        &s.id,
        &s.graph,
        &s.cron,
        &s.input,
        &s.owner,
        &s.tenant,
        &s.webhook,
        &next_at,
        &created_at,
        &last_fired_at,
        &s.last_thread,
    ];
    sql::execute(c, PUT, params).await?;
    Ok(())
}

pub(crate) async fn delete<C: GenericClient>(c: &C, id: &str) -> Result<bool, Fail<QueueError>> {
    Ok(sql::execute(c, "DELETE FROM schedules WHERE id = $1", &[&id]).await? > 0)
}

/// Schedule `id`, if kept.
pub(crate) async fn get<C: GenericClient>(
    ctx: &PgPool,
    c: &C,
    id: &str,
) -> Result<Option<ScheduleRecord>, Fail<QueueError>> {
    let row = sql::query_opt(c, &format!("SELECT {COLUMNS} FROM schedules WHERE id = $1"), &[&id]).await?;
    Ok(row.map(|r| schedule_from(&ctx.path, &r)).transpose()?)
}

/// Every schedule, by id.
pub(crate) async fn scan<C: GenericClient>(ctx: &PgPool, c: &C) -> Result<Listing<ScheduleRecord>, Fail<QueueError>> {
    let rows = sql::query(c, &format!("SELECT {COLUMNS} FROM schedules ORDER BY id"), &[]).await?;
    Ok(sql::lenient(rows.iter().map(|r| schedule_from(&ctx.path, r)))?)
}

/// The fire `fire` in the caller's transaction: `false` when the schedule is gone or moved on
/// (nothing written); else the run queued with its key and audit entry (a refused run rolls the
/// whole back).
pub(crate) async fn fire<C: GenericClient>(ctx: &PgPool, c: &C, fire: &ScheduleFire) -> Result<bool, Fail<QueueError>> {
    crate::checks::check_detail(&fire.run.thread, &fire.entry).map_err(|e| Fail::Refused(e.into()))?;
    let expected = sql::time(fire.expected_next);
    let (next_at, fired_at) =
        (sql::int(&ctx.path, "next_at", fire.next_at)?, sql::int(&ctx.path, "fired_at", fire.fired_at)?);
    let params: &sql::Params<'_> = &[&fire.id, &expected, &next_at, &fired_at, &fire.run.thread];
    if sql::execute(c, FIRE, params).await? == 0 {
        return Ok(false);
    }
    idempotency::keep(ctx, c, &fire.run).await?;
    queue::enqueue(ctx, c, &fire.run).await?;
    append_audit::<_, QueueError>(ctx, c, &fire.run.thread, &fire.entry).await?;
    Ok(true)
}

fn schedule_from(path: &Path, row: &Row) -> Result<ScheduleRecord, StorageError> {
    let id: String = row.try_get(0).map_err(|e| decode_error(path, "schedules", "?".into(), e.to_string()))?;
    let key = || format!("{id:?}");
    let get = |e: tokio_postgres::Error| decode_error(path, "schedules", key(), e.to_string());
    let text = |i: usize| row.try_get::<_, String>(i).map_err(get);
    let mut s = ScheduleRecord::new(
        &id,
        &text(1)?,
        &text(2)?,
        row.try_get(3).map_err(get)?,
        &text(4)?,
        uint(path, "schedules", key, row.try_get(7).map_err(get)?)?,
        uint(path, "schedules", key, row.try_get(8).map_err(get)?)?,
    );
    s.tenant = row.try_get(5).map_err(get)?;
    s.webhook = row.try_get(6).map_err(get)?;
    s.last_fired_at = match row.try_get::<_, Option<i64>>(9).map_err(get)? {
        Some(at) => Some(uint(path, "schedules", key, at)?),
        None => None,
    };
    s.last_thread = row.try_get(10).map_err(get)?;
    Ok(s)
}
