//! A value serialised as a document the store keeps, refused as a [`PersistError`] naming it.

use serde::Serialize;

use super::error::PersistError;
use crate::core::encode::{last_word, to_bytes};

/// Serialises `value` as the stored document `what` ("the state", "an
/// update"); a refusal names the place from the last word of `what`
/// (`state.prices[3]`).
pub(crate) fn document<T: Serialize + ?Sized>(value: &T, what: &'static str) -> Result<Vec<u8>, PersistError> {
    to_bytes(value, last_word(what)).map_err(|source| PersistError::Value { what, source })
}
