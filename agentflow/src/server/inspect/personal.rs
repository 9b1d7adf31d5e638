//! Personal data shown to people (the inbox, the `agentflow` CLI): the fields a thread's graph
//! description marks personal show as `•••` to a user without `see_personal_data`; a user with
//! it sees them, and that read is recorded in the thread's audit log. The fields it marks
//! credential show as `•••` to everyone.

use agentflow_store::Store;
use serde_json::Value;

use super::error::InspectError;
use crate::access::Access;
use crate::access::personal::{
    credential_in_description, holds_personal, mask_fields, personal_in_description, read_entry, sees_personal_data,
};
use crate::core::clock::now_ms;

/// Shows `states` (JSON states, updates or deltas of thread `thread`) to `access`'s actor
/// through `surface` (`cli`, `inbox`): masks the credential fields `description` names for
/// everyone, and the personal ones when the actor may not see them, else records one
/// `personal_data.read` entry when any holds one. A read that cannot be recorded is refused
/// (a store failure): nothing personal is shown unrecorded.
pub fn show(
    store: &dyn Store,
    access: &Access,
    surface: &str,
    thread: &str,
    description: Option<&Value>,
    states: &mut [&mut Value],
) -> Result<(), InspectError> {
    let Some(description) = description else { return Ok(()) };
    // Credential fields show as `•••` to everyone: no permission unmasks them.
    let credential = credential_in_description(description);
    for state in states.iter_mut() {
        mask_fields(state, &credential);
    }
    let personal = personal_in_description(description);
    if personal.is_empty() || !states.iter().any(|s| holds_personal(s, &personal)) {
        return Ok(());
    }
    if !sees_personal_data(access, Some(thread)) {
        for state in states.iter_mut() {
            mask_fields(state, &personal);
        }
        return Ok(());
    }
    let entry = read_entry(now_ms(), &access.actor().id, surface, &personal);
    store.append_audit(thread, entry).map_err(|e| {
        InspectError::store(format!(
            "thread `{thread}` holds personal data and its read could not be recorded in the audit log, \
             so it is not shown: {e}"
        ))
    })?;
    Ok(())
}
