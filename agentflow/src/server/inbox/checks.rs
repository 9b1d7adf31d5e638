//! The access check of every route: the logged-in user as an actor (name, roles, tenants),
//! checked by the inbox's access policy. A thread of a tenant the user does not act for answers
//! 404, exactly as a missing one; an operation the policy refuses answers 403 with its reason.

use agentflow_store::{Store, ThreadRecord};
use axum::http::StatusCode;
use axum::response::Response;

use super::respond::error_page;
use super::state::Inbox;
use crate::access::{Access, AccessError, Operation};
use crate::server::auth::Session;
use crate::server::inspect::InspectError;

/// The access of the session's user.
pub(super) fn access(server: &Inbox, s: &Session) -> Access {
    Access::shared(std::sync::Arc::clone(&server.access), s.actor())
}

/// Thread `id` if the user may perform `operation` on it; the refusal otherwise (a thread that
/// is missing and one of another tenant are both [`AccessError::NotVisible`]).
pub(super) fn thread(
    store: &dyn Store,
    access: &Access,
    operation: Operation,
    id: &str,
) -> Result<Result<ThreadRecord, AccessError>, InspectError> {
    let not_there = || AccessError::NotVisible { actor: access.actor().id.clone(), thread: id.to_string() };
    let Some(record) = store.thread(id).map_err(InspectError::store)? else { return Ok(Err(not_there())) };
    if !access.sees(&record) {
        return Ok(Err(not_there()));
    }
    Ok(access.check(operation, &record).map(|()| record))
}

/// A refusal as a page: 404 for a thread not there for the user (said as a missing one), 403
/// for an operation the policy refuses.
pub(super) fn refused(e: &AccessError, s: &Session) -> Response {
    match e {
        AccessError::NotVisible { thread, .. } => {
            error_page(StatusCode::NOT_FOUND, "Not found", &InspectError::missing_thread(thread).to_string(), Some(s))
        }
        other => error_page(StatusCode::FORBIDDEN, "Not allowed", &format!("{other}."), Some(s)),
    }
}

/// Whether thread `id` is there for the user (one that cannot be read is not).
pub(super) fn sees_id(store: &dyn Store, access: &Access, id: &str) -> bool {
    access.is_open() || store.thread(id).ok().flatten().is_some_and(|t| access.sees(&t))
}
