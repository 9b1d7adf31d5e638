//! The idempotency keys of run starts on PostgreSQL (see [`NewRun::idempotency`]): table
//! `idempotency_keys`, primary key (scope, key), written in the transaction that queues the
//! run. Of concurrent starts with one key the first insert wins; the others wait on its row
//! and, once it committed, find it kept (or, under `SERIALIZABLE`, fail to serialize and are
//! run again by the store's retry, and then find it).

use deadpool_postgres::GenericClient;

use crate::postgres::error::Fail;
use crate::postgres::pool::PgPool;
use crate::postgres::sql::{self, time};
use crate::queue::{NewRun, QueueError};
use crate::record::IDEMPOTENCY_KEY_TTL_MS;

/// Removes up to 16 keys created at `$1` or before (expired), oldest first; rows another
/// transaction holds are left to it.
const SWEEP: &str = "DELETE FROM idempotency_keys WHERE (scope, key) IN (SELECT scope, key FROM idempotency_keys \
     WHERE created <= $1 ORDER BY created LIMIT 16 FOR UPDATE SKIP LOCKED)";

/// Keeps key (`$1`, `$2`) for thread `$3`, request `$4`, created `$5`, unless it is kept
/// already and younger than `$6` at `$5`; a row when kept (the kept row is locked either way).
const KEEP: &str = "INSERT INTO idempotency_keys AS k (scope, key, thread, request, created) \
     VALUES ($1, $2, $3, $4, $5) \
     ON CONFLICT (scope, key) DO UPDATE SET thread = EXCLUDED.thread, request = EXCLUDED.request, \
       created = EXCLUDED.created \
     WHERE EXCLUDED.created - k.created >= $6 RETURNING 1";

/// The thread and request of kept key (`$1`, `$2`).
const KEPT: &str = "SELECT thread, request FROM idempotency_keys WHERE scope = $1 AND key = $2";

/// How many times [`keep`] tries when the key it found kept is gone before it read it.
const ATTEMPTS: usize = 3;

/// Keeps `run`'s idempotency key in the caller's transaction, or refuses the run with
/// [`QueueError::KeyUsed`] when the key is kept and unexpired at `run.at` (the caller rolls
/// back). A run without a key passes.
pub(crate) async fn keep<C: GenericClient>(ctx: &PgPool, c: &C, run: &NewRun) -> Result<(), Fail<QueueError>> {
    let Some(key) = &run.idempotency else { return Ok(()) };
    let created = sql::int(&ctx.path, "idempotency key time", run.at)?;
    let ttl = time(IDEMPOTENCY_KEY_TTL_MS);
    if let Some(cutoff) = run.at.checked_sub(IDEMPOTENCY_KEY_TTL_MS) {
        sql::execute(c, SWEEP, &[&time(cutoff)]).await?;
    }
    for _ in 0..ATTEMPTS {
        let params: &sql::Params<'_> = &[&key.scope, &key.key, &run.thread, &key.request, &created, &ttl];
        if sql::query_opt(c, KEEP, params).await?.is_some() {
            return Ok(());
        }
        if let Some(row) = sql::query_opt(c, KEPT, &[&key.scope, &key.key]).await? {
            let thread: String = sql::col(&ctx.path, "idempotency_keys", &row, 0)?;
            let request: String = sql::col(&ctx.path, "idempotency_keys", &row, 1)?;
            return Err(Fail::Refused(QueueError::KeyUsed {
                key: key.key.clone(),
                thread,
                same_request: request == key.request,
            }));
        }
    }
    Err(Fail::Storage(ctx.conflict("the idempotency key was removed each time it was found kept")))
}
