//! The approval inbox: web pages over the store the server holds, where people judge and
//! decide approvals, answer threads' questions and see what is stuck.
//!
//! - **Pages** (server-rendered HTML, no external scripts or styles): the inbox (approvals
//!   and interrupts waiting for a person, with everything needed to judge them, and the stuck
//!   threads), the thread list, a thread's timeline, the state at a checkpoint, the audit log.
//! - **Decisions** go through the library's [`ApprovalDesk`](crate::approval::ApprovalDesk)
//!   with the inbox's [`RoleAuthorizer`](crate::approval::RoleAuthorizer)
//!   ([`InboxConfig::authorizer`]), in the logged-in user's name.
//! - **Security**: users and their roles come from the users file
//!   ([`Users`](crate::server::users::Users)); logging in with a token sets an
//!   `HttpOnly; SameSite=Strict` session cookie named for the port (`agentflow_session_8700`;
//!   `Secure` too with [`InboxConfig::secure_cookies`]); every POST checks the session's CSRF
//!   token; GETs change nothing. Served with [`serve_limits`](crate::serve_limits), it holds
//!   under abuse: failed logins are limited per client address (then 429 with `Retry-After`),
//!   a connection that has not sent its request head in time is closed, the connections
//!   served at once are bounded, a request naming another host is refused with 421, a user
//!   holds a bounded number of sessions (a new login ends the oldest), and
//!   [`InboxConfig::answer_role`] makes answering a question need a role as deciding an
//!   approval does.
//! - **Access**: every page and form is checked by the access policy
//!   ([`InboxConfig::access`]) for the logged-in user, with the roles and the `tenants` the
//!   users file gives them: listings need `list` and show only the threads of the user's
//!   tenants, a thread page `read_state`, a checkpoint page and the audit log `read_history`,
//!   decisions `decide`, answers `answer`, and the thread page's controls `resume`, `pause`,
//!   `cancel`, `fork`. A refused operation answers 403 with the reason; a thread of another
//!   tenant answers 404, as a missing one. The inbox starts no thread, updates no state and
//!   compacts nothing.
//! - **Live**: `GET /live` answers a small JSON fingerprint of what waits; the inbox polls it
//!   and reloads when it changes (a decision made from the CLI, the JSON API or another
//!   browser).
//! - **Metrics**: `GET /metrics` is the Prometheus text of every `agentflow_*` metric this
//!   process records, plus [`STUCK_THREADS`] by kind, refreshed by [`InboxHandle::refresh_every`].
//!
//! The server holds the store for its lifetime: the inbox reads and decides through the one
//! store it is given, opened once. The CLI's `agentflow pending`, `approve` and `show` reach a
//! redb file the server holds through the server's Unix socket.

mod acts;
mod checks;
mod config;
mod controls;
mod live;
mod pages;
mod respond;
mod routes;
mod state;
mod timeline;

use std::future::Future;
use std::sync::{Arc, Weak};
use std::time::Duration;

use agentflow_store::Store;
use axum::Router;

pub use config::InboxConfig;
pub(crate) use config::{answer_role_of, by_risk_name};
pub use live::STUCK_THREADS;

use crate::server::error::ServerError;
use crate::server::inspect::InspectError;

/// The shortest period [`InboxHandle::refresh_every`] refreshes at.
const MIN_REFRESH: Duration = Duration::from_millis(100);

/// The inbox's routes over `store` (opened once by the caller and held for the server's
/// lifetime), and a handle to refresh its stuck-thread gauge. Serve the router with
/// [`serve_limits::serve`](crate::serve_limits::serve) (which gives the login's attempt limit
/// each client's address), or merge it into a larger router; spawn
/// [`InboxHandle::refresh_every`] to keep `/metrics`' stuck-thread gauge current.
///
/// Fails only when `/metrics` has no recorder to render: the process has a `metrics` recorder
/// of its own and `config` names no Prometheus handle ([`InboxConfig::metrics`]).
pub fn router(store: Arc<dyn Store>, config: InboxConfig) -> Result<(Router, InboxHandle), ServerError> {
    let metrics = match config.metrics {
        Some(handle) => handle,
        None => config::process_recorder()?,
    };
    live::describe_metrics();
    let cookie_attrs =
        if config.secure_cookies { "HttpOnly; SameSite=Strict; Secure" } else { "HttpOnly; SameSite=Strict" };
    let inbox = Arc::new(state::Inbox {
        store,
        auth: config.auth,
        authorizer: config.authorizer,
        metrics,
        stuck: (millis(config.stuck_waiting), millis(config.stuck_overdue)),
        cookie_attrs,
        answer_role: config.answer_role,
        access: config.access,
    });
    let handle = InboxHandle { inbox: Arc::downgrade(&inbox) };
    Ok((routes::router(inbox), handle))
}

/// A duration in millis, saturating.
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Refreshes an inbox's stuck-thread gauge. It holds the inbox weakly: once the router is
/// dropped (the server stopped), refreshing does nothing and [`InboxHandle::refresh_every`]
/// ends, so the store is not held past the server's life.
#[derive(Clone)]
pub struct InboxHandle {
    inbox: Weak<state::Inbox>,
}

impl std::fmt::Debug for InboxHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InboxHandle").field("live", &(self.inbox.strong_count() > 0)).finish()
    }
}

impl InboxHandle {
    /// Counts the stuck threads by kind now and sets the [`STUCK_THREADS`] gauge (every kind,
    /// zero included), so it holds a value before the first scrape. A store that cannot be
    /// read leaves the gauge as it was, and is the error.
    pub async fn refresh_stuck(&self) -> Result<(), InspectError> {
        match self.inbox.upgrade() {
            Some(inbox) => live::refresh_stuck(&inbox).await,
            None => Ok(()),
        }
    }

    /// Refreshes the gauge every `every` (at least every 100 ms), the first time one period
    /// from now, until the inbox is gone; a refresh that fails is logged as a `tracing`
    /// warning and tried again at the next period. Spawn it on the server's runtime.
    pub fn refresh_every(&self, every: Duration) -> impl Future<Output = ()> + Send + 'static {
        live::refresh_every(self.inbox.clone(), every.max(MIN_REFRESH))
    }
}

#[cfg(test)]
mod tests {
    use agentflow_store::RedbStore;

    use super::*;
    use crate::serve_limits::ServeLimits;
    use crate::server::auth::Auth;
    use crate::server::users::Users;

    fn config(name: &str) -> InboxConfig {
        let path = std::env::temp_dir().join(format!("agentflow-inbox-{name}-{}.json", std::process::id()));
        std::fs::write(&path, r#"{"users": [{"name": "alice", "token": "one"}]}"#).unwrap();
        let users = Arc::new(Users::load(&path).unwrap());
        InboxConfig::new(Arc::new(Auth::new(users, Duration::from_secs(60), &ServeLimits::default())))
    }

    #[tokio::test(start_paused = true)]
    async fn two_inboxes_in_one_process_share_the_recorder_and_let_go_of_the_store_when_dropped() {
        let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().unwrap());
        let (first, first_handle) = router(Arc::clone(&store), config("first")).expect("the first inbox");
        let (second, second_handle) = router(Arc::clone(&store), config("second")).expect("a second inbox");
        first_handle.refresh_stuck().await.expect("the gauge of an empty store");
        assert_eq!(Arc::strong_count(&store), 3, "each inbox holds the store");
        let refreshing = tokio::spawn(first_handle.refresh_every(Duration::ZERO));
        drop((first, second));
        assert_eq!(Arc::strong_count(&store), 1, "a dropped inbox holds the store no longer");
        // The refresh ends once its inbox is gone (time is paused: the ticks come at once).
        refreshing.await.expect("the refresh ended");
        second_handle.refresh_stuck().await.expect("refreshing a gone inbox does nothing");
    }
}
