//! An open stream's caller, checked again while the stream is open: a stream may stay open for
//! days, and the caller's right to read the thread may end meanwhile (they log out, their
//! session expires, the access policy stops allowing `read_state`, the thread is purged). Each
//! read of the log first checks what needs no store read (the session, the policy); at least
//! every [`RECHECK`](crate::server::stream::RECHECK) the thread is looked up again as well. A
//! stream whose caller no longer holds ends.
//!
//! A caller identified by a bearer token or by the owner's socket is a user of the users file,
//! which the server reads once: only a session (the inbox's cookie) can end on its own.

use std::sync::Arc;

use agentflow_store::ThreadRecord;
use axum::http::{HeaderMap, header};

use crate::access::{Access, Actor, Operation};
use crate::server::api::problem::Problem;
use crate::server::api::state::ApiState;

/// Who opened a stream, and how, to check again.
pub(crate) struct Authority {
    state: Arc<ApiState>,
    /// The request's cookies when the caller came by session; `None` for a user of the users
    /// file (a bearer token, the owner's socket).
    session: Option<HeaderMap>,
    actor: Actor,
    thread: ThreadRecord,
}

impl Authority {
    /// The caller `actor` of a stream of `thread`, who came with `headers`; `by_file`: they were
    /// identified as a user of the users file (a bearer token, the owner's socket), not by a
    /// session.
    pub(crate) fn new(
        state: Arc<ApiState>,
        actor: Actor,
        headers: &HeaderMap,
        by_file: bool,
        thread: ThreadRecord,
    ) -> Self {
        let session = (!by_file).then(|| {
            let mut cookies = HeaderMap::new();
            for value in headers.get_all(header::COOKIE) {
                cookies.append(header::COOKIE, value.clone());
            }
            cookies
        });
        Authority { state, session, actor, thread }
    }

    /// The caller's access now, if they may still read the thread: their session is live (for
    /// a session) and the policy allows `read_state` on the thread of their tenants. No store
    /// read.
    pub(crate) fn now(&self) -> Option<Access> {
        let actor = match &self.session {
            None => self.actor.clone(),
            Some(cookies) => {
                let session = self.state.auth.as_ref()?.session(cookies)?;
                if session.user != self.actor.id {
                    return None;
                }
                session.actor()
            }
        };
        let access = Access::shared(Arc::clone(&self.state.access), actor);
        (access.sees(&self.thread) && access.allow(Operation::ReadState, Some(&self.thread.id)).is_ok())
            .then_some(access)
    }

    /// [`Authority::now`], and the thread looked up again (still there for the caller).
    /// Blocking.
    pub(crate) fn now_and_thread(&self) -> Option<Access> {
        let access = self.now()?;
        match access.lookup::<Problem>(self.state.store.as_ref(), Operation::ReadState, &self.thread.id) {
            Ok(Some(_)) => Some(access),
            Ok(None) | Err(_) => None,
        }
    }
}

/// Whether `headers` carry a bearer token (`Authorization: Bearer ...`, any case).
pub(crate) fn bears_token(headers: &HeaderMap) -> bool {
    headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).is_some_and(|v| {
        let v = v.trim();
        v.split_once(' ').map_or(v, |(scheme, _)| scheme).eq_ignore_ascii_case("bearer")
    })
}
