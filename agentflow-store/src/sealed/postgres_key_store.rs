//! [`PostgresKeyStore`]: the data keys in a table of their own schema on a PostgreSQL server,
//! shared by every process of a `PostgresStore` deployment (feature `postgres` too).

use std::path::PathBuf;
use std::sync::Arc;

use tokio_postgres::{Client, NoTls};

use crate::postgres::error::location;
use crate::postgres::io::IoThread;
use crate::sealed::error::KeyStoreError;
use crate::sealed::key_store::{KeyRecord, KeyStore};

/// A key store in the table `data_keys` of its own schema on a PostgreSQL server (by default
/// `agentflow_keys`; give it a schema, a database or a server other than the data's, with its
/// own grants and backups, so that a copy of the data tables does not hold their keys). Several
/// processes share it: creating and re-wrapping a key are compare-and-sets in one statement.
///
/// A destroyed key's row is overwritten; PostgreSQL keeps the old row version until `VACUUM`
/// (run `VACUUM data_keys` after purges to drop it from the table's pages).
pub struct PostgresKeyStore {
    io: IoThread,
    client: Arc<Client>,
    table: String,
    path: PathBuf,
}

impl std::fmt::Debug for PostgresKeyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresKeyStore").field("at", &self.path).finish_non_exhaustive()
    }
}

/// The schema a [`PostgresKeyStore`] uses when none is given.
pub const POSTGRES_KEY_SCHEMA: &str = "agentflow_keys";

fn failed(path: &std::path::Path, e: impl std::fmt::Display) -> KeyStoreError {
    KeyStoreError::Io { path: path.to_path_buf(), detail: e.to_string() }
}

impl PostgresKeyStore {
    /// Connects to the server at `url` and keeps the keys in `schema` (created with its table
    /// if missing).
    pub fn open(url: &str, schema: &str) -> Result<Self, KeyStoreError> {
        let config: tokio_postgres::Config = url.parse().map_err(|e| KeyStoreError::Io {
            path: PathBuf::from("postgres://"),
            detail: format!("the URL does not parse ({e})"),
        })?;
        let path = location(&config, schema);
        if schema.is_empty() || schema.contains(['"', '\0']) {
            return Err(failed(&path, "the schema name is empty or holds a `\"` or NUL; pick a plain name"));
        }
        let io = IoThread::start(path.clone()).map_err(|e| failed(&path, e))?;
        let (client, connection) = io
            .run(async move { config.connect(NoTls).await })
            .map_err(|e| failed(&path, e))?
            .map_err(|e| failed(&path, e))?;
        io.spawn(async move {
            let _ = connection.await;
        });
        let client = Arc::new(client);
        let table = format!("\"{schema}\".data_keys");
        let ddl = format!(
            "CREATE SCHEMA IF NOT EXISTS \"{schema}\"; \
             CREATE TABLE IF NOT EXISTS {table} (thread text PRIMARY KEY, generation bigint NOT NULL, \
             kek_id text NOT NULL, wrapped bytea NOT NULL)"
        );
        let c = client.clone();
        io.run(async move { c.batch_execute(&ddl).await })
            .map_err(|e| failed(&path, e))?
            .map_err(|e| failed(&path, e))?;
        Ok(PostgresKeyStore { io, client, table, path })
    }

    /// Runs `sql` with `params` on the I/O thread; the rows it answers.
    fn query(&self, sql: String, params: Vec<Param>) -> Result<Vec<tokio_postgres::Row>, KeyStoreError> {
        let c = self.client.clone();
        let rows = self.io.run(async move {
            let refs: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = params.iter().map(Param::as_sql).collect();
            c.query(&sql, &refs).await
        });
        rows.map_err(|e| failed(&self.path, e))?.map_err(|e| failed(&self.path, e))
    }

    fn record(&self, thread: &str, row: &tokio_postgres::Row) -> Result<KeyRecord, KeyStoreError> {
        let damaged =
            |detail: String| KeyStoreError::Damaged { path: self.path.clone(), thread: thread.to_string(), detail };
        let generation: i64 = row.try_get(0).map_err(|e| damaged(e.to_string()))?;
        let generation = u32::try_from(generation).map_err(|_| damaged(format!("generation {generation}")))?;
        Ok(KeyRecord::new(
            generation,
            row.try_get::<_, String>(1).map_err(|e| damaged(e.to_string()))?,
            row.try_get::<_, Vec<u8>>(2).map_err(|e| damaged(e.to_string()))?,
        ))
    }
}

/// A statement parameter owned by the call (sent to the I/O thread).
enum Param {
    Text(String),
    Int(i64),
    Bytes(Vec<u8>),
}

impl Param {
    fn as_sql(&self) -> &(dyn tokio_postgres::types::ToSql + Sync) {
        match self {
            Param::Text(v) => v,
            Param::Int(v) => v,
            Param::Bytes(v) => v,
        }
    }
}

fn record_params(r: &KeyRecord) -> [Param; 3] {
    [Param::Int(i64::from(r.generation)), Param::Text(r.kek_id.clone()), Param::Bytes(r.wrapped.clone())]
}

impl KeyStore for PostgresKeyStore {
    fn get(&self, thread: &str) -> Result<Option<KeyRecord>, KeyStoreError> {
        let sql = format!("SELECT generation, kek_id, wrapped FROM {} WHERE thread = $1", self.table);
        let rows = self.query(sql, vec![Param::Text(thread.to_string())])?;
        rows.first().map(|row| self.record(thread, row)).transpose()
    }

    fn create(&self, thread: &str, record: KeyRecord) -> Result<KeyRecord, KeyStoreError> {
        let t = &self.table;
        let sql = format!(
            "INSERT INTO {t} AS k (thread, generation, kek_id, wrapped) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (thread) DO UPDATE SET generation = EXCLUDED.generation, kek_id = EXCLUDED.kek_id, \
             wrapped = EXCLUDED.wrapped WHERE octet_length(k.wrapped) = 0 RETURNING generation"
        );
        let mut params = vec![Param::Text(thread.to_string())];
        params.extend(record_params(&record));
        if self.query(sql, params)?.is_empty() {
            // A live key was there first (another process): that one is kept.
            return self.get(thread)?.ok_or_else(|| failed(&self.path, format!("the key of `{thread}` vanished")));
        }
        Ok(record)
    }

    fn replace(&self, thread: &str, expected: &KeyRecord, new: KeyRecord) -> Result<bool, KeyStoreError> {
        let sql = format!(
            "UPDATE {} SET generation = $5, kek_id = $6, wrapped = $7 \
             WHERE thread = $1 AND generation = $2 AND kek_id = $3 AND wrapped = $4 RETURNING thread",
            self.table
        );
        let mut params = vec![Param::Text(thread.to_string())];
        params.extend(record_params(expected));
        params.extend(record_params(&new));
        Ok(!self.query(sql, params)?.is_empty())
    }

    fn destroy(&self, thread: &str) -> Result<bool, KeyStoreError> {
        let sql = format!(
            "UPDATE {} SET kek_id = '', wrapped = ''::bytea WHERE thread = $1 AND octet_length(wrapped) > 0 RETURNING thread",
            self.table
        );
        Ok(!self.query(sql, vec![Param::Text(thread.to_string())])?.is_empty())
    }

    fn threads(&self) -> Result<Vec<String>, KeyStoreError> {
        let rows = self.query(format!("SELECT thread FROM {} ORDER BY thread", self.table), Vec::new())?;
        rows.iter().map(|r| r.try_get::<_, String>(0).map_err(|e| failed(&self.path, e))).collect()
    }
}
