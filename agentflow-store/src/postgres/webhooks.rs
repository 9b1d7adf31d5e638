//! Completion webhook deliveries on PostgreSQL: table `webhooks`, written by the settle of a run
//! with a webhook (in the settle's statement, see the queue's `settle_ctes`), then claimed and
//! settled by the dispatchers of any process, each change one conditional `UPDATE` (of
//! concurrent claims of one delivery, the first takes the row's lock and the others, once it
//! committed, find it held).

use std::path::Path;

use deadpool_postgres::GenericClient;
use tokio_postgres::Row;

use crate::error::StorageError;
use crate::listing::Listing;
use crate::postgres::error::{Fail, decode_error};
use crate::postgres::pool::PgPool;
use crate::postgres::sql::{self, time, uint};
use crate::queue::QueueError;
use crate::record::{DeliveryStatus, WebhookDelivery, WebhookSettle};

const COLUMNS: &str = "id, thread, url, payload, created_at, attempts, next_at, status, last_error, holder, held_until";

/// The pending deliveries due at `$1` that nobody holds at `$1`, longest due first, at most `$2`.
const DUE: &str = "SELECT id, thread, url, payload, created_at, attempts, next_at, status, last_error, holder, \
       held_until FROM webhooks \
     WHERE status = 'PENDING' AND next_at <= $1 AND (holder IS NULL OR held_until <= $1) \
     ORDER BY next_at, id LIMIT $2";

/// Holds pending delivery `$1` for `$2` until `$4`, unless someone else holds it at `$3`.
const CLAIM: &str = "UPDATE webhooks SET holder = $2, held_until = $4 \
     WHERE id = $1 AND status = 'PENDING' AND (holder IS NULL OR holder = $2 OR held_until <= $3)";

/// Ends `$2`'s attempt at pending delivery `$1`: status `$3`, due at `$4` (unchanged when null),
/// error `$5` (unchanged when null).
const SETTLE: &str = "UPDATE webhooks SET attempts = attempts + 1, holder = NULL, held_until = 0, status = $3, \
       next_at = COALESCE($4, next_at), last_error = COALESCE($5, last_error) \
     WHERE id = $1 AND holder = $2 AND status = 'PENDING'";

pub(crate) async fn due<C: GenericClient>(
    ctx: &PgPool,
    c: &C,
    now: u64,
    limit: usize,
) -> Result<Listing<WebhookDelivery>, Fail<QueueError>> {
    // A row that does not decode is not counted in `limit`: asked again for as many more.
    let mut ask = limit;
    loop {
        let rows = sql::query(c, DUE, &[&time(now), &i64::try_from(ask).unwrap_or(i64::MAX)]).await?;
        let mut due = sql::lenient(rows.iter().map(|r| delivery_from(&ctx.path, r)))?;
        let more = limit.saturating_add(due.skipped.len());
        if due.skipped.is_empty() || rows.len() < ask || due.items.len() >= limit || more <= ask {
            due.items.truncate(limit);
            return Ok(due);
        }
        ask = more;
    }
}

pub(crate) async fn claim<C: GenericClient>(
    c: &C,
    id: u64,
    holder: &str,
    now: u64,
    until: u64,
) -> Result<bool, Fail<QueueError>> {
    let Ok(id) = i64::try_from(id) else { return Ok(false) };
    Ok(sql::execute(c, CLAIM, &[&id, &holder, &time(now), &time(until)]).await? > 0)
}

pub(crate) async fn settle<C: GenericClient>(
    c: &C,
    id: u64,
    holder: &str,
    settle: &WebhookSettle,
) -> Result<bool, Fail<QueueError>> {
    let Ok(id) = i64::try_from(id) else { return Ok(false) };
    let (status, next_at, error) = match settle {
        WebhookSettle::Delivered { at } => (DeliveryStatus::Delivered, Some(time(*at)), None),
        WebhookSettle::Retry { next_at, error } => (DeliveryStatus::Pending, Some(time(*next_at)), Some(error)),
        WebhookSettle::GiveUp { error } => (DeliveryStatus::Failed, None, Some(error)),
    };
    let params: &sql::Params<'_> = &[&id, &holder, &status.as_str(), &next_at, &error];
    Ok(sql::execute(c, SETTLE, params).await? > 0)
}

/// Thread `thread`'s deliveries, oldest first.
pub(crate) async fn list<C: GenericClient>(
    ctx: &PgPool,
    c: &C,
    thread: &str,
) -> Result<Vec<WebhookDelivery>, Fail<QueueError>> {
    let rows =
        sql::query(c, &format!("SELECT {COLUMNS} FROM webhooks WHERE thread = $1 ORDER BY id"), &[&thread]).await?;
    Ok(rows.iter().map(|r| delivery_from(&ctx.path, r)).collect::<Result<_, _>>()?)
}

fn delivery_from(path: &Path, row: &Row) -> Result<WebhookDelivery, StorageError> {
    let id: i64 = row.try_get(0).map_err(|e| decode_error(path, "webhooks", "?".into(), e.to_string()))?;
    let key = || id.to_string();
    let get = |e: tokio_postgres::Error| decode_error(path, "webhooks", key(), e.to_string());
    let status: String = row.try_get(7).map_err(get)?;
    let status = DeliveryStatus::parse(&status)
        .ok_or_else(|| decode_error(path, "webhooks", key(), format!("unknown delivery status {status:?}")))?;
    let attempts: i32 = row.try_get(5).map_err(get)?;
    Ok(WebhookDelivery {
        id: uint(path, "webhooks", key, id)?,
        thread: row.try_get(1).map_err(get)?,
        url: row.try_get(2).map_err(get)?,
        payload: row.try_get(3).map_err(get)?,
        created_at: uint(path, "webhooks", key, row.try_get(4).map_err(get)?)?,
        attempts: u32::try_from(attempts).unwrap_or(0),
        next_at: uint(path, "webhooks", key, row.try_get(6).map_err(get)?)?,
        status,
        last_error: row.try_get(8).map_err(get)?,
        holder: row.try_get(9).map_err(get)?,
        held_until: uint(path, "webhooks", key, row.try_get(10).map_err(get)?)?,
    })
}
