//! The circuit breakers of a [`PostgresStore`](super::PostgresStore): table `breakers`, one row
//! per tool, moved under its row lock (`SELECT .. FOR UPDATE`) so concurrent updates from any
//! number of processes are applied one after another.

use deadpool_postgres::GenericClient;

use crate::breaker::{BreakerAnswer, BreakerError, BreakerRecord, BreakerState, BreakerUpdate, audit_entry, step};
use crate::error::StorageError;
use crate::postgres::approvals::append_audit;
use crate::postgres::error::{Fail, decode_error};
use crate::postgres::pool::PgPool;
use crate::postgres::sql::{self, time, uint};

const COLUMNS: &str = "state, failures, open_until, probe, updated_at";

fn record(ctx: &PgPool, tool: &str, row: &tokio_postgres::Row) -> Result<BreakerRecord, StorageError> {
    let key = || format!("{tool:?}");
    let bad = |reason: String| decode_error(&ctx.path, "breakers", key(), reason);
    let get = |e: tokio_postgres::Error| bad(e.to_string());
    let state: String = row.try_get(0).map_err(get)?;
    let state = BreakerState::parse(&state).ok_or_else(|| bad(format!("unknown state {state:?}")))?;
    let failures: i32 = row.try_get(1).map_err(get)?;
    let mut r = BreakerRecord::closed(tool);
    r.state = state;
    r.failures = u32::try_from(failures).map_err(|_| bad(format!("negative failures {failures}")))?;
    r.open_until = uint(&ctx.path, "breakers", key, row.try_get(2).map_err(get)?)?;
    r.probe = row.try_get(3).map_err(get)?;
    r.updated_at = uint(&ctx.path, "breakers", key, row.try_get(4).map_err(get)?)?;
    Ok(r)
}

pub(crate) async fn read<C: GenericClient>(
    ctx: &PgPool,
    c: &C,
    tool: &str,
) -> Result<Option<BreakerRecord>, StorageError> {
    let row = sql::query_opt(c, &format!("SELECT {COLUMNS} FROM breakers WHERE tool = $1"), &[&tool])
        .await
        .map_err(|e| ctx.db(&e))?;
    row.map(|r| record(ctx, tool, &r)).transpose()
}

pub(crate) async fn update<C: GenericClient>(
    ctx: &PgPool,
    tx: &C,
    u: &BreakerUpdate,
) -> Result<BreakerAnswer, Fail<BreakerError>> {
    // The row exists before it is locked, so the first updates of a tool queue on one lock too.
    sql::execute(
        tx,
        "INSERT INTO breakers (tool, state, failures, open_until, updated_at) VALUES ($1, 'CLOSED', 0, 0, 0) \
         ON CONFLICT (tool) DO NOTHING",
        &[&u.tool],
    )
    .await?;
    let row =
        sql::query_opt(tx, &format!("SELECT {COLUMNS} FROM breakers WHERE tool = $1 FOR UPDATE"), &[&u.tool]).await?;
    let current = row.map(|r| record(ctx, &u.tool, &r)).transpose()?;
    let answer = step(current, u);
    let r = &answer.record;
    let failures = i32::try_from(r.failures).unwrap_or(i32::MAX);
    sql::execute(
        tx,
        "UPDATE breakers SET state = $2, failures = $3, open_until = $4, probe = $5, updated_at = $6 WHERE tool = $1",
        &[&u.tool, &r.state.as_str(), &failures, &time(r.open_until), &r.probe, &time(r.updated_at)],
    )
    .await?;
    if let Some(entry) = audit_entry(u, &answer) {
        append_audit::<_, BreakerError>(ctx, tx, &u.thread, &entry).await?;
    }
    Ok(answer)
}
