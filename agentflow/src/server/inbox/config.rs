//! What an inbox is set up with: its users and sessions, who may decide which risk class,
//! the access policy, its cookies, who may answer questions, when a thread counts as stuck,
//! and the Prometheus recorder its `/metrics` renders.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

use crate::access::{AccessPolicy, AllowAll};
use crate::approval::RoleAuthorizer;
use crate::server::auth::Auth;
use crate::server::error::ServerError;
use crate::tool::Risk;

/// How an inbox is set up (see [`router`](super::router)).
///
/// ```
/// # fn main() -> Result<(), agentflow::server::ServerError> {
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// use agentflow::serve_limits::ServeLimits;
/// use agentflow::server::auth::Auth;
/// use agentflow::server::inbox::InboxConfig;
/// use agentflow::server::users::Users;
///
/// # let dir = std::env::temp_dir().join(format!("agentflow-inbox-config-doc-{}", std::process::id()));
/// # std::fs::create_dir_all(&dir).unwrap();
/// # let path = dir.join("users.json");
/// # std::fs::write(&path, r#"{"users": [{"name": "alice", "token": "t1"}]}"#).unwrap();
/// let users = Arc::new(Users::load(&path)?);
/// let auth = Auth::new(users, Duration::from_secs(12 * 3600), &ServeLimits::default()).for_port(8700);
/// let config = InboxConfig::new(Arc::new(auth))
///     .answer_role("operator")
///     .stuck_after(Duration::from_secs(3600), Duration::from_secs(60));
/// # drop(config);
/// # Ok(())
/// # }
/// ```
#[non_exhaustive]
pub struct InboxConfig {
    pub(crate) auth: Arc<Auth>,
    pub(crate) authorizer: RoleAuthorizer,
    pub(crate) access: Arc<dyn AccessPolicy>,
    pub(crate) secure_cookies: bool,
    pub(crate) answer_role: Option<String>,
    pub(crate) stuck_waiting: Duration,
    pub(crate) stuck_overdue: Duration,
    pub(crate) metrics: Option<PrometheusHandle>,
}

impl std::fmt::Debug for InboxConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InboxConfig")
            .field("auth", &self.auth)
            .field("secure_cookies", &self.secure_cookies)
            .field("answer_role", &self.answer_role)
            .field("stuck_waiting", &self.stuck_waiting)
            .field("stuck_overdue", &self.stuck_overdue)
            .finish_non_exhaustive()
    }
}

/// The authorizer of an inbox (or server) not given one: each risk class is decided by the role
/// named like it (`irreversible` by `irreversible`), one approver each.
pub(crate) fn by_risk_name() -> RoleAuthorizer {
    [Risk::Read, Risk::Reversible, Risk::External, Risk::Irreversible]
        .into_iter()
        .fold(RoleAuthorizer::new(), |auth, risk| auth.role_for(risk, risk.to_string()))
}

/// The role answering a question needs, as set: none (any logged-in user may answer) for an
/// empty one.
pub(crate) fn answer_role_of(role: String) -> Option<String> {
    (!role.trim().is_empty()).then_some(role)
}

impl InboxConfig {
    /// An inbox whose users log in through `auth` (share the same `Auth` with the JSON API,
    /// so a page's session works there too). Until said otherwise: each risk class is decided
    /// by the role named like it, every operation is allowed ([`AllowAll`]), cookies are not
    /// `Secure`, any logged-in user may answer a question, a thread waiting on a person for an
    /// hour or a timer a minute past its wake time counts as stuck, and `/metrics` renders
    /// the process's Prometheus recorder (installed once for the process on first use).
    pub fn new(auth: Arc<Auth>) -> Self {
        InboxConfig {
            auth,
            authorizer: by_risk_name(),
            access: Arc::new(AllowAll),
            secure_cookies: false,
            answer_role: None,
            stuck_waiting: Duration::from_secs(3600),
            stuck_overdue: Duration::from_secs(60),
            metrics: None,
        }
    }

    /// Who may decide which risk class, and whether irreversible calls need two approvers.
    #[must_use]
    pub fn authorizer(mut self, authorizer: RoleAuthorizer) -> Self {
        self.authorizer = authorizer;
        self
    }

    /// The access policy every page and form is checked with, for the logged-in user with the
    /// roles and tenants the users file gives them.
    #[must_use]
    pub fn access(mut self, policy: Arc<dyn AccessPolicy>) -> Self {
        self.access = policy;
        self
    }

    /// Marks the cookies `Secure`, so browsers send them over HTTPS only: for an inbox a TLS
    /// proxy serves (with plain HTTP, logins would not stick).
    #[must_use]
    pub fn secure_cookies(mut self, secure: bool) -> Self {
        self.secure_cookies = secure;
        self
    }

    /// The role a user needs to answer a thread's question, as deciding an approval needs one
    /// (an empty role: any logged-in user may answer).
    #[must_use]
    pub fn answer_role(mut self, role: impl Into<String>) -> Self {
        self.answer_role = answer_role_of(role.into());
        self
    }

    /// When a thread counts as stuck: waiting on a person for `waiting` or longer, or with a
    /// timer more than `overdue` past its wake time.
    #[must_use]
    pub fn stuck_after(mut self, waiting: Duration, overdue: Duration) -> Self {
        self.stuck_waiting = waiting;
        self.stuck_overdue = overdue;
        self
    }

    /// The Prometheus recorder `/metrics` renders, for a program that installed its own;
    /// without it the inbox installs one for the process, once.
    #[must_use]
    pub fn metrics(mut self, handle: PrometheusHandle) -> Self {
        self.metrics = Some(handle);
        self
    }
}

/// The process's Prometheus recorder, installed on first use and shared by every inbox after.
pub(crate) fn process_recorder() -> Result<PrometheusHandle, ServerError> {
    static RECORDER: OnceLock<Result<PrometheusHandle, String>> = OnceLock::new();
    RECORDER.get_or_init(|| PrometheusBuilder::new().install_recorder().map_err(|e| e.to_string())).clone().map_err(
        |e| {
            ServerError::Config(format!(
                "cannot install the Prometheus recorder the inbox's /metrics renders: {e}; a program with its own \
                 Prometheus recorder gives its handle to the inbox (`InboxConfig::metrics`)"
            ))
        },
    )
}
