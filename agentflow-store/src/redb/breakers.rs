//! The circuit breakers of a [`RedbStore`](crate::RedbStore): table `breakers`, one row per
//! tool, moved by the shared rule [`breaker_step`](crate::breaker_step) in the writer's
//! transaction.

use std::path::Path;

use redb::ReadableTable;
use serde::{Deserialize, Serialize};

use crate::breaker::{BreakerAnswer, BreakerError, BreakerRecord, BreakerState, BreakerUpdate, audit_entry, step};
use crate::error::StorageError;
use crate::record::Payload;
use crate::redb::audit::stage_append_audit;
use crate::redb::error::WithPath;
use crate::redb::tables;
use crate::redb::writer::Tx;

/// A breaker row as stored in the redb table (JSON, versioned by `v`).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Row {
    v: u32,
    state: BreakerState,
    failures: u32,
    open_until: u64,
    probe: Option<String>,
    updated_at: u64,
}

const ROW_VERSION: u32 = 1;

fn decode(path: &Path, tool: &str, bytes: &[u8]) -> Result<BreakerRecord, StorageError> {
    let bad = |reason: String| StorageError::Decode {
        path: path.to_path_buf(),
        table: redb::TableHandle::name(&tables::BREAKERS).to_string(),
        key: format!("{tool:?}"),
        reason,
    };
    // JSON in the record encoding every stored value has (a version byte, the bytes, a CRC-32).
    let json = Payload::decode(bytes).map_err(&bad)?;
    let row: Row = serde_json::from_slice(&json).map_err(|e| bad(e.to_string()))?;
    if row.v != ROW_VERSION {
        return Err(bad(format!("breaker row version {} is not {ROW_VERSION}", row.v)));
    }
    Ok(BreakerRecord {
        tool: tool.to_string(),
        state: row.state,
        failures: row.failures,
        open_until: row.open_until,
        probe: row.probe,
        updated_at: row.updated_at,
    })
}

fn encode(r: &BreakerRecord) -> Vec<u8> {
    let row = Row {
        v: ROW_VERSION,
        state: r.state,
        failures: r.failures,
        open_until: r.open_until,
        probe: r.probe.clone(),
        updated_at: r.updated_at,
    };
    // A struct of strings and numbers always serialises.
    Payload::encode(&serde_json::to_vec(&row).unwrap_or_default())
}

pub(crate) fn read(
    path: &Path,
    txn: &redb::ReadTransaction,
    tool: &str,
) -> Result<Option<BreakerRecord>, StorageError> {
    let table = txn.open_table(tables::BREAKERS).ctx(path)?;
    match table.get(tool).ctx(path)? {
        Some(v) => Ok(Some(decode(path, tool, v.value())?)),
        None => Ok(None),
    }
}

pub(crate) fn stage_update(tx: &Tx<'_>, update: &BreakerUpdate) -> Result<BreakerAnswer, BreakerError> {
    let mut table = tx.txn.open_table(tables::BREAKERS).ctx(tx.path)?;
    let current = match table.get(update.tool.as_str()).ctx(tx.path)? {
        Some(v) => Some(decode(tx.path, &update.tool, v.value())?),
        None => None,
    };
    let answer = step(current, update);
    let entry = audit_entry(update, &answer);
    tx.wrote();
    table.insert(update.tool.as_str(), encode(&answer.record).as_slice()).ctx(tx.path)?;
    drop(table);
    if let Some(entry) = entry {
        stage_append_audit(tx, &update.thread, &entry)?;
    }
    Ok(answer)
}
