//! Personal data on the command line and in the inbox: the fields a thread's graph
//! description marks personal show as `•••` to a user without `see_personal_data`; a user with
//! it sees them, and that read is recorded in the thread's audit log. The fields it marks
//! credential show as `•••` to everyone.

use agentflow::Store;
use agentflow::access::Access;
use agentflow::access::personal::{
    AuditMask, credential_in_description, holds_personal, mask_fields, personal_in_description, read_entry,
    sees_personal_data,
};
use agentflow_store::{AuditEntry, ThreadRecord};
use serde_json::Value;

use crate::Failure;

/// Shows `states` (JSON states, updates or deltas of thread `thread`) to `access`'s actor
/// through `surface` (`cli`, `inbox`): masks the credential fields `description` names for
/// everyone, and the personal ones when the actor may not see them, else records one
/// `personal_data.read` entry when any holds one.
pub fn show(
    store: &dyn Store,
    access: &Access,
    surface: &str,
    thread: &str,
    description: Option<&Value>,
    states: &mut [&mut Value],
) -> Result<(), Failure> {
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
    let entry = read_entry(crate::out::now_ms(), &access.actor().id, surface, &personal);
    store.append_audit(thread, entry).map_err(|e| {
        Failure::store(format!(
            "thread `{thread}` holds personal data and its read could not be recorded in the audit log, \
             so it is not shown: {e}"
        ))
    })?;
    Ok(())
}

/// Masks the values the audit entries of thread `record` carry of its state (state updates,
/// answers) for `access`'s actor, as [`show`] masks a state (see [`AuditMask`]); showing
/// personal fields unmasked is recorded as one `personal_data.read` entry.
pub fn audit(
    store: &dyn Store,
    access: &Access,
    record: &ThreadRecord,
    entries: &mut [AuditEntry],
) -> Result<(), Failure> {
    let Some(description) = crate::fold::description(store, record)? else { return Ok(()) };
    let (personal, credential) = (personal_in_description(&description), credential_in_description(&description));
    if personal.is_empty() && credential.is_empty() {
        return Ok(());
    }
    let personal_names: Vec<&str> = personal.iter().map(String::as_str).collect();
    let credential_names: Vec<&str> = credential.iter().map(String::as_str).collect();
    let sees = sees_personal_data(access, Some(&record.id));
    let mask = AuditMask::new(&personal_names, &credential_names, sees, agentflow::approval::ANSWER_KIND);
    if !mask.apply(entries) {
        return Ok(());
    }
    let entry = read_entry(crate::out::now_ms(), &access.actor().id, "cli audit", &personal);
    store.append_audit(&record.id, entry).map_err(|e| {
        Failure::store(format!(
            "thread `{}` holds personal data and its read could not be recorded in the audit log, \
             so it is not shown: {e}",
            record.id
        ))
    })?;
    Ok(())
}

/// An export is a backup and is never masked: exporting thread `thread` (and its subgraph
/// children) when a graph of theirs marks personal fields needs `see_personal_data`, and is
/// recorded in each such thread's audit log.
pub fn export(store: &dyn Store, access: &Access, thread: &str) -> Result<(), Failure> {
    let threads = store.scan_threads().map_err(Failure::store)?.items;
    let mut ids = vec![thread.to_string()];
    ids.extend(agentflow_store::descendants(&threads, thread).into_iter().map(|t| t.id.clone()));
    let mut marked = Vec::new();
    for id in ids {
        let Some(record) = store.thread(&id).map_err(Failure::store)? else { continue };
        let personal = crate::fold::description(store, &record)?.map(|d| personal_in_description(&d));
        if let Some(personal) = personal.filter(|p| !p.is_empty()) {
            if !sees_personal_data(access, Some(&id)) {
                return Err(Failure::not_found(format!(
                    "thread `{id}` holds personal data (fields {}) and `{}` may not see personal data: \
                     an export is a backup and is never masked, so it needs the `see_personal_data` permission",
                    personal.join(", "),
                    access.actor().id
                )));
            }
            marked.push((id, personal));
        }
    }
    for (id, personal) in marked {
        let entry = read_entry(crate::out::now_ms(), &access.actor().id, "cli export", &personal);
        store.append_audit(&id, entry).map_err(|e| {
            Failure::store(format!(
                "thread `{id}` holds personal data and its export could not be recorded in the audit log, \
                 so nothing was exported: {e}"
            ))
        })?;
    }
    Ok(())
}
