//! Who calls the API, and what they may do.
//!
//! A caller is found, in order, by:
//! 1. a [`PeerUser`] request extension: the person the owner's Unix socket mapped the
//!    connection's OS user to (trusted as it is: the kernel says who connected; no CSRF);
//! 2. an `Authorization: Bearer TOKEN` header with a users file token (no CSRF: browsers do not
//!    send it by themselves); a header with an unknown token is refused, not passed over. An
//!    `Authorization` header of another scheme (`Basic`, from a proxy in front) is passed over;
//! 3. the inbox's session cookie: then every request but `GET` and `HEAD` must carry the
//!    session's CSRF token in an `x-csrf-token` header, and no cross-site `Origin`.
//!
//! None of them answers 401. Wrong bearer tokens are counted per client address in the inbox's
//! login limiter ([`ServeLimits::login_attempts`](crate::serve_limits::ServeLimits::login_attempts)),
//! so guesses at the login and at the API count together: past the limit every bearer request
//! from the address answers 429 `too_many_attempts` with `Retry-After`, without its token being
//! checked (a right one included), until an attempt comes back. The client address is the one
//! the server was served with (`ConnectInfo<SocketAddr>`); a router served without it counts
//! every client under one key, as the login does.
//!
//! Each route then checks its operation for the caller's actor (name, roles and tenants from the
//! users file) with the server's access policy: a refused operation answers 403 with the reason,
//! a thread of a tenant the caller does not act for 404, exactly as a missing one.

use std::net::SocketAddr;
use std::sync::Arc;

use agentflow_store::ThreadRecord;
use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{HeaderValue, Method, StatusCode, header};

use super::problem::{Problem, blocking};
use super::state::ApiState;
use crate::access::{Access, Actor, Operation};
use crate::server::auth::cross_site;
use crate::server::users::User;

/// The header a session's CSRF token comes in on a state-changing request.
pub const CSRF_HEADER: &str = "x-csrf-token";

/// The person a request comes from, put in the request's extensions by the server's owner
/// socket: the person the users file maps the connecting OS user to (`"os_user"`). A request
/// with it needs no token, no session and no CSRF token.
#[derive(Debug, Clone)]
pub struct PeerUser(pub Arc<User>);

/// The caller of a route: the actor its checks and audit entries name, with the server's
/// access policy.
#[derive(Debug, Clone)]
pub(crate) struct Caller {
    access: Access,
}

impl Caller {
    /// A caller acting as `actor`, checked by `state`'s policy.
    pub(crate) fn new(state: &ApiState, actor: Actor) -> Self {
        Caller { access: Access::shared(Arc::clone(&state.access), actor) }
    }

    /// Who calls.
    pub(crate) fn actor(&self) -> &Actor {
        self.access.actor()
    }

    /// The caller's access: the server's policy checking the caller.
    pub(crate) fn access(&self) -> &Access {
        &self.access
    }

    /// `Ok` if the policy lets the caller perform `operation` on no one thread (a listing).
    pub(crate) fn allow(&self, operation: Operation) -> Result<(), Problem> {
        Ok(self.access.allow(operation, None)?)
    }

    /// Thread `thread`'s record, if the caller may perform `operation` on it: 404 when it is
    /// missing or of a tenant the caller does not act for, 403 when the policy refuses.
    pub(crate) async fn thread(
        &self,
        state: &Arc<ApiState>,
        operation: Operation,
        thread: &str,
    ) -> Result<ThreadRecord, Problem> {
        let (store, access, id) = (Arc::clone(&state.store), self.access.clone(), thread.to_string());
        blocking(move || {
            let found: Option<ThreadRecord> = access.lookup::<Problem>(store.as_ref(), operation, &id)?;
            found.ok_or_else(|| Problem::no_thread(&id))
        })
        .await
    }
}

/// 401: nobody identified.
fn unauthorized(message: impl Into<String>) -> Problem {
    Problem::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
}

/// The token of an `Authorization: Bearer TOKEN` header (the scheme in any case); `None` for
/// another scheme.
fn bearer(value: &HeaderValue) -> Option<&str> {
    let value = value.to_str().ok()?.trim();
    let (scheme, token) = value.split_once(' ').unwrap_or((value, ""));
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// The key failed attempts from the request's client are counted under: its IP address, or
/// one key for every client of a router served without it (as the inbox's login counts them).
fn client_key(parts: &Parts) -> String {
    parts.extensions.get::<ConnectInfo<SocketAddr>>().map_or_else(|| "unknown".to_string(), |c| c.0.ip().to_string())
}

/// The caller of a request (see the module's docs), or why there is none.
pub(crate) fn identify(state: &ApiState, parts: &Parts) -> Result<Caller, Problem> {
    if let Some(PeerUser(user)) = parts.extensions.get::<PeerUser>() {
        return Ok(Caller::new(state, user.actor()));
    }
    if let Some(token) = parts.headers.get(header::AUTHORIZATION).and_then(bearer) {
        let from = client_key(parts);
        state.attempts.check(&[&from]).map_err(Problem::too_many)?;
        let Some(user) = state.users.by_token(token) else {
            state.attempts.fail(&[&from]);
            return Err(unauthorized(
                "unknown token: no user of the server's users file has it; check the token you were given",
            ));
        };
        return Ok(Caller::new(state, user.actor()));
    }
    let session = state.auth.as_ref().and_then(|auth| auth.session(&parts.headers)).ok_or_else(|| {
        unauthorized(
            "who is calling is not known: send `Authorization: Bearer TOKEN` with a token of the server's users file \
             (or log in to the inbox at /login and send its session cookie with the `x-csrf-token` header)",
        )
    })?;
    if !matches!(parts.method, Method::GET | Method::HEAD) {
        let sent = parts.headers.get(CSRF_HEADER).and_then(|v| v.to_str().ok()).unwrap_or("");
        if cross_site(&parts.headers) || !session.csrf_matches(sent) {
            return Err(Problem::new(
                StatusCode::FORBIDDEN,
                "csrf",
                "a request made with the session cookie needs the session's CSRF token in the `x-csrf-token` header \
                 (and no cross-site Origin); nothing was changed. Programs send `Authorization: Bearer TOKEN` instead",
            ));
        }
    }
    Ok(Caller::new(state, session.actor()))
}

impl FromRequestParts<Arc<ApiState>> for Caller {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &Arc<ApiState>) -> Result<Self, Self::Rejection> {
        identify(state, parts)
    }
}
