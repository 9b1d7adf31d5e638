//! What every route of the inbox reads: the store it holds for its lifetime, users and
//! sessions, the authorizer and access policy decisions go through, the metrics renderer and
//! the stuck thresholds; and store calls run off the async threads.

use std::sync::Arc;

use agentflow_store::Store;
use metrics_exporter_prometheus::PrometheusHandle;

use crate::access::AccessPolicy;
use crate::approval::RoleAuthorizer;
use crate::server::auth::Auth;
use crate::server::inspect::InspectError;

/// The inbox's settings and shared state.
pub(crate) struct Inbox {
    /// The store, opened once by the server for its lifetime.
    pub(crate) store: Arc<dyn Store>,
    /// Users and sessions.
    pub(crate) auth: Arc<Auth>,
    /// The authorizer decisions go through.
    pub(crate) authorizer: RoleAuthorizer,
    /// The Prometheus text renderer.
    pub(crate) metrics: PrometheusHandle,
    /// Stuck thresholds (millis): waiting on a person, timer overdue.
    pub(crate) stuck: (u64, u64),
    /// The attributes every cookie gets (`HttpOnly; SameSite=Strict`, and `Secure` when the
    /// inbox is served behind TLS).
    pub(crate) cookie_attrs: &'static str,
    /// The role answering a question needs, if any.
    pub(crate) answer_role: Option<String>,
    /// The access policy every route checks for the logged-in user.
    pub(crate) access: Arc<dyn AccessPolicy>,
}

/// The state every handler gets.
pub(crate) type Shared = Arc<Inbox>;

impl Inbox {
    /// Runs `f` with the store on a blocking thread (store calls are synchronous).
    pub(crate) async fn with<T, F>(&self, f: F) -> Result<T, InspectError>
    where
        T: Send + 'static,
        F: FnOnce(&Arc<dyn Store>) -> Result<T, InspectError> + Send + 'static,
    {
        let store = Arc::clone(&self.store);
        tokio::task::spawn_blocking(move || f(&store))
            .await
            .map_err(|e| InspectError::store(format!("the request's store task failed: {e}")))?
    }
}
