//! How redb failures become the crate's typed [`StorageError`], naming the store's path.

use std::path::Path;

use crate::error::StorageError;

/// Maps any redb error to a [`StorageError`] naming the store's path.
pub(crate) trait WithPath<T> {
    fn ctx(self, path: &Path) -> Result<T, StorageError>;
}

impl<T, E: Into<redb::Error>> WithPath<T> for Result<T, E> {
    fn ctx(self, path: &Path) -> Result<T, StorageError> {
        self.map_err(|e| storage_error(path, e.into()))
    }
}

pub(crate) fn storage_error(path: &Path, err: redb::Error) -> StorageError {
    let path = path.to_path_buf();
    match err {
        redb::Error::Corrupted(detail) => StorageError::Corrupted { path, detail },
        redb::Error::Io(e) => StorageError::Io { path, kind: e.kind(), detail: e.to_string() },
        e @ (redb::Error::DatabaseClosed | redb::Error::PreviousIo) => {
            StorageError::Closed { path, detail: e.to_string() }
        }
        e @ (redb::Error::TableTypeMismatch { .. }
        | redb::Error::TableIsMultimap(_)
        | redb::Error::TableIsNotMultimap(_)
        | redb::Error::TypeDefinitionChanged { .. }
        | redb::Error::TableDoesNotExist(_)) => {
            StorageError::Corrupted { path, detail: format!("unexpected table layout: {e}") }
        }
        e => StorageError::Backend { path, detail: e.to_string() },
    }
}
