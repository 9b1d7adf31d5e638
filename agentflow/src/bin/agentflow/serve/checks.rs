//! The access check of every route: the logged-in user as an actor (name, roles, tenants),
//! checked by the `--access` policy. A thread of a tenant the user does not act for answers
//! 404, exactly as a missing one; an operation the policy refuses answers 403 with its reason.

use agentflow::Store;
use agentflow::access::{Access, AccessError, Operation};
use agentflow_store::ThreadRecord;
use axum::http::StatusCode;
use axum::response::Response;

use super::Server;
use super::auth::Session;
use super::respond::error_page;
use crate::Failure;

/// The access of the session's user.
pub fn access(server: &Server, s: &Session) -> Access {
    Access::shared(std::sync::Arc::clone(&server.access), s.actor())
}

/// Thread `id` if the user may perform `operation` on it; the refusal otherwise (a thread that
/// is missing and one of another tenant are both [`AccessError::NotVisible`]).
pub fn thread(
    store: &dyn Store,
    access: &Access,
    operation: Operation,
    id: &str,
) -> Result<Result<ThreadRecord, AccessError>, Failure> {
    let not_there = || AccessError::NotVisible { actor: access.actor().id.clone(), thread: id.to_string() };
    let Some(record) = store.thread(id).map_err(Failure::store)? else { return Ok(Err(not_there())) };
    if !access.sees(&record) {
        return Ok(Err(not_there()));
    }
    Ok(access.check(operation, &record).map(|()| record))
}

/// A refusal as a page: 404 for a thread not there for the user (said as a missing one), 403
/// for an operation the policy refuses.
pub fn refused(e: &AccessError, s: &Session) -> Response {
    match e {
        AccessError::NotVisible { thread, .. } => {
            error_page(StatusCode::NOT_FOUND, "Not found", &crate::access::missing(thread).message, Some(s))
        }
        other => error_page(StatusCode::FORBIDDEN, "Not allowed", &format!("{other}."), Some(s)),
    }
}

/// Whether thread `id` is there for the user (one that cannot be read is not).
pub fn sees_id(store: &dyn Store, access: &Access, id: &str) -> bool {
    access.is_open() || store.thread(id).ok().flatten().is_some_and(|t| access.sees(&t))
}
