//! Opening the store named by `--store`, with each way it can fail mapped to an exit code
//! and a one-line message that says what to do.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use agentflow::Store;
use agentflow_store::sealed::{
    EnvKeyProvider, FileKeyProvider, KeyProvider, KeyStore, POSTGRES_KEY_SCHEMA, PostgresKeyStore, RedbKeyStore,
    SealedStore,
};
use agentflow_store::{OpenError, PostgresStore, RedbStore, StorageError};

use crate::{Failure, code};

/// Opens a redb file (`create`: a missing file becomes a new store) or a PostgreSQL store
/// (`postgres://` or `postgresql://`, in `schema` or the default one), sealed when
/// `--key-store` and `--kek` say so ([`configure`]).
pub fn open(spec: &str, schema: Option<&str>, create: bool) -> Result<Arc<dyn Store>, Failure> {
    if spec.starts_with("postgres://") || spec.starts_with("postgresql://") {
        let mut builder = PostgresStore::builder();
        if let Some(schema) = schema {
            builder = builder.schema(schema);
        }
        return builder.open(spec).map(sealed).map_err(|e| match e {
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
    RedbStore::open(path).map(sealed).map_err(|e| match e {
        OpenError::AlreadyOpen { held_by: Some(server), .. } => Failure::new(
            code::BUSY,
            format!(
                "{spec}: the store is held by the agentflow server {server}, which owns the file while it runs; \
                 {}; stop the server to run this command",
                crate::remote::THROUGH_SOCKET
            ),
        ),
        OpenError::AlreadyOpen { held_by: None, .. } => Failure::new(
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

/// How to open a sealed store (encryption at rest): its key store and its key-encryption key,
/// both or neither.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct SealingArgs {
    /// A sealed store's key store, kept apart from the data: the redb file holding its data
    /// keys, or a postgres:// URL (the keys in schema `agentflow_keys` there).
    #[arg(long, env = "AGENTFLOW_KEY_STORE", global = true, value_name = "PATH|URL")]
    pub key_store: Option<PathBuf>,
    /// A sealed store's key-encryption key: `env:VAR` (the key in variable VAR) or `file:PATH`
    /// (one key per line, the current first).
    #[arg(long, env = "AGENTFLOW_KEK", global = true, value_name = "env:VAR|file:PATH")]
    pub kek: Option<String>,
}

/// The key store and key provider every store this process opens is sealed with, if any.
struct Sealing {
    keys: Arc<dyn KeyStore>,
    provider: Arc<dyn KeyProvider>,
}

static SEALING: OnceLock<Option<Sealing>> = OnceLock::new();

/// Reads `--key-store` and `--kek` once: every store opened after is sealed with them. The key
/// store must exist unless `create` (an import, which may create the store too): a mistyped
/// path would otherwise start an empty key store, and data written with it would not open
/// with the right one.
pub fn configure(args: &SealingArgs, create: bool) -> Result<(), Failure> {
    let sealing = match (&args.key_store, &args.kek) {
        (None, None) => None,
        (Some(path), Some(kek)) => {
            let provider: Arc<dyn KeyProvider> = if let Some(var) = kek.strip_prefix("env:") {
                Arc::new(EnvKeyProvider::from_env(var).map_err(|e| Failure::usage(e.to_string()))?)
            } else if let Some(file) = kek.strip_prefix("file:") {
                Arc::new(FileKeyProvider::open(file).map_err(|e| Failure::usage(e.to_string()))?)
            } else {
                return Err(Failure::usage(format!(
                    "--kek {kek}: say where the key-encryption key is: env:VAR (an environment variable) or file:PATH"
                )));
            };
            let url = path.to_str().filter(|p| p.starts_with("postgres://") || p.starts_with("postgresql://"));
            let keys: Arc<dyn KeyStore> = if let Some(url) = url {
                Arc::new(PostgresKeyStore::open(url, POSTGRES_KEY_SCHEMA).map_err(Failure::store)?)
            } else {
                if !create && !path.exists() {
                    return Err(Failure::not_found(format!(
                        "{}: no such key store; check --key-store (or AGENTFLOW_KEY_STORE)",
                        path.display()
                    )));
                }
                Arc::new(RedbKeyStore::open(path).map_err(Failure::store)?)
            };
            Some(Sealing { keys, provider })
        }
        _ => {
            return Err(Failure::usage(
                "a sealed store needs both --key-store PATH and --kek env:VAR|file:PATH (or AGENTFLOW_KEY_STORE and AGENTFLOW_KEK)",
            ));
        }
    };
    let _ = SEALING.set(sealing);
    Ok(())
}

/// `store`, sealed if `--key-store` and `--kek` were given.
fn sealed<S: Store + 'static>(store: S) -> Arc<dyn Store> {
    match SEALING.get() {
        Some(Some(s)) => Arc::new(SealedStore::new(store, s.keys.clone(), s.provider.clone())),
        _ => Arc::new(store),
    }
}
