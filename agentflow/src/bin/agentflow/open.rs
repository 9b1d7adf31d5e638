//! Opening the store named by `--store`, with each way it can fail mapped to an exit code
//! and a one-line message that says what to do.

use std::path::Path;
use std::sync::Arc;

use agentflow::Store;
use agentflow_store::{OpenError, PostgresStore, RedbStore, StorageError};

use crate::{Failure, code};

/// Opens a redb file (`create`: a missing file becomes a new store) or a PostgreSQL store
/// (`postgres://` or `postgresql://`, in `schema` or the default one).
pub fn open(spec: &str, schema: Option<&str>, create: bool) -> Result<Arc<dyn Store>, Failure> {
    if spec.starts_with("postgres://") || spec.starts_with("postgresql://") {
        let mut builder = PostgresStore::builder();
        if let Some(schema) = schema {
            builder = builder.schema(schema);
        }
        return builder.open(spec).map(|s| Arc::new(s) as Arc<dyn Store>).map_err(|e| match e {
            OpenError::Storage(StorageError::Unreachable { .. } | StorageError::Io { .. }) => {
                Failure::new(code::BUSY, format!("cannot reach the PostgreSQL store: {e}"))
            }
            other => Failure::store(other),
        });
    }
    let path = Path::new(spec);
    if !create && !path.exists() {
        return Err(Failure::not_found(format!("{spec}: no such store file; check --store (or AGENTFLOW_STORE)")));
    }
    RedbStore::open(path).map(|s| Arc::new(s) as Arc<dyn Store>).map_err(|e| match e {
        OpenError::AlreadyOpen { .. } => Failure::new(
            code::BUSY,
            format!(
                "{spec}: the store is busy: another process (a running app or worker) has this redb file open, \
                 and a redb file is open in one process at a time; stop that process and run the command again, \
                 or inspect a copy of the file (or put the store on PostgreSQL, which many processes share)"
            ),
        ),
        other => Failure::store(other),
    })
}
