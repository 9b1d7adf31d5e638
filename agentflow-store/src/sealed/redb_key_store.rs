//! [`RedbKeyStore`]: the data keys in a redb file of their own.

use std::path::{Path, PathBuf};
use std::sync::RwLock;

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use crate::sealed::error::KeyStoreError;
use crate::sealed::key_store::{KeyRecord, KeyStore};

/// Thread id -> encoded [`KeyRecord`].
const DATA_KEYS: TableDefinition<&str, &[u8]> = TableDefinition::new("agentflow_data_keys");

/// A key store in a redb file of its own, kept apart from the data (another disk, another
/// backup schedule: a copy of the data without it does not open). Every write is committed
/// durably; destroying a key compacts the file, so the destroyed key's bytes do not stay in
/// the file's free pages. Keep its backups short-lived: a backup of the key store (with the
/// key-encryption key) opens what a purge destroyed.
#[derive(Debug)]
pub struct RedbKeyStore {
    path: PathBuf,
    db: RwLock<Database>,
}

impl RedbKeyStore {
    /// Opens the key store at `path`, creating it if the file does not exist.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, KeyStoreError> {
        let path = path.as_ref().to_path_buf();
        let db = Database::create(&path).map_err(|e| io(&path, e))?;
        let store = RedbKeyStore { path, db: RwLock::new(db) };
        store.write(|table| {
            let _ = table;
            Ok(())
        })?;
        Ok(store)
    }

    /// The key store's file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn db_read(&self) -> std::sync::RwLockReadGuard<'_, Database> {
        self.db.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Runs `f` in a write transaction, committed durably if it succeeds.
    fn write<T>(
        &self,
        f: impl FnOnce(&mut redb::Table<'_, &'static str, &'static [u8]>) -> Result<T, KeyStoreError>,
    ) -> Result<T, KeyStoreError> {
        let db = self.db_read();
        let txn = db.begin_write().map_err(|e| io(&self.path, e))?;
        let answer = {
            let mut table = txn.open_table(DATA_KEYS).map_err(|e| io(&self.path, e))?;
            f(&mut table)?
        };
        txn.commit().map_err(|e| io(&self.path, e))?;
        Ok(answer)
    }

    fn decode(&self, thread: &str, bytes: &[u8]) -> Result<KeyRecord, KeyStoreError> {
        KeyRecord::decode(bytes).map_err(|detail| KeyStoreError::Damaged {
            path: self.path.clone(),
            thread: thread.to_string(),
            detail,
        })
    }

    fn read_in(
        &self,
        table: &impl ReadableTable<&'static str, &'static [u8]>,
        thread: &str,
    ) -> Result<Option<KeyRecord>, KeyStoreError> {
        match table.get(thread).map_err(|e| io(&self.path, e))? {
            Some(bytes) => self.decode(thread, bytes.value()).map(Some),
            None => Ok(None),
        }
    }

    /// Compacts the file, so a destroyed key's bytes leave its free pages. Skipped (the file
    /// stays as it is) while a read holds the database.
    fn compact(&self) {
        if let Ok(mut db) = self.db.try_write() {
            let _ = db.compact();
        }
    }
}

fn io(path: &Path, e: impl std::fmt::Display) -> KeyStoreError {
    KeyStoreError::Io { path: path.to_path_buf(), detail: e.to_string() }
}

impl KeyStore for RedbKeyStore {
    fn get(&self, thread: &str) -> Result<Option<KeyRecord>, KeyStoreError> {
        let db = self.db_read();
        let txn = db.begin_read().map_err(|e| io(&self.path, e))?;
        let table = txn.open_table(DATA_KEYS).map_err(|e| io(&self.path, e))?;
        self.read_in(&table, thread)
    }

    fn create(&self, thread: &str, record: KeyRecord) -> Result<KeyRecord, KeyStoreError> {
        self.write(|table| match self.read_in(table, thread)? {
            Some(live) if !live.is_destroyed() => Ok(live),
            _ => {
                table.insert(thread, record.encode().as_slice()).map_err(|e| io(&self.path, e))?;
                Ok(record)
            }
        })
    }

    fn replace(&self, thread: &str, expected: &KeyRecord, new: KeyRecord) -> Result<bool, KeyStoreError> {
        self.write(|table| match self.read_in(table, thread)? {
            Some(current) if &current == expected => {
                table.insert(thread, new.encode().as_slice()).map_err(|e| io(&self.path, e))?;
                Ok(true)
            }
            _ => Ok(false),
        })
    }

    fn destroy(&self, thread: &str) -> Result<bool, KeyStoreError> {
        let destroyed = self.write(|table| match self.read_in(table, thread)? {
            Some(current) if !current.is_destroyed() => {
                table.insert(thread, current.destroyed().encode().as_slice()).map_err(|e| io(&self.path, e))?;
                Ok(true)
            }
            _ => Ok(false),
        })?;
        if destroyed {
            self.compact();
        }
        Ok(destroyed)
    }

    fn threads(&self) -> Result<Vec<String>, KeyStoreError> {
        let db = self.db_read();
        let txn = db.begin_read().map_err(|e| io(&self.path, e))?;
        let table = txn.open_table(DATA_KEYS).map_err(|e| io(&self.path, e))?;
        let mut threads = Vec::new();
        for row in table.iter().map_err(|e| io(&self.path, e))? {
            let (k, _) = row.map_err(|e| io(&self.path, e))?;
            threads.push(k.value().to_string());
        }
        Ok(threads)
    }
}
