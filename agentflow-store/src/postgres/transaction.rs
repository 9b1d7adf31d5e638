//! Running PostgreSQL transactions: [`in_transaction!`](in_transaction) and
//! [`retrying!`](retrying), which run a body again on a serialization failure or deadlock, and
//! [`OpenTx`], a transaction opened by hand whose `BEGIN` is pipelined.

use deadpool_postgres::Object;

use crate::error::StorageError;
use crate::postgres::pool::PgPool;

/// Runs `$body` (an expression of type `Result<T, Fail<E>>` that may use `$tx`, an open
/// transaction) in a transaction of a pooled connection and commits it. A serialization failure
/// or deadlock runs everything again, up to [`MAX_ATTEMPTS`](crate::postgres::error::MAX_ATTEMPTS) times; a refusal or any other
/// failure rolls back and answers `Result<T, E>`.
macro_rules! in_transaction {
    ($ctx:expr, $durability:expr, |$tx:ident| $body:expr) => {{
        let ctx: &$crate::postgres::pool::PgPool = $ctx;
        let mut attempt: u32 = 0;
        loop {
            attempt += 1;
            let outcome = async {
                let mut client = ctx.client().await?;
                let $tx = client.transaction().await?;
                if $durability == $crate::record::Durability::Eventual {
                    $tx.batch_execute("SET LOCAL synchronous_commit = off").await?;
                }
                let out = $body?;
                $tx.commit().await?;
                Ok(out)
            }
            .await;
            if let Some(answer) = ctx.settle(outcome, attempt).await {
                break answer;
            }
        }
    }};
}

/// Runs `$body` (an expression of type `Result<T, Fail<E>>`, outside a transaction) and runs it
/// again on a serialization failure or deadlock, like [`in_transaction`]; answers `Result<T, E>`.
macro_rules! retrying {
    ($ctx:expr, $body:expr) => {{
        let ctx: &$crate::postgres::pool::PgPool = $ctx;
        let mut attempt: u32 = 0;
        loop {
            attempt += 1;
            let outcome = async { $body }.await;
            if let Some(answer) = ctx.settle(outcome, attempt).await {
                break answer;
            }
        }
    }};
}

pub(crate) use {in_transaction, retrying};

/// The error for an [`OpenTx`] whose connection is gone before its statements ran (cannot
/// happen: it is set when made).
pub(super) fn released(ctx: &PgPool) -> StorageError {
    StorageError::Closed {
        path: ctx.path.clone(),
        detail: "the transaction's connection was released early".to_string(),
    }
}

/// A pooled connection in a transaction opened by hand (its `BEGIN` pipelined with the first
/// statements). Dropped before [`OpenTx::end`] succeeded (a failure, a dropped future), the
/// connection is closed instead of going back to the pool, which ends the transaction on the
/// server.
pub(super) struct OpenTx {
    pub(super) client: Option<Object>,
}

impl OpenTx {
    /// Ends the transaction with `statement` (`COMMIT` or `ROLLBACK`); the connection goes
    /// back to the pool only if that worked. A `COMMIT` that fails ends the transaction too;
    /// a `ROLLBACK` is sent after it to be sure the connection is clean.
    pub(super) async fn end(&mut self, statement: &str) -> Result<(), tokio_postgres::Error> {
        let Some(client) = self.client.as_ref() else { return Ok(()) };
        let ended = client.batch_execute(statement).await;
        let clean = match &ended {
            Ok(()) => true,
            Err(_) => client.batch_execute("ROLLBACK").await.is_ok(),
        };
        if clean {
            // Back to the pool when dropped.
            let _ = self.client.take();
        }
        ended
    }
}

impl Drop for OpenTx {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            drop(Object::take(client));
        }
    }
}
