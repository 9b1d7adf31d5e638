//! `agentflow serve`: a [`Server`] with no graph of its own: the approval inbox (the library's
//! [`agentflow::server::inbox`], whose docs say what it shows and how it is secured), the JSON
//! API and, for a redb file, the owner's socket, over the store `--store` names, opened once
//! and held until the server stops (Ctrl-C). The flags set it up: `--users` the users file,
//! `--roles-for` and `--two-person` who decides (as for `approve`), `--access` the access
//! policy, the limits of [`agentflow::serve_limits`] (`--login-attempts`, `--header-timeout`,
//! `--max-connections`, `--allow-host`, `--sessions-per-user`), `--answer-role`, and when a
//! thread counts as stuck. It binds to loopback unless `--allow-remote` is given.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use agentflow::access::AccessPolicy;
use agentflow::serve_limits::ServeLimits;
use agentflow::server::users::Users;
use agentflow::server::{Server, ServerError};
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
    /// "tenants": [..], "os_user": ..}]}` (`tenants` optional: absent, the user acts for every
    /// tenant; `os_user` optional: the OS account whose `agentflow pending/approve/show` act as
    /// the person through the store's socket, which has mode 0600, so only the server's own OS
    /// account, or root, can be mapped).
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
    let users = Users::load(&args.users).map_err(users_failure)?;
    let authorizer = crate::decide::authorizer_from(args.roles_for.as_deref(), args.two_person)?;
    let waiting = parse_duration(&args.stuck_waiting).map_err(Failure::usage)?;
    let overdue = parse_duration(&args.stuck_overdue).map_err(Failure::usage)?;
    let every = parse_duration(&args.stuck_every).map_err(Failure::usage)?;
    // Opened once, held until the server stops: the CLI reaches a held redb file through the
    // server's socket.
    let store = crate::open::open(spec, schema, false)?;
    let mut server = Server::new()
        .store(store)
        .users(users)
        .access_shared(policy)
        .authorizer(authorizer)
        .limits(limits)
        .session_ttl(Duration::from_millis(session))
        .secure_cookies(args.secure_cookies)
        .stuck_after(Duration::from_millis(waiting), Duration::from_millis(overdue), Duration::from_millis(every));
    if let Some(role) = &args.answer_role {
        server = server.answer_role(role.clone());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Failure::store(format!("cannot start the server's runtime: {e}")))?;
    runtime.block_on(async move {
        let running = server.listen(addr).await.map_err(|e| match e {
            ServerError::Bind { .. } => Failure::new(code::BUSY, e.to_string()),
            other => Failure::store(other),
        })?;
        let local = running.local_addr().unwrap_or(addr);
        outln!("agentflow serve: the inbox is at http://{local}/ (Ctrl-C stops it)")?;
        if let Some(socket) = running.socket() {
            eprintln!("agentflow serve: the agentflow tool reaches this server through {}", socket.display());
        }
        let stop = async {
            let _ = tokio::signal::ctrl_c().await;
        };
        running.serve(stop).await.map_err(|e| Failure::store(format!("the server stopped: {e}")))
    })
}

/// A users file the server refuses, as a usage error naming `--users`.
fn users_failure(e: ServerError) -> Failure {
    match e {
        ServerError::Users { path, reason } => Failure::usage(format!("--users {}: {reason}", path.display())),
        other => Failure::usage(other.to_string()),
    }
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
