//! How PostgreSQL failures become the crate's typed errors, and the retry of transactions that
//! lost a conflict.

use std::path::{Path, PathBuf};

use tokio_postgres::error::SqlState;

use crate::error::StorageError;

/// How many times a transaction is tried when it keeps failing with a serialization failure or
/// a deadlock before [`StorageError::Conflict`] is returned.
pub(crate) const MAX_ATTEMPTS: u32 = 10;

/// Why a transaction body stopped.
pub(crate) enum Fail<E> {
    /// The operation was refused (busy lease, lost compare-and-set, bad commit): rolled back,
    /// answered as is, never retried.
    Refused(E),
    /// The database failed; retried when it is a conflict.
    Db(tokio_postgres::Error),
    /// A stored value did not decode, or the pool failed.
    Storage(StorageError),
}

impl<E> From<tokio_postgres::Error> for Fail<E> {
    fn from(e: tokio_postgres::Error) -> Self {
        Fail::Db(e)
    }
}

impl<E> From<StorageError> for Fail<E> {
    fn from(e: StorageError) -> Self {
        Fail::Storage(e)
    }
}

/// Whether running the transaction again may succeed.
pub(crate) fn is_conflict(e: &tokio_postgres::Error) -> bool {
    matches!(e.code(), Some(c) if *c == SqlState::T_R_SERIALIZATION_FAILURE || *c == SqlState::T_R_DEADLOCK_DETECTED)
}

/// A unique-key violation (a concurrent insert of the same key won).
pub(crate) fn is_unique_violation(e: &tokio_postgres::Error) -> bool {
    e.code() == Some(&SqlState::UNIQUE_VIOLATION)
}

/// The typed error for a PostgreSQL failure; `attempts` is how often a conflict was tried.
pub(crate) fn classify(path: &Path, e: &tokio_postgres::Error, attempts: u32) -> StorageError {
    let path = path.to_path_buf();
    let detail = describe(e);
    if let Some(code) = e.code() {
        let class = &code.code()[..2.min(code.code().len())];
        if *code == SqlState::INVALID_PASSWORD || *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION {
            return StorageError::Authentication { path, detail };
        }
        // A NUL byte in a `text` value (the only character a Rust string holds that the server's
        // UTF-8 refuses). Any other byte it refuses is one it holds and cannot send as UTF-8: text
        // another program wrote into a `SQL_ASCII` database.
        if *code == SqlState::CHARACTER_NOT_IN_REPERTOIRE {
            if e.as_db_error().is_some_and(|d| d.message().ends_with(": 0x00")) {
                return StorageError::Unstorable { path, detail };
            }
            return StorageError::Backend {
                path,
                detail: format!(
                    "{detail}; the database holds text that is not UTF-8 (written into a SQL_ASCII database by another program): fix that row, or keep the store in a database created with ENCODING 'UTF8'"
                ),
            };
        }
        if is_conflict(e) {
            return StorageError::Conflict { path, attempts, detail };
        }
        // Class 08: connection exceptions; 57P0x: the server is shutting down or starting.
        if class == "08"
            || *code == SqlState::ADMIN_SHUTDOWN
            || *code == SqlState::CRASH_SHUTDOWN
            || *code == SqlState::CANNOT_CONNECT_NOW
        {
            return StorageError::Unreachable { path, detail };
        }
        if *code == SqlState::INVALID_CATALOG_NAME {
            return StorageError::Backend {
                path,
                detail: format!("{detail}; create the database (createdb) or fix its name in the URL"),
            };
        }
        return StorageError::Backend { path, detail };
    }
    let io = std::error::Error::source(e).is_some_and(|s| s.downcast_ref::<std::io::Error>().is_some());
    if io || e.is_closed() {
        return StorageError::Unreachable { path, detail };
    }
    StorageError::Backend { path, detail }
}

/// What the server or the client said, with the SQLSTATE code and the server's hint if any.
fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => {
            let mut text = format!("{} {}: {}", db.severity(), db.code().code(), db.message());
            if let Some(detail) = db.detail() {
                text.push_str(&format!(" ({detail})"));
            }
            if let Some(hint) = db.hint() {
                text.push_str(&format!("; hint: {hint}"));
            }
            text
        }
        None => e.to_string(),
    }
}

/// How long to wait before attempt `attempt + 1` of a transaction that conflicted: a jittered
/// backoff that doubles from 2 ms up to 256 ms, so colliding callers spread out.
pub(crate) fn backoff(attempt: u32) -> std::time::Duration {
    use std::hash::{BuildHasher, RandomState};
    let cap = 2u64 << attempt.min(7);
    // A fresh `RandomState` is seeded per call: enough randomness for jitter, no extra crate.
    let jitter = RandomState::new().hash_one(std::time::Instant::now()) % cap;
    std::time::Duration::from_millis(cap / 2 + jitter / 2)
}

/// The typed error for a failure to get a pooled connection.
pub(crate) fn pool_error(path: &Path, e: deadpool_postgres::PoolError) -> StorageError {
    use deadpool_postgres::PoolError;
    match e {
        PoolError::Backend(e) => classify(path, &e, 1),
        PoolError::Timeout(deadpool_postgres::TimeoutType::Wait) => StorageError::Backend {
            path: path.to_path_buf(),
            detail: "every pooled connection stayed busy while waiting for one; raise max_connections or make fewer concurrent calls".to_string(),
        },
        PoolError::Timeout(_) => StorageError::Unreachable {
            path: path.to_path_buf(),
            detail: "timed out connecting".to_string(),
        },
        PoolError::Closed => {
            StorageError::Closed { path: path.to_path_buf(), detail: "the connection pool was closed".to_string() }
        }
        other => StorageError::Backend { path: path.to_path_buf(), detail: other.to_string() },
    }
}

/// A value that does not fit a signed 64-bit column.
pub(crate) fn out_of_range(path: &Path, what: &str, value: u64) -> StorageError {
    StorageError::Backend {
        path: path.to_path_buf(),
        detail: format!("{what} {value} is larger than PostgreSQL's bigint allows (at most {})", i64::MAX),
    }
}

/// A stored value that does not decode.
pub(crate) fn decode_error(path: &Path, table: &str, key: String, reason: impl Into<String>) -> StorageError {
    StorageError::Decode { path: path.to_path_buf(), table: table.to_string(), key, reason: reason.into() }
}

/// The store's name in errors: the URL without its password, and the schema.
pub(crate) fn location(config: &tokio_postgres::Config, schema: &str) -> PathBuf {
    let user = config.get_user().unwrap_or("");
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
        #[cfg(unix)]
        Some(tokio_postgres::config::Host::Unix(p)) => p.display().to_string(),
        None => "localhost".to_string(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let db = config.get_dbname().unwrap_or(user);
    PathBuf::from(format!("postgres://{user}@{host}:{port}/{db} (schema {schema})"))
}
