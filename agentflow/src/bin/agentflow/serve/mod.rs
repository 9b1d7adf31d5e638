//! `agentflow serve`: the approval inbox, a small web server over the same store the other
//! commands open.
//!
//! - **Pages** (server-rendered HTML, no external scripts or styles): the inbox (approvals
//!   and interrupts waiting for a person, with everything needed to judge them, and the stuck
//!   threads), the thread list, a thread's timeline, the state at a checkpoint, the audit log.
//! - **Decisions** go through the library's `ApprovalDesk` with the same `RoleAuthorizer`
//!   the CLI builds (`--roles-for`, `--two-person`), in the logged-in user's name.
//! - **Security**: users and their roles come from `--users FILE`; logging in with a token
//!   sets an `HttpOnly; SameSite=Strict` session cookie named for the port
//!   (`agentflow_session_8700`; `Secure` too with `--secure-cookies`); every POST checks the
//!   session's CSRF token; GETs change nothing. The server binds to loopback unless
//!   `--allow-remote` is given. Under abuse it holds through the library's
//!   [`agentflow::serve_limits`]: failed logins are limited per client address
//!   (`--login-attempts`, then 429 with `Retry-After`), a connection that has not sent its
//!   request head within `--header-timeout` is closed, at most `--max-connections` are served
//!   at once, a request naming a host other than the bound address or localhost
//!   (`--allow-host`) is refused with 421, a user holds at most `--sessions-per-user` sessions
//!   (a new login ends the oldest), and `--answer-role` makes answering a question need a role
//!   as deciding an approval does.
//! - **Access**: with `--access FILE` (the CLI's role-access policy) every page and form is
//!   checked for the logged-in user, with the roles and the `tenants` the users file gives
//!   them: listings need `list` and show only the threads of the user's tenants, a thread page
//!   `read_state`, a checkpoint page and the audit log `read_history`, decisions `decide`,
//!   answers `answer`, and the thread page's controls `resume`, `pause`, `cancel`, `fork`. A
//!   refused operation answers 403 with the reason; a thread of another tenant answers 404,
//!   as a missing one. The inbox starts no thread, updates no state and compacts nothing.
//! - **Live**: `GET /live` answers a small JSON fingerprint of what waits; the inbox polls it
//!   and reloads when it changes (a decision made from the CLI or another browser).
//! - **Metrics**: `GET /metrics` is the Prometheus text of every `agentflow_*` metric this
//!   process records, plus `agentflow_stuck_threads{kind}`, refreshed every `--stuck-every`.
//!
//! A redb file is open in one process at a time, so for a redb store the server opens the
//! file for each request and closes it after: between requests the CLI, or the app that
//! resumes the thread, can open it. A request made while another process holds the file waits
//! up to two seconds for it, then answers 503 with what to do. A PostgreSQL store is opened
//! once and shared.

mod acts;
mod auth;
mod checks;
mod controls;
mod live;
mod pages;
mod respond;
mod routes;
mod timeline;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentflow::Store;
use agentflow::access::AccessPolicy;
use agentflow::approval::RoleAuthorizer;
use agentflow::serve_limits::{self, ServeLimits};
use clap::Args;

use crate::out::parse_duration;
use crate::{Failure, Outcome, code};

/// `serve` options.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// The address to listen on. Loopback unless --allow-remote.
    #[arg(long, default_value = "127.0.0.1:8700", value_name = "ADDR:PORT")]
    pub bind: String,
    /// Listen on a non-loopback address (put TLS in front of it: the session cookie and
    /// tokens travel in clear otherwise).
    #[arg(long)]
    pub allow_remote: bool,
    /// Mark the login and session cookies `Secure`, so browsers send them over HTTPS only.
    /// Use it when a TLS proxy serves the inbox (with plain HTTP, logins would not stick).
    #[arg(long)]
    pub secure_cookies: bool,
    /// The users file (JSON): `{"users": [{"name": .., "token_sha256": .., "roles": [..],
    /// "tenants": [..]}]}` (`tenants` optional: absent, the user acts for every tenant).
    #[arg(long, value_name = "FILE")]
    pub users: PathBuf,
    /// Which role may decide which risk class, as RISK=ROLE pairs (as for `approve`).
    #[arg(long, env = "AGENTFLOW_ROLES", value_name = "RISK=ROLE,..")]
    pub roles_for: Option<String>,
    /// Irreversible calls need two distinct approvers.
    #[arg(long, env = "AGENTFLOW_TWO_PERSON")]
    pub two_person: bool,
    /// How long a login lasts: after it, the user logs in again (sessions live in the
    /// server's memory; a restart ends them all).
    #[arg(long, default_value = "12h", value_name = "DURATION")]
    pub session_ttl: String,
    /// How long a thread may wait on a person before it counts as stuck.
    #[arg(long, default_value = "1h", value_name = "DURATION")]
    pub stuck_waiting: String,
    /// How long past its wake time a timer may be before it counts as overdue.
    #[arg(long, default_value = "1m", value_name = "DURATION")]
    pub stuck_overdue: String,
    /// How often the stuck-thread gauge is refreshed.
    #[arg(long, default_value = "30s", value_name = "DURATION")]
    pub stuck_every: String,
    /// The role a user needs to answer a thread's question (by default any logged-in user may).
    #[arg(long, value_name = "ROLE")]
    pub answer_role: Option<String>,
    /// Failed logins one client address may make in a row; one more is allowed every 6 s.
    /// Past it the login answers 429 with `Retry-After`.
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub login_attempts: u32,
    /// Live sessions a user may hold; a new login past it ends the user's oldest.
    #[arg(long, default_value_t = 8, value_name = "N")]
    pub sessions_per_user: usize,
    /// How long a connection may take to send a request's head before it is closed.
    #[arg(long, default_value = "10s", value_name = "DURATION")]
    pub header_timeout: String,
    /// Connections served at once; more wait to be accepted.
    #[arg(long, default_value_t = 256, value_name = "N")]
    pub max_connections: usize,
    /// A host name the inbox is reached by (besides the bound address, and localhost on
    /// loopback), e.g. the TLS proxy's; `NAME` for any port, `NAME:PORT` for one. Repeatable.
    #[arg(long = "allow-host", value_name = "NAME[:PORT]")]
    pub allow_hosts: Vec<String>,
}

/// How the server reaches the store.
pub enum StoreAccess {
    /// A redb file, opened for each request and closed after it.
    Redb(PathBuf),
    /// A PostgreSQL store, opened once.
    Shared(Arc<dyn Store>),
}

impl StoreAccess {
    /// Runs `f` with the store, on a blocking thread (store calls are synchronous).
    pub async fn with<T, F>(self: &Arc<Self>, f: F) -> Result<T, Failure>
    where
        T: Send + 'static,
        F: FnOnce(&Arc<dyn Store>) -> Result<T, Failure> + Send + 'static,
    {
        let access = Arc::clone(self);
        tokio::task::spawn_blocking(move || {
            let store = access.open()?;
            f(&store)
        })
        .await
        .map_err(|e| Failure::store(format!("the request's store task failed: {e}")))?
    }

    fn open(&self) -> Result<Arc<dyn Store>, Failure> {
        match self {
            StoreAccess::Shared(store) => Ok(Arc::clone(store)),
            StoreAccess::Redb(path) => {
                let spec = path.to_string_lossy().into_owned();
                let deadline = Instant::now() + Duration::from_secs(2);
                loop {
                    match crate::open::open(&spec, None, false) {
                        Err(f) if f.code == code::BUSY && Instant::now() < deadline => {
                            std::thread::sleep(Duration::from_millis(50));
                        }
                        other => return other,
                    }
                }
            }
        }
    }
}

/// The server's settings and shared state.
pub struct Server {
    /// The store.
    pub store: Arc<StoreAccess>,
    /// Users and sessions.
    pub auth: auth::Auth,
    /// The authorizer decisions go through (the CLI's).
    pub authorizer: RoleAuthorizer,
    /// The Prometheus text renderer.
    pub metrics: metrics_exporter_prometheus::PrometheusHandle,
    /// Stuck thresholds (millis): waiting on a person, timer overdue.
    pub stuck: (u64, u64),
    /// The attributes every cookie gets (`HttpOnly; SameSite=Strict`, and `Secure` with
    /// `--secure-cookies`).
    pub cookie_attrs: &'static str,
    /// The role answering a question needs, if any (`--answer-role`).
    pub answer_role: Option<String>,
    /// The access policy every route checks for the logged-in user (`--access`; every
    /// operation allowed without it).
    pub access: Arc<dyn AccessPolicy>,
}

/// `serve`.
pub fn serve(spec: &str, schema: Option<&str>, args: &ServeArgs, policy: Arc<dyn AccessPolicy>) -> Outcome {
    let addr: SocketAddr = args.bind.parse().map_err(|_| {
        Failure::usage(format!("--bind `{}` is not an address and port, like 127.0.0.1:8700", args.bind))
    })?;
    if !addr.ip().is_loopback() {
        if !args.allow_remote {
            return Err(Failure::usage(format!(
                "refusing to listen on {addr}, which is not a loopback address: anyone who reaches it could try \
                 tokens. Bind 127.0.0.1 (and reach it through an SSH tunnel or a TLS proxy), or pass --allow-remote"
            )));
        }
        eprintln!(
            "agentflow serve: WARNING: listening on {addr}, reachable from other machines; tokens and the session \
             cookie travel in clear unless a TLS proxy is in front{}",
            if args.secure_cookies { "" } else { " (with one, pass --secure-cookies)" }
        );
    }
    let session = parse_duration(&args.session_ttl).map_err(Failure::usage)?;
    if session == 0 {
        return Err(Failure::usage("--session-ttl must be longer than 0"));
    }
    let header_timeout = parse_duration(&args.header_timeout).map_err(Failure::usage)?;
    if header_timeout == 0 || args.max_connections == 0 || args.login_attempts == 0 || args.sessions_per_user == 0 {
        return Err(Failure::usage(
            "--header-timeout, --max-connections, --login-attempts and --sessions-per-user must be more than 0",
        ));
    }
    let mut limits = ServeLimits::default()
        .header_read_timeout(Duration::from_millis(header_timeout))
        .max_connections(args.max_connections)
        .login_attempts(args.login_attempts, Duration::from_secs(6))
        .sessions_per_user(args.sessions_per_user);
    for host in &args.allow_hosts {
        limits = limits.allow_host(host.clone());
    }
    let mut users = auth::Auth::load(&args.users, session, &limits)?;
    let authorizer = crate::decide::authorizer_from(args.roles_for.as_deref(), args.two_person)?;
    let waiting = parse_duration(&args.stuck_waiting).map_err(Failure::usage)?;
    let overdue = parse_duration(&args.stuck_overdue).map_err(Failure::usage)?;
    let every = parse_duration(&args.stuck_every).map_err(Failure::usage)?.max(100);
    let access = if spec.starts_with("postgres://") || spec.starts_with("postgresql://") {
        StoreAccess::Shared(crate::open::open(spec, schema, false)?)
    } else {
        // Fail early (missing file, not a store), then close it again.
        drop(crate::open::open(spec, None, false)?);
        StoreAccess::Redb(PathBuf::from(spec))
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Failure::store(format!("cannot start the server's runtime: {e}")))?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| Failure::new(code::BUSY, format!("cannot listen on {addr}: {e}")))?;
        let local = listener.local_addr().map_err(Failure::store)?;
        // Cookies are per host, not per port: named for the port, two inboxes on one host
        // keep their sessions apart.
        users.name_cookies_for(local.port());
        let metrics = metrics_exporter_prometheus::PrometheusBuilder::new()
            .install_recorder()
            .map_err(|e| Failure::store(format!("cannot install the metrics recorder: {e}")))?;
        live::describe_metrics();
        let cookie_attrs =
            if args.secure_cookies { "HttpOnly; SameSite=Strict; Secure" } else { "HttpOnly; SameSite=Strict" };
        let server = Arc::new(Server {
            store: Arc::new(access),
            auth: users,
            authorizer,
            metrics,
            stuck: (waiting, overdue),
            cookie_attrs,
            answer_role: args.answer_role.clone().filter(|r| !r.trim().is_empty()),
            access: policy,
        });
        // The gauge holds a value before the first scrape.
        live::refresh_stuck(&server).await;
        outln!("agentflow serve: the inbox is at http://{local}/ (Ctrl-C stops it)")?;
        tokio::spawn(live::refresh_every(Arc::clone(&server), Duration::from_millis(every)));
        let app = routes::router(server);
        let stop = async {
            let _ = tokio::signal::ctrl_c().await;
        };
        serve_limits::serve(listener, app, limits, stop)
            .await
            .map_err(|e| Failure::store(format!("the server stopped: {e}")))
    })
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }

    #[test]
    fn a_session_lasts_12_hours_unless_said_otherwise() {
        let cli = Cli::try_parse_from(["serve", "--users", "users.json"]).unwrap();
        assert_eq!(parse_duration(&cli.serve.session_ttl), Ok(12 * 3_600_000));
        let cli = Cli::try_parse_from(["serve", "--users", "users.json", "--session-ttl", "30m"]).unwrap();
        assert_eq!(parse_duration(&cli.serve.session_ttl), Ok(30 * 60_000));
    }
}
