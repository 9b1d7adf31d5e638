//! agentflow as a server: the graphs hosted in one process, threads and runs over HTTP, the
//! approval inbox next to them, and the owner's socket the `agentflow` CLI reaches.
//!
//! A [`Server`] is built in the program that has the graphs' types: each graph's
//! [`App`] (with the store) and its dependencies, the users file (who may log in and call, with
//! their roles and tenants), the access policy, the authorizer and the serving limits. Started, it
//! runs, in this one process:
//!
//! - a [`Worker`](crate::Worker) and a timer [`Scheduler`](crate::timer::Scheduler) for each
//!   graph: every run goes through the run queue, so a run started over HTTP, a decision or an
//!   answer lets the worker go on by itself;
//! - the JSON API under `/api` and its OpenAPI document at `/openapi.json` ([`api`]), with each
//!   thread's runs as a stream of server-sent events in the AG-UI vocabulary ([`stream`]), read
//!   from the thread's event log (each hosted app's [`App::event_log`] is turned on);
//! - the approval inbox's pages ([`inbox`]), which share the API's users and sessions, and show
//!   threads as [`inspect`] reads them from the store;
//! - for a redb store, the owner's Unix socket beside the file, which the `agentflow`
//!   command-line tool reaches (`agentflow pending`, `approve`, `show`) while the server holds the
//!   file.
//!
//! ```no_run
//! use std::sync::Arc;
//! use agentflow::prelude::*;
//! use agentflow::{RedbStore, Store};
//! use agentflow::server::Server;
//! # use serde::{Deserialize, Serialize};
//! # #[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
//! # struct Count { #[reduce(add)] n: u32 }
//! # #[graph(state = Count, start = bump)]
//! # mod counter {
//! #     use super::*;
//! #     #[node(goto = [END])]
//! #     async fn bump(_c: &Count) -> Step<Count> { goto!(END, Count::update().n(1)) }
//! # }
//! # async fn serve() -> Result<(), Box<dyn std::error::Error>> {
//! let store: Arc<dyn Store> = Arc::new(RedbStore::open("runs.redb")?);
//! let app = counter::graph().app().store(Arc::clone(&store));
//! Server::new()
//!     .users_file("users.json")?
//!     .app(app, ())
//!     .serve("127.0.0.1:8700".parse()?) // until Ctrl-C
//!     .await?;
//! # Ok(())
//! # }
//! # fn main() {}
//! ```
//!
//! Or mounted in a service of your own: [`Server::start`] gives a [`RunningServer`] whose
//! [`router`](RunningServer::router) is an axum `Router`; [`RunningServer::shutdown`] stops it.
//!
//! **One process owns a redb file.** A [`RedbStore`](crate::RedbStore) file is open in one
//! process at a time: the server holds it for its lifetime and every app it hosts uses that one
//! store (an app with another store is refused when it is added). Another program that opens
//! the file while the server runs is told which server holds it; the `agentflow` tool goes
//! through the server's socket instead. On PostgreSQL any number of servers and workers share
//! the store.

pub mod api;
pub mod auth;
mod error;
mod hosted;
pub mod inbox;
pub mod inspect;
mod owner;
mod peer;
mod running;
mod socket;
pub mod stream;
pub mod users;

/// What a receiver of the server's webhooks checks: [`webhook::verify`](crate::webhook::verify).
pub use crate::webhook::verify as verify_webhook;
pub use error::ServerError;
pub use running::RunningServer;
pub use socket::PERSON_HEADER;

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use agentflow_store::Store;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::access::{AccessPolicy, AllowAll};
use crate::app::App;
use crate::approval::RoleAuthorizer;
use crate::core::state::State;
use crate::schedule::OwnerLookup;
use crate::serve_limits::ServeLimits;
use crate::webhook::{WebhookConfig, WebhookDispatcher};
use api::{ApiState, api_router};
use auth::Auth;
use hosted::{Hosted, HostedApp};
use inbox::{InboxConfig, answer_role_of, by_risk_name};
use stream::Streams;
use users::{User, Users};

/// How many runs of each graph a server runs at once, unless [`Server::concurrency`] says
/// otherwise.
pub const DEFAULT_CONCURRENCY: usize = 8;

/// How often the inbox's stuck-thread gauge is refreshed, unless [`Server::stuck_after`] says
/// otherwise.
const STUCK_EVERY: Duration = Duration::from_secs(30);

/// The graphs of one store served over HTTP: the builder of a server (see the [module](self)).
///
/// ```no_run
/// # use std::sync::Arc;
/// # use agentflow::access::{Operation, RoleAccess};
/// # use agentflow::approval::RoleAuthorizer;
/// # use agentflow::serve_limits::ServeLimits;
/// # use agentflow::server::Server;
/// # use agentflow::tool::Risk;
/// # async fn run<S: agentflow::State>(app: agentflow::App<S>) -> Result<(), Box<dyn std::error::Error>> {
/// let running = Server::new()
///     .users_file("users.json")?
///     .access(RoleAccess::new().allow(Operation::List, "viewer"))
///     .authorizer(RoleAuthorizer::new().role_for(Risk::Irreversible, "refunds"))
///     .limits(ServeLimits::default())
///     .app(app, ())
///     .listen("127.0.0.1:0".parse()?)
///     .await?;
/// println!("http://{}/", running.local_addr().unwrap());
/// running.serve(async { let _ = tokio::signal::ctrl_c().await; }).await?;
/// # Ok(())
/// # }
/// ```
pub struct Server {
    store: Option<Arc<dyn Store>>,
    graphs: Vec<Arc<dyn Hosted>>,
    users: Option<Arc<Users>>,
    access: Arc<dyn AccessPolicy>,
    authorizer: Option<RoleAuthorizer>,
    limits: ServeLimits,
    concurrency: usize,
    session_ttl: Duration,
    answer_role: Option<String>,
    secure_cookies: bool,
    /// When a thread counts as stuck (waiting on a person, a timer overdue), and how often the
    /// inbox's gauge of them is refreshed; `None`: the inbox's defaults.
    stuck: Option<(Duration, Duration, Duration)>,
    inbox: bool,
    owner_socket: bool,
    /// The completion webhooks the server takes and sends; `None`: none.
    webhooks: Option<WebhookConfig>,
    /// The first setting refused, answered by [`Server::start`].
    refused: Option<ServerError>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("graphs", &self.graphs.iter().map(|g| g.name()).collect::<Vec<_>>())
            .field("concurrency", &self.concurrency)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl Default for Server {
    fn default() -> Self {
        Server::new()
    }
}

/// Whether two handles are one store.
fn same_store(a: &Arc<dyn Store>, b: &Arc<dyn Store>) -> bool {
    std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b))
}

impl Server {
    /// A server with no graph, no store and no users yet. Until said otherwise: every operation
    /// is allowed to every user ([`AllowAll`]; give a [`RoleAccess`](crate::access::RoleAccess)),
    /// each risk class is decided by the role named like it, [`ServeLimits::default`], 8 runs of
    /// each graph at once, sessions of 12 hours, cookies not `Secure`, the inbox served, and the
    /// owner's socket served for a redb store.
    pub fn new() -> Self {
        Server {
            store: None,
            graphs: Vec::new(),
            users: None,
            access: Arc::new(AllowAll),
            authorizer: None,
            limits: ServeLimits::default(),
            concurrency: DEFAULT_CONCURRENCY,
            session_ttl: Duration::from_secs(12 * 3600),
            answer_role: None,
            secure_cookies: false,
            stuck: None,
            inbox: true,
            owner_socket: true,
            webhooks: None,
            refused: None,
        }
    }

    /// Reads the users file: who may call the API and log in to the inbox, with their tokens,
    /// roles, tenants and OS accounts (see [`Users`]).
    ///
    /// # Errors
    ///
    /// [`ServerError::Users`]: the file cannot be read or is not a valid users file.
    pub fn users_file(self, path: impl AsRef<Path>) -> Result<Self, ServerError> {
        Ok(self.users(Users::load(path.as_ref())?))
    }

    /// The users who may call the API and log in to the inbox.
    #[must_use]
    pub fn users(mut self, users: Users) -> Self {
        self.users = Some(Arc::new(users));
        self
    }

    /// Checks every route of the API and every page of the inbox with `policy`, for the calling
    /// user with the roles and tenants the users file gives them. The hosted apps' starts are
    /// checked with it too.
    #[must_use]
    pub fn access(self, policy: impl AccessPolicy) -> Self {
        self.access_shared(Arc::new(policy))
    }

    /// [`Server::access`] with a shared policy.
    #[must_use]
    pub fn access_shared(mut self, policy: Arc<dyn AccessPolicy>) -> Self {
        self.access = policy;
        self
    }

    /// Who may decide which risk class of approval, and whether irreversible calls need two
    /// approvers.
    #[must_use]
    pub fn authorizer(mut self, authorizer: RoleAuthorizer) -> Self {
        self.authorizer = Some(authorizer);
        self
    }

    /// The limits the server is served under, and those of logins and sessions.
    #[must_use]
    pub fn limits(mut self, limits: ServeLimits) -> Self {
        self.limits = limits;
        self
    }

    /// How many runs of each graph the server runs at once. 0: the server runs no worker and no
    /// timer scheduler: it serves the API and the streams only, and other processes sharing the
    /// store (PostgreSQL) run the threads it starts.
    #[must_use]
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n;
        self
    }

    /// How long an inbox login lasts (at least 1 s).
    #[must_use]
    pub fn session_ttl(mut self, ttl: Duration) -> Self {
        self.session_ttl = ttl.max(Duration::from_secs(1));
        self
    }

    /// The role a user needs to answer a thread's question (in the inbox and through
    /// `POST /api/threads/{thread}/resume` with a value), as deciding an approval needs one.
    #[must_use]
    pub fn answer_role(mut self, role: impl Into<String>) -> Self {
        self.answer_role = answer_role_of(role.into());
        self
    }

    /// Marks the inbox's cookies `Secure`, for a server a TLS proxy serves.
    #[must_use]
    pub fn secure_cookies(mut self, secure: bool) -> Self {
        self.secure_cookies = secure;
        self
    }

    /// When the inbox counts a thread as stuck: waiting on a person for `waiting` or longer, or
    /// with a timer more than `overdue` past its wake time; its `/metrics` gauge of them is
    /// refreshed every `every` (default: an hour, a minute, every 30 s).
    #[must_use]
    pub fn stuck_after(mut self, waiting: Duration, overdue: Duration, every: Duration) -> Self {
        self.stuck = Some((waiting, overdue, every));
        self
    }

    /// Whether the inbox's pages are served next to the API (default `true`).
    #[must_use]
    pub fn inbox(mut self, serve: bool) -> Self {
        self.inbox = serve;
        self
    }

    /// Whether the server claims its redb file, serving the owner's socket beside it and naming
    /// itself in the file's sidecar (default `true`; nothing to claim on PostgreSQL).
    #[must_use]
    pub fn owner_socket(mut self, serve: bool) -> Self {
        self.owner_socket = serve;
        self
    }

    /// Takes completion webhooks as `config` allows them (default: none; a start naming a
    /// `webhook` is refused, 422 `webhook_not_allowed`): a start or follow-up may name a URL
    /// under one of its prefixes, told when the run first stops. The server runs a
    /// [`WebhookDispatcher`] beside its workers (also with [`Server::concurrency`] 0), which
    /// signs each delivery with the config's secret and tries it again as the config says; see
    /// [`webhook`](crate::webhook). A receiver checks the signature with [`verify_webhook`].
    #[must_use]
    pub fn webhooks(mut self, config: WebhookConfig) -> Self {
        self.webhooks = Some(config);
        self
    }

    /// The store of a server that hosts no graph (the inbox and the API over a store), or the
    /// one its apps are given. Every hosted app's store must be this very store (the same
    /// `Arc`).
    #[must_use]
    pub fn store(mut self, store: Arc<dyn Store>) -> Self {
        self.hold(store, "the store given to `Server::store`");
        self
    }

    /// Hosts `app`'s graph, run with `deps`: the server runs a worker and a timer scheduler for
    /// it, and the API starts its threads by the graph's name. The app's store is the server's:
    /// every app must have the same store (the same `Arc`, opened once), and graph names are
    /// one per server. The app's [`App::event_log`] is turned on: each thread's stream reads it.
    /// A setting refused here is the error of [`Server::start`].
    #[must_use]
    pub fn app<S: State, D: Send + Sync + 'static>(mut self, app: App<S, D>, deps: impl Into<Arc<D>>) -> Self {
        // Every thread the server runs keeps its event log, which its stream reads.
        let app = app.event_log(true);
        let name = app.graph().name();
        match app.backing_store() {
            Some(store) => self.hold(Arc::clone(store), &format!("graph `{name}`'s app")),
            None => self.refuse(format!(
                "graph `{name}`'s app has no store: give it the server's store (`graph.app().store(store)`); a \
                 server runs threads through its store's run queue"
            )),
        }
        if self.graphs.iter().any(|g| g.name() == name) {
            self.refuse(format!(
                "graph `{name}` is hosted twice; a server hosts one app per graph name (runs are queued by it)"
            ));
        }
        self.graphs.push(Arc::new(HostedApp::new(app, deps.into())));
        self
    }

    /// Keeps the first refusal.
    fn refuse(&mut self, message: String) {
        self.refused.get_or_insert(ServerError::Config(message));
    }

    /// Takes `store` as the server's, refusing a second one.
    fn hold(&mut self, store: Arc<dyn Store>, what: &str) {
        match &self.store {
            Some(held) if !same_store(held, &store) => self.refuse(format!(
                "{what} has a store of its own, but a server holds one store for every graph (a redb file is open \
                 in one process at a time): open the store once and give every app, and the server, that same \
                 `Arc` (`app.store(Arc::clone(&store))`)"
            )),
            Some(_) => {}
            None => self.store = Some(store),
        }
    }

    /// Starts the server without an address, to mount its [`router`](RunningServer::router)
    /// in a service of your own: the graphs' workers and schedulers run, the store file is
    /// claimed (see the [module](self)). The inbox's cookies are named for no port.
    ///
    /// # Errors
    ///
    /// [`ServerError::Config`]: no store, no users, a second store, a graph hosted twice;
    /// [`ServerError::Socket`]: the owner's socket or sidecar cannot be set up beside the file.
    pub async fn start(self) -> Result<RunningServer, ServerError> {
        self.launch(None).await
    }

    /// Binds `addr` and starts the server (as [`Server::start`]) on it: serve it with
    /// [`RunningServer::serve`]. Port 0 takes a free port ([`RunningServer::local_addr`] says
    /// which).
    ///
    /// # Errors
    ///
    /// [`ServerError::Bind`], and those of [`Server::start`].
    pub async fn listen(self, addr: SocketAddr) -> Result<RunningServer, ServerError> {
        if let Some(e) = self.refused {
            return Err(e);
        }
        let listener = TcpListener::bind(addr).await.map_err(|source| ServerError::Bind { addr, source })?;
        self.launch(Some(listener)).await
    }

    /// Serves on `addr` until Ctrl-C, then shuts down (see [`RunningServer::shutdown`]).
    ///
    /// # Errors
    ///
    /// Those of [`Server::listen`].
    pub async fn serve(self, addr: SocketAddr) -> Result<(), ServerError> {
        self.serve_with_shutdown(addr, async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
    }

    /// Serves on `addr` until `shutdown` completes, then shuts down.
    ///
    /// # Errors
    ///
    /// Those of [`Server::listen`].
    pub async fn serve_with_shutdown(
        self,
        addr: SocketAddr,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServerError> {
        self.listen(addr).await?.serve(shutdown).await
    }

    async fn launch(self, listener: Option<TcpListener>) -> Result<RunningServer, ServerError> {
        if let Some(e) = self.refused {
            return Err(e);
        }
        let store = self.store.ok_or_else(|| {
            ServerError::Config(
                "the server has no store: host an app with one (`Server::app`) or give it one (`Server::store`)"
                    .to_string(),
            )
        })?;
        let users = self.users.ok_or_else(|| {
            ServerError::Config(
                "the server has no users: give it a users file (`Server::users_file`), whose tokens are how callers \
                 log in"
                    .to_string(),
            )
        })?;
        let local_addr = listener
            .as_ref()
            .map(TcpListener::local_addr)
            .transpose()
            .map_err(|e| ServerError::Config(format!("the bound address cannot be read: {e}")))?;
        let mut auth = Auth::new(Arc::clone(&users), self.session_ttl, &self.limits);
        if let Some(addr) = local_addr {
            // A browser sends a host's cookies to every port of it.
            auth = auth.for_port(addr.port());
        }
        let auth = Arc::new(auth);
        let authorizer = self.authorizer.unwrap_or_else(by_risk_name);
        let graphs: BTreeMap<&'static str, Arc<dyn Hosted>> =
            self.graphs.iter().map(|g| (g.name(), Arc::clone(g))).collect();
        // Wrong tokens at the inbox's login and at the API count together, per client address.
        let attempts = Arc::clone(auth.attempts());
        // The streams of the API and of the owner's socket: one registry, one count per user.
        let streams = Arc::new(Streams::new(self.limits.streams_per_user));
        let woken = Arc::downgrade(&streams);
        let wakes = store.on_events(Arc::new(move |thread: &str| {
            if let Some(streams) = woken.upgrade() {
                streams.wakes.wake(thread);
            }
        }));
        if !wakes {
            tracing::debug!("the store cannot wake stream readers; they read its event logs every 500 ms");
        }
        let api_state = |auth: Option<Arc<Auth>>| {
            Arc::new(ApiState {
                store: Arc::clone(&store),
                graphs: graphs.clone(),
                users: Arc::clone(&users),
                attempts: Arc::clone(&attempts),
                auth,
                access: Arc::clone(&self.access),
                authorizer: authorizer.clone(),
                answer_role: self.answer_role.clone(),
                streams: Arc::clone(&streams),
                webhooks: self.webhooks.clone(),
            })
        };
        let mut router = api_router(api_state(Some(Arc::clone(&auth))));
        if self.inbox {
            let mut config = InboxConfig::new(Arc::clone(&auth))
                .authorizer(authorizer.clone())
                .access(Arc::clone(&self.access))
                .secure_cookies(self.secure_cookies);
            if let Some(role) = &self.answer_role {
                config = config.answer_role(role.clone());
            }
            if let Some((waiting, overdue, _)) = self.stuck {
                config = config.stuck_after(waiting, overdue);
            }
            let (inbox, handle) = inbox::router(Arc::clone(&store), config)?;
            // The API's own addresses first; every other one is the inbox's.
            router = router.fallback_service(inbox);
            if let Err(e) = handle.refresh_stuck().await {
                tracing::warn!(error = %e, "the inbox's stuck-thread gauge could not be counted");
            }
            tokio::spawn(handle.refresh_every(self.stuck.map_or(STUCK_EVERY, |(_, _, every)| every)));
        }
        // The socket's callers are the people its peers map to: no sessions there.
        let owner = if self.owner_socket {
            owner::claim(&store, api_router(api_state(None)), Arc::clone(&users)).await?
        } else {
            None
        };
        let stop = CancellationToken::new();
        let mut workers: Vec<_> = if self.concurrency == 0 {
            Vec::new()
        } else {
            // The schedules' owners as the users file names them now.
            let known = Arc::clone(&users);
            let owners: OwnerLookup =
                Arc::new(move |name: &str| known.iter().find(|u| u.name == name).map(User::actor));
            let run = |g: &Arc<dyn Hosted>| {
                g.run(stop.child_token(), self.concurrency, Arc::clone(&self.access), Arc::clone(&owners))
            };
            self.graphs.iter().map(|g| tokio::spawn(run(g))).collect()
        };
        if let Some(config) = self.webhooks {
            let dispatcher = WebhookDispatcher::new(Arc::clone(&store), config)
                .map_err(|e| ServerError::Config(format!("the webhooks cannot be sent: {e}")))?;
            workers.push(tokio::spawn(dispatcher.run(stop.child_token())));
        }
        let streams = streams.stop.clone();
        Ok(RunningServer { router, listener, local_addr, limits: self.limits, stop, streams, workers, owner })
    }
}

/// A number no other call in this test process got: unit tests that write a file each name it
/// with one, so tests running at once never share a file.
#[cfg(test)]
pub(crate) fn test_file_number() -> u64 {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}
