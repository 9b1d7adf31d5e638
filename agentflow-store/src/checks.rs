//! The depth checks every backend runs before it writes: JSON nested deeper than the store
//! reads back is refused with a typed error, never stored.

use crate::codec::{MAX_DOCUMENT_DEPTH, MAX_JSON_DEPTH};
use crate::error::{ApprovalError, AuditError, CommitError, JsonTooDeep};
use crate::record::{NewAuditEntry, StepCommit};

/// Refuses an approval's `conditions` nested deeper than [`MAX_JSON_DEPTH`].
pub(crate) fn check_conditions(id: &str, conditions: Option<&serde_json::Value>) -> Result<(), ApprovalError> {
    match conditions {
        Some(c) => JsonTooDeep::check(c, MAX_JSON_DEPTH, "conditions")
            .map_err(|source| ApprovalError::TooDeep { id: id.to_string(), source }),
        None => Ok(()),
    }
}

/// Refuses an entry whose detail nests deeper than the store reads back
/// ([`MAX_DOCUMENT_DEPTH`]): every backend checks before it writes a standalone entry.
pub(crate) fn check_detail(thread: &str, entry: &NewAuditEntry) -> Result<(), AuditError> {
    JsonTooDeep::check(&entry.detail, MAX_DOCUMENT_DEPTH, "detail").map_err(|source| AuditError::TooDeep {
        thread: thread.to_string(),
        kind: entry.kind.clone(),
        source,
    })
}

/// Refuses a commit with JSON nested deeper than the store reads back: the checkpoint's
/// `metadata.extra` and the audit details ([`MAX_DOCUMENT_DEPTH`],
/// [`CommitError::TooDeep`]), the conditions of the new approvals and of the transitions
/// ([`MAX_JSON_DEPTH`], [`ApprovalError::TooDeep`]), and events the log cannot keep
/// ([`CommitError::Invalid`]). Every backend checks this before it writes any part of the
/// commit.
pub(crate) fn check_depths(c: &StepCommit) -> Result<(), CommitError> {
    let too_deep = |source| CommitError::TooDeep { thread: c.thread.id.clone(), source };
    if let Some(cp) = &c.checkpoint {
        JsonTooDeep::check(&cp.metadata.extra, MAX_DOCUMENT_DEPTH, "metadata.extra").map_err(too_deep)?;
    }
    for entry in &c.audit {
        JsonTooDeep::check(&entry.detail, MAX_DOCUMENT_DEPTH, "detail").map_err(too_deep)?;
    }
    for approval in &c.new_approvals {
        check_conditions(&approval.id, approval.conditions.as_ref())?;
    }
    for t in &c.approval_transitions {
        check_conditions(&t.id, t.patch.conditions.as_ref())?;
    }
    check_events(c)
}

/// Refuses a commit whose events the log cannot number or keep: more than `u32::MAX` of them
/// (each has a `u32` place), or a kind with a NUL byte (which PostgreSQL `text` cannot hold).
fn check_events(c: &StepCommit) -> Result<(), CommitError> {
    let invalid = |reason: String| CommitError::Invalid { thread: c.thread.id.clone(), reason };
    if u32::try_from(c.events.len()).is_err() {
        return Err(invalid(format!("a commit carries at most {} events; split them over commits", u32::MAX)));
    }
    if let Some(at) = c.events.iter().position(|e| e.kind.contains('\0')) {
        return Err(invalid(format!("the kind of event {at} contains a NUL byte, which a store cannot keep as text")));
    }
    Ok(())
}
