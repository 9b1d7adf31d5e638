//! A value serialised as a document the store keeps, refused as a [`PersistError`] naming it:
//! when it would not read back as written, or when it holds text that looks like a credential.

use serde::Serialize;

use super::error::PersistError;
use crate::core::encode::{last_word, to_bytes};
use crate::core::state::Field;
use crate::secret::{scan_json_text, scan_value_skipping};

/// The fields of a state allowed to hold credential-like values, and where they sit in a
/// document: at its top (a state, an update) or under a key (`/update` in a pending write).
#[derive(Clone, Copy, Default)]
pub(crate) struct Allowed {
    pub(crate) fields: &'static [Field],
    pub(crate) under: &'static str,
}

impl Allowed {
    /// No field is allowed.
    pub(crate) const NONE: Allowed = Allowed { fields: &[], under: "" };

    /// The fields of `S` marked as credentials, at the top of the document.
    pub(crate) fn of<S: crate::core::state::State>() -> Self {
        Allowed { fields: S::FIELDS, under: "" }
    }

    /// The JSON pointers left out of the scan.
    fn pointers(&self) -> Vec<String> {
        self.fields
            .iter()
            .filter(|f| f.credential)
            .map(|f| format!("{}/{}", self.under, f.name.replace('~', "~0").replace('/', "~1")))
            .collect()
    }
}

/// Serialises `value` as the stored document `what` ("the state", "an
/// update"); a refusal names the place from the last word of `what`
/// (`state.prices[3]`).
pub(crate) fn document<T: Serialize + ?Sized>(value: &T, what: &'static str) -> Result<Vec<u8>, PersistError> {
    state_document(value, what, Allowed::NONE)
}

/// [`document`] for a state or update, whose fields in `allowed` may hold credentials.
pub(crate) fn state_document<T: Serialize + ?Sized>(
    value: &T,
    what: &'static str,
    allowed: Allowed,
) -> Result<Vec<u8>, PersistError> {
    let bytes = to_bytes(value, last_word(what)).map_err(|source| PersistError::Value { what, source })?;
    refuse_credentials(&bytes, what, allowed)?;
    Ok(bytes)
}

/// Refuses a serialised document holding a credential-like string outside the `allowed`
/// fields. The fast pass reads the bytes once; only when it finds something is the document
/// parsed again to name the place exactly.
pub(crate) fn refuse_credentials(bytes: &[u8], what: &'static str, allowed: Allowed) -> Result<(), PersistError> {
    if !scan_json_text(bytes) {
        return Ok(());
    }
    // Bytes just written by serde_json parse back; if not, the scan has nothing more to say.
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(bytes) else {
        return Ok(());
    };
    refuse_credentials_in(&value, what, allowed)
}

/// [`refuse_credentials`] for a document whose parts at the JSON pointers `skip` may hold
/// credentials (fields known only by name, from a stored graph description). Text that does
/// not parse as JSON is refused when the fast pass finds anything in it.
pub(crate) fn refuse_credentials_skipping(
    bytes: &[u8],
    what: &'static str,
    skip: &[String],
) -> Result<(), PersistError> {
    if !scan_json_text(bytes) {
        return Ok(());
    }
    let hit = match serde_json::from_slice::<serde_json::Value>(bytes) {
        Ok(value) => scan_value_skipping(&value, skip).map(|hit| (hit.pointer, hit.kind)),
        Err(_) => std::str::from_utf8(bytes).ok().and_then(crate::secret::scan_str).map(|kind| (String::new(), kind)),
    };
    match hit {
        Some((pointer, kind)) => Err(PersistError::Credential { what, pointer, kind }),
        None => Ok(()),
    }
}

/// [`refuse_credentials`] for a value already in JSON form.
pub(crate) fn refuse_credentials_in(
    value: &serde_json::Value,
    what: &'static str,
    allowed: Allowed,
) -> Result<(), PersistError> {
    match scan_value_skipping(value, &allowed.pointers()) {
        Some(hit) => Err(PersistError::Credential { what, pointer: hit.pointer, kind: hit.kind }),
        None => Ok(()),
    }
}

/// Refuses a state with fields marked as credentials on a store that keeps payloads in clear.
pub(crate) fn check_sealed<S: crate::core::state::State>(
    store: &dyn agentflow_store::Store,
) -> Result<(), PersistError> {
    match S::FIELDS.iter().find(|f| f.credential) {
        Some(field) if !store.seals_payloads() => {
            Err(PersistError::CredentialsUnsealed { state: S::NAME, field: field.name })
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_refusal_never_quotes_a_credential_in_a_key() {
        let keys = [
            "sk-proj-4fT9xQ2mL7vN1cB8zR5kW3yH6jD0sA2eG9uP4iO7tY1rE5wQ",
            "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
            "xoxb-2048123456-4096123456789-AbCdEfGhIjKlMnOpQrStUvWx",
        ];
        for key in keys {
            for value in [json!({"tokens": { key: "user 7" }}), json!({"m": [{ key: { key: 1 }}]})] {
                let err = document(&value, "the state").unwrap_err();
                let message = err.to_string();
                assert!(matches!(err, PersistError::Credential { .. }), "{message}");
                assert!(message.contains("{key}"), "{message}");
                assert!(!message.contains(key), "{message}");
            }
        }
    }
}
