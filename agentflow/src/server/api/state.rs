//! What every route of the API reads: the store the server holds, the graphs it hosts, the
//! users and the inbox's sessions, the access policy and the authorizer decisions go through.

use std::collections::BTreeMap;
use std::sync::Arc;

use agentflow_store::Store;

use crate::access::{AccessPolicy, Actor};
use crate::approval::RoleAuthorizer;
use crate::serve_limits::AttemptLimiter;
use crate::server::auth::Auth;
use crate::server::hosted::Hosted;
use crate::server::stream::Streams;
use crate::server::users::Users;
use crate::webhook::WebhookConfig;

/// The shared state of the API's routes ([`api_router`](super::api_router)), made by
/// [`Server::start`](crate::server::Server::start).
pub(crate) struct ApiState {
    /// The store, held by the server for its lifetime.
    pub(crate) store: Arc<dyn Store>,
    /// The hosted graphs, by name.
    pub(crate) graphs: BTreeMap<&'static str, Arc<dyn Hosted>>,
    /// Who may call: their tokens, roles, tenants and OS accounts.
    pub(crate) users: Arc<Users>,
    /// The inbox's sessions, when the API is served next to it (a session cookie with its CSRF
    /// token identifies a caller too).
    pub(crate) auth: Option<Arc<Auth>>,
    /// Failed attempts per client address: the inbox's login limiter, shared, so wrong tokens
    /// sent to the API and to the login count together.
    pub(crate) attempts: Arc<AttemptLimiter>,
    /// The access policy every route checks the caller with.
    pub(crate) access: Arc<dyn AccessPolicy>,
    /// Who may decide which approval.
    pub(crate) authorizer: RoleAuthorizer,
    /// The role answering a question needs, if any.
    pub(crate) answer_role: Option<String>,
    /// The server's thread streams: their readers waiting for more, and how many each user holds
    /// open.
    pub(crate) streams: Arc<Streams>,
    /// The webhook URLs a run may name, when the server takes webhooks
    /// ([`Server::webhooks`](crate::server::Server::webhooks)).
    pub(crate) webhooks: Option<WebhookConfig>,
}

impl std::fmt::Debug for ApiState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiState").field("graphs", &self.graphs.keys().collect::<Vec<_>>()).finish_non_exhaustive()
    }
}

impl ApiState {
    /// The hosted graph named `name`.
    pub(crate) fn graph(&self, name: &str) -> Option<&Arc<dyn Hosted>> {
        self.graphs.get(name)
    }

    /// The hosted graph whose fingerprint is `fingerprint`: the graph a thread of this version
    /// of it runs with.
    pub(crate) fn graph_of(&self, fingerprint: &str) -> Option<&Arc<dyn Hosted>> {
        self.graphs.values().find(|g| g.fingerprint() == fingerprint)
    }

    /// Whether `actor` may answer questions by the answer role, if one is set.
    pub(crate) fn may_answer(&self, actor: &Actor) -> Result<(), String> {
        match &self.answer_role {
            Some(role) if !actor.has_role(role) => Err(format!(
                "answering a question needs the role `{role}`, which `{}` does not have; nothing was recorded: ask \
                 someone with that role to answer it",
                actor.id
            )),
            _ => Ok(()),
        }
    }
}
