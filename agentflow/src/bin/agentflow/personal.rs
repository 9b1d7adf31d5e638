//! Personal data on the command line: an audit log's entries masked as a state is (see the
//! library's [`agentflow::server::inspect::personal::show`]), and an export, which is never masked,
//! allowed only to a user who may see personal data, and recorded.

use agentflow::Store;
use agentflow::access::Access;
use agentflow::access::personal::{
    AuditMask, credential_in_description, personal_in_description, read_entry, sees_personal_data,
};
use agentflow::server::inspect::description::description;
use agentflow_store::{AuditEntry, ThreadRecord};

use crate::Failure;

/// Masks the values the audit entries of thread `record` carry of its state (state updates,
/// answers) for `access`'s actor, as [`show`](agentflow::server::inspect::personal::show) masks a state (see [`AuditMask`]); showing
/// personal fields unmasked is recorded as one `personal_data.read` entry.
pub fn audit(
    store: &dyn Store,
    access: &Access,
    record: &ThreadRecord,
    entries: &mut [AuditEntry],
) -> Result<(), Failure> {
    let Some(description) = description(store, record)? else { return Ok(()) };
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
        let personal = description(store, &record)?.map(|d| personal_in_description(&d));
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
