//! Small helpers over a connection or a transaction: cached prepared statements, reading a
//! row's columns without panicking, and the conversions between the store's `u64` numbers and
//! PostgreSQL's signed `bigint`.

use std::path::Path;

use deadpool_postgres::GenericClient;
use tokio_postgres::Row;
use tokio_postgres::types::{FromSql, ToSql};

use crate::error::StorageError;
use crate::listing::Listing;
use crate::postgres::error::{decode_error, out_of_range};

/// Parameters of a statement.
pub(crate) type Params<'a> = [&'a (dyn ToSql + Sync)];

/// Every row of `sql` (prepared once per connection).
pub(crate) async fn query<C: GenericClient>(
    c: &C,
    sql: &str,
    params: &Params<'_>,
) -> Result<Vec<Row>, tokio_postgres::Error> {
    let statement = c.prepare_cached(sql).await?;
    c.query(&statement, params).await
}

/// At most one row of `sql`.
pub(crate) async fn query_opt<C: GenericClient>(
    c: &C,
    sql: &str,
    params: &Params<'_>,
) -> Result<Option<Row>, tokio_postgres::Error> {
    let statement = c.prepare_cached(sql).await?;
    c.query_opt(&statement, params).await
}

/// Runs `sql`; the number of rows it touched.
pub(crate) async fn execute<C: GenericClient>(
    c: &C,
    sql: &str,
    params: &Params<'_>,
) -> Result<u64, tokio_postgres::Error> {
    let statement = c.prepare_cached(sql).await?;
    c.execute(&statement, params).await
}

/// A store number (seq, unix millis) as a `bigint`; values past `i64::MAX` are refused.
pub(crate) fn int(path: &Path, what: &str, value: u64) -> Result<i64, StorageError> {
    i64::try_from(value).map_err(|_| out_of_range(path, what, value))
}

/// A time as a `bigint`, saturating (a lease "until the end of time" stays that).
pub(crate) fn time(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// A stored `bigint` as a store number; a negative one is damage.
pub(crate) fn uint(path: &Path, table: &str, key: impl FnOnce() -> String, value: i64) -> Result<u64, StorageError> {
    u64::try_from(value).map_err(|_| decode_error(path, table, key(), format!("negative number {value}")))
}

/// Column `idx` of a row read from `table`, decoded as `T`. A value that does not decode is a
/// [`StorageError::Decode`] naming the table, never a panic (`Row::get` panics): text that is not
/// UTF-8 (a `SQL_ASCII` database takes any bytes), or a column someone altered to another type.
pub(crate) fn col<'a, T: FromSql<'a>>(path: &Path, table: &str, row: &'a Row, idx: usize) -> Result<T, StorageError> {
    row.try_get(idx).map_err(|e| decode_error(path, table, "?".to_string(), e.to_string()))
}

/// The records of `read` that decode, and the decode error of each that does not (a lenient
/// listing); another error fails the listing.
pub(crate) fn lenient<T>(read: impl Iterator<Item = Result<T, StorageError>>) -> Result<Listing<T>, StorageError> {
    let (mut items, mut skipped) = (Vec::new(), Vec::new());
    for record in read {
        match record {
            Ok(record) => items.push(record),
            Err(e @ StorageError::Decode { .. }) => skipped.push(e),
            Err(e) => return Err(e),
        }
    }
    Ok(Listing::new(items, skipped))
}
