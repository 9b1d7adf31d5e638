//! Helpers for tests of this crate and of the crates built on it; not part of the API.

use std::path::Path;

use redb::{Database, ReadableDatabase, ReadableTable};

use crate::error::StorageError;
use crate::record::{AuditEntry, ThreadRecord};
use crate::redb::error::WithPath;
use crate::redb::tables;

/// The store format [`rewrite_as_format_5`] writes.
const FORMAT_5: u32 = 5;

/// The store format of the [`RedbStore`](crate::RedbStore) file at `path` (closed), as its
/// `agentflow.meta` table records it.
pub fn redb_format(path: &Path) -> Result<u32, StorageError> {
    let db = Database::open(path).ctx(path)?;
    let txn = db.begin_read().ctx(path)?;
    let meta = txn.open_table(tables::META).ctx(path)?;
    let stored = meta.get("format").ctx(path)?;
    stored.as_ref().and_then(|v| <[u8; 4]>::try_from(v.value()).ok()).map(u32::from_le_bytes).ok_or_else(|| {
        StorageError::Corrupted {
            path: path.to_path_buf(),
            detail: "the store format version is missing or malformed".to_string(),
        }
    })
}

/// Rewrites the [`RedbStore`](crate::RedbStore) file at `path` (closed, of this build's format)
/// as store format 5 wrote it, for tests of the upgrade of such files: audit entries without
/// `detail_hash` and `link`, thread records without the tenant (a thread's tenant is dropped),
/// and the format recorded as 5. Opening the file then moves it to this build's format again.
/// Answers how many audit entries were rewritten.
pub fn rewrite_as_format_5(path: &Path) -> Result<usize, StorageError> {
    let bad = |table: &str, key: String, reason: String| StorageError::Decode {
        path: path.to_path_buf(),
        table: table.to_string(),
        key,
        reason,
    };
    let db = Database::open(path).ctx(path)?;
    let txn = db.begin_write().ctx(path)?;
    let rewritten;
    {
        let mut audit = txn.open_table(tables::AUDIT).ctx(path)?;
        let mut entries = Vec::new();
        for row in audit.iter().ctx(path)? {
            let (k, v) = row.ctx(path)?;
            let entry = AuditEntry::decode(v.value())
                .map_err(|reason| bad(redb::TableHandle::name(&tables::AUDIT), format!("{:?}", k.value()), reason))?;
            entries.push(entry);
        }
        rewritten = entries.len();
        for e in entries {
            audit.insert((e.thread.as_str(), e.seq), e.encode_format_5().as_slice()).ctx(path)?;
        }
        let mut threads = txn.open_table(tables::THREADS).ctx(path)?;
        let mut records = Vec::new();
        for row in threads.iter().ctx(path)? {
            let (k, v) = row.ctx(path)?;
            let record = ThreadRecord::decode(v.value())
                .map_err(|reason| bad(redb::TableHandle::name(&tables::THREADS), format!("{:?}", k.value()), reason))?;
            records.push(record);
        }
        for record in records {
            threads.insert(record.id.as_str(), record.encode_format_5().as_slice()).ctx(path)?;
        }
        txn.open_table(tables::META).ctx(path)?.insert("format", FORMAT_5.to_le_bytes().as_slice()).ctx(path)?;
    }
    txn.commit().ctx(path)?;
    Ok(rewritten)
}
