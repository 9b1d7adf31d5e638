//! [`PgPool`]: the pool and the store's name that every PostgreSQL operation shares, and how one
//! attempt of a transaction is settled (answered, or run again after a conflict).

use std::path::PathBuf;

use deadpool_postgres::{Object, Pool};

use crate::error::StorageError;
use crate::postgres::error::{self, Fail, MAX_ATTEMPTS, classify, is_conflict, pool_error};

/// What every operation of a store shares: the pool and the store's name for errors.
pub(crate) struct PgPool {
    pub(super) pool: Pool,
    pub(crate) path: PathBuf,
    /// The channel the step commits with events notify (see
    /// [`channel`](crate::postgres::event_log::channel)).
    pub(crate) events_channel: String,
    /// How many commits' events each thread's log keeps.
    pub(crate) event_keep: i64,
}

impl PgPool {
    /// A pooled connection (its `search_path` is the store's schema).
    pub(crate) async fn client(&self) -> Result<Object, StorageError> {
        self.pool.get().await.map_err(|e| pool_error(&self.path, e))
    }

    /// The typed error for a database failure outside a retried transaction.
    pub(crate) fn db(&self, e: &tokio_postgres::Error) -> StorageError {
        classify(&self.path, e, 1)
    }

    /// A conflict that retrying did not resolve.
    pub(crate) fn conflict(&self, detail: &str) -> StorageError {
        StorageError::Conflict { path: self.path.clone(), attempts: MAX_ATTEMPTS, detail: detail.to_string() }
    }

    /// The answer of attempt `attempt` of a transaction, or `None` to run it again (after a
    /// jittered pause that grows with the attempts).
    pub(crate) async fn settle<T, E: From<StorageError>>(
        &self,
        outcome: Result<T, Fail<E>>,
        attempt: u32,
    ) -> Option<Result<T, E>> {
        match outcome {
            Ok(v) => Some(Ok(v)),
            Err(Fail::Refused(e)) => Some(Err(e)),
            Err(Fail::Storage(e)) => Some(Err(e.into())),
            Err(Fail::Db(e)) if is_conflict(&e) && attempt < MAX_ATTEMPTS => {
                tokio::time::sleep(error::backoff(attempt)).await;
                None
            }
            Err(Fail::Db(e)) => Some(Err(classify(&self.path, &e, attempt).into())),
        }
    }
}
