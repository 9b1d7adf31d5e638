//! [`Listing`]: what a lenient listing of a [`Store`](crate::Store) returns, the records that
//! decoded and an error for each one that did not.

use crate::error::StorageError;

/// What a `scan_*` listing returns: the records that decoded, and one error for each record that
/// did not, so a damaged record neither hides the others nor goes unnoticed.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Listing<T> {
    /// The records that decoded, in the listing's order.
    pub items: Vec<T>,
    /// The records that did not, each as the [`StorageError::Decode`] naming its table and key.
    pub skipped: Vec<StorageError>,
}

impl<T> Listing<T> {
    /// A listing in which every record decoded.
    pub fn complete(items: Vec<T>) -> Self {
        Listing { items, skipped: Vec::new() }
    }

    /// A listing with skipped records (for `Store` implementations outside this crate).
    pub fn new(items: Vec<T>, skipped: Vec<StorageError>) -> Self {
        Listing { items, skipped }
    }

    /// Whether every record decoded.
    pub fn is_complete(&self) -> bool {
        self.skipped.is_empty()
    }
}
