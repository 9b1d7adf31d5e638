//! Leases of a [`PostgresStore`](super::PostgresStore), kept in the database so every process
//! that opens the store sees them.
//!
//! Each thread has at most one row in `leases`. A takeover (a new holder, after release or
//! expiry) increments the row's fencing token; a re-acquire or renewal by the holder keeps it.
//! The row stays after release (holder `NULL`), so the token never goes back. Every change is
//! one statement that locks the row, so of concurrent acquirers exactly one wins, in this
//! process or another. The functions answer a [`Fail`], so a serialization failure (under a
//! stricter default isolation than READ COMMITTED) is retried by the caller.

use std::path::Path;

use tokio_postgres::Row;

use crate::error::{LeaseError, StorageError};
use crate::postgres::error::Fail;
use crate::postgres::pool::PgPool;
use crate::postgres::sql::{self, time, uint};
use crate::record::Lease;

const ACQUIRE: &str = "INSERT INTO leases AS l (thread, holder, expires_at, token) VALUES ($1, $2, $3, 1) \
     ON CONFLICT (thread) DO UPDATE SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at, \
       token = CASE WHEN l.holder = EXCLUDED.holder THEN l.token ELSE l.token + 1 END \
     WHERE l.holder IS NULL OR l.holder = EXCLUDED.holder OR l.expires_at <= $4 \
     RETURNING expires_at";

/// The lease as stored, if someone holds it (expired or not).
async fn current(
    ctx: &PgPool,
    client: &deadpool_postgres::Object,
    thread: &str,
) -> Result<Option<Lease>, Fail<LeaseError>> {
    let row = sql::query_opt(client, "SELECT holder, expires_at FROM leases WHERE thread = $1", &[&thread]).await?;
    Ok(lease_in(&ctx.path, thread, row.as_ref())?)
}

/// The lease a `SELECT holder, expires_at FROM leases` row of `thread` holds: none for no row,
/// or a released one (holder `NULL`).
pub(crate) fn lease_in(path: &Path, thread: &str, row: Option<&Row>) -> Result<Option<Lease>, StorageError> {
    let Some(row) = row else { return Ok(None) };
    let Some(holder) = sql::col::<Option<String>>(path, "leases", row, 0)? else { return Ok(None) };
    let expires_at = uint(path, "leases", || format!("{thread:?}"), sql::col(path, "leases", row, 1)?)?;
    Ok(Some(Lease { holder, expires_at }))
}

pub(crate) async fn acquire(
    ctx: &PgPool,
    thread: &str,
    holder: &str,
    ttl_ms: u64,
    now: u64,
) -> Result<Lease, Fail<LeaseError>> {
    let client = ctx.client().await?;
    let until = time(now.saturating_add(ttl_ms));
    let at = time(now);
    // A lease released between the refused upsert and the read that reports it: try again.
    for _ in 0..super::error::MAX_ATTEMPTS {
        let won = sql::query_opt(&client, ACQUIRE, &[&thread, &holder, &until, &at]).await?;
        if let Some(row) = won {
            let expires_at =
                uint(&ctx.path, "leases", || format!("{thread:?}"), sql::col(&ctx.path, "leases", &row, 0)?)?;
            return Ok(Lease { holder: holder.to_string(), expires_at });
        }
        if let Some(lease) = current(ctx, &client, thread).await? {
            return Err(Fail::Refused(LeaseError::ThreadBusy {
                thread: thread.to_string(),
                holder: lease.holder,
                expires_at: lease.expires_at,
            }));
        }
    }
    Err(Fail::Storage(ctx.conflict("the lease kept changing hands while it was being acquired")))
}

pub(crate) async fn renew(
    ctx: &PgPool,
    thread: &str,
    holder: &str,
    ttl_ms: u64,
    now: u64,
) -> Result<Lease, Fail<LeaseError>> {
    let client = ctx.client().await?;
    let until = time(now.saturating_add(ttl_ms));
    let row = sql::query_opt(
        &client,
        "UPDATE leases SET expires_at = $3 WHERE thread = $1 AND holder = $2 RETURNING expires_at",
        &[&thread, &holder, &until],
    )
    .await?;
    match row {
        Some(row) => Ok(Lease {
            holder: holder.to_string(),
            expires_at: uint(&ctx.path, "leases", || format!("{thread:?}"), sql::col(&ctx.path, "leases", &row, 0)?)?,
        }),
        None => Err(Fail::Refused(LeaseError::NotHeld {
            thread: thread.to_string(),
            holder: holder.to_string(),
            current: current(ctx, &client, thread).await?,
        })),
    }
}

pub(crate) async fn release(ctx: &PgPool, thread: &str, holder: &str) -> Result<(), Fail<LeaseError>> {
    let client = ctx.client().await?;
    let released = sql::execute(
        &client,
        "UPDATE leases SET holder = NULL, expires_at = 0 WHERE thread = $1 AND holder = $2",
        &[&thread, &holder],
    )
    .await?;
    if released > 0 {
        return Ok(());
    }
    match current(ctx, &client, thread).await? {
        None => Ok(()),
        Some(lease) => Err(Fail::Refused(LeaseError::NotHeld {
            thread: thread.to_string(),
            holder: holder.to_string(),
            current: Some(lease),
        })),
    }
}
