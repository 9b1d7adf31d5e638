//! Opening the items of a lenient listing of a [`SealedStore`](super::SealedStore): an item
//! whose sealed payload is damaged (or whose key is gone) is skipped, as a row that does not
//! decode is; a key store that cannot be read is an error, not damage.

use crate::error::StorageError;
use crate::sealed::error::{KeyStoreError, SealError};
use crate::store::Listing;

/// Whether `e` says the item itself cannot be opened (its payload or its key record damaged,
/// its key destroyed or wrapped by a key the provider lacks), rather than that the key store or
/// the system failed for now.
pub(crate) fn is_damage(e: &SealError) -> bool {
    matches!(
        e,
        SealError::NoKey { .. }
            | SealError::MissingKek { .. }
            | SealError::Unwrap { .. }
            | SealError::Tampered { .. }
            | SealError::KeyStore(KeyStoreError::Damaged { .. })
    )
}

/// Opens each item of a lenient listing: an item that does not open for damage
/// ([`is_damage`]) joins the skipped ones; another failure (the key store cannot be read) is
/// the error, so that a transient failure never reads as a damaged store.
pub(crate) fn open_listing<T>(
    listing: Listing<T>,
    mut open: impl FnMut(T) -> Result<T, SealError>,
) -> Result<Listing<T>, StorageError> {
    let Listing { items, mut skipped } = listing;
    let mut opened = Vec::with_capacity(items.len());
    for item in items {
        match open(item) {
            Ok(item) => opened.push(item),
            Err(e) if is_damage(&e) => skipped.push(e.into()),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(Listing::new(opened, skipped))
}
