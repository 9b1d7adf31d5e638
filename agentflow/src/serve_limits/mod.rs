//! Limits for serving an HTTP app to people: the layer the approval inbox (`agentflow serve`)
//! runs behind, reusable by any axum [`Router`] (feature `server`).
//!
//! [`serve`] runs a [`Router`] on a listener with:
//!
//! - a **header-read timeout** ([`ServeLimits::header_read_timeout`], 10 s): a connection
//!   that has not sent a whole request head by then is closed, so half-sent requests cannot
//!   hold it open;
//! - a **connection limit** ([`ServeLimits::max_connections`], 256): past it, new
//!   connections wait in the listen queue until one closes;
//! - a **`Host` allow-list** ([`ServeLimits::allow_host`]; by default the bound address and,
//!   on loopback, `localhost`): a request naming another host is refused with `421 Misdirected
//!   Request` (one naming none with `400`), so a page on another name that resolves to this
//!   address (DNS rebinding) cannot read what the server answers;
//! - the client's address as axum's [`ConnectInfo<SocketAddr>`](axum::extract::ConnectInfo),
//!   for handlers that limit per address.
//!
//! Two limits need the app's own knowledge and are used from its handlers:
//! [`AttemptLimiter`] (failed login attempts, per client address and per user name: past the
//! limit a handler answers `429 Too Many Requests` with `Retry-After`) and [`SessionTable`]
//! (live sessions, at most [`ServeLimits::sessions_per_user`] per person, the oldest dropped).
//! A server also holds at most [`ServeLimits::streams_per_user`] open streams per person.

mod attempts;
mod hosts;
mod sessions;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};

pub use attempts::{AttemptLimiter, TooManyAttempts};
pub use hosts::HostAllowList;
pub use sessions::SessionTable;

/// The most connections [`ServeLimits::max_connections`] accepts.
const MAX_CONNECTIONS: usize = 1 << 24;

/// The limits [`serve`] applies, and those an app's handlers read (login attempts, sessions
/// per user). Start from [`ServeLimits::default`] and change what you need.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServeLimits {
    /// How long a connection may take to send a request head (the request line and headers)
    /// before it is closed, for its first request and while it idles between requests.
    /// Default 10 s.
    pub header_read_timeout: Duration,
    /// How many connections are served at once; further ones wait to be accepted. Default 256.
    pub max_connections: usize,
    /// Host names (optionally with `:port`) a request may name besides the defaults (the bound
    /// address, and `localhost`, `127.0.0.1` and `[::1]` when bound to loopback). Default none.
    pub allowed_hosts: Vec<String>,
    /// Failed login attempts one client address may make at once before it must wait. Default 10.
    pub login_burst: u32,
    /// How often one more failed attempt is allowed again, per address and per name. Default 6 s
    /// (10 a minute).
    pub login_refill: Duration,
    /// Live sessions one user may hold; a new login past it ends the user's oldest. Default 8.
    pub sessions_per_user: usize,
    /// Streams (`GET /api/threads/{thread}/stream`) one user may hold open at once on a server;
    /// one more answers `429 Too Many Requests`. Default 16.
    pub streams_per_user: usize,
}

impl Default for ServeLimits {
    fn default() -> Self {
        ServeLimits {
            header_read_timeout: Duration::from_secs(10),
            max_connections: 256,
            allowed_hosts: Vec::new(),
            login_burst: 10,
            login_refill: Duration::from_secs(6),
            sessions_per_user: 8,
            streams_per_user: 16,
        }
    }
}

impl ServeLimits {
    /// Sets [`header_read_timeout`](Self::header_read_timeout) (at least 1 ms).
    pub fn header_read_timeout(mut self, timeout: Duration) -> Self {
        self.header_read_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// Sets [`max_connections`](Self::max_connections) (at least 1).
    pub fn max_connections(mut self, n: usize) -> Self {
        self.max_connections = n.clamp(1, MAX_CONNECTIONS);
        self
    }

    /// Allows requests naming `host` (`inbox.example.com`, or with a port,
    /// `inbox.example.com:8443`), e.g. the name a TLS proxy in front of the server is reached by.
    pub fn allow_host(mut self, host: impl Into<String>) -> Self {
        self.allowed_hosts.push(host.into());
        self
    }

    /// Sets [`login_burst`](Self::login_burst) (at least 1) and
    /// [`login_refill`](Self::login_refill) (at least 1 ms).
    pub fn login_attempts(mut self, burst: u32, refill: Duration) -> Self {
        self.login_burst = burst.max(1);
        self.login_refill = refill.max(Duration::from_millis(1));
        self
    }

    /// Sets [`sessions_per_user`](Self::sessions_per_user) (at least 1).
    pub fn sessions_per_user(mut self, n: usize) -> Self {
        self.sessions_per_user = n.max(1);
        self
    }

    /// Sets [`streams_per_user`](Self::streams_per_user) (at least 1).
    pub fn streams_per_user(mut self, n: usize) -> Self {
        self.streams_per_user = n.max(1);
        self
    }

    /// The failed-login limiter these limits describe: per key (a client address, a user
    /// name), [`login_burst`](Self::login_burst) attempts, one more each
    /// [`login_refill`](Self::login_refill).
    pub fn attempt_limiter(&self) -> AttemptLimiter {
        AttemptLimiter::new(self.login_burst, self.login_refill)
    }

    /// The hosts a server bound to `local` accepts requests for.
    pub fn host_allow_list(&self, local: SocketAddr) -> HostAllowList {
        HostAllowList::new(local, &self.allowed_hosts)
    }
}

/// Serves `router` on `listener` under `limits` until `shutdown` completes, then stops
/// accepting, lets each open connection finish the request it is serving, and returns once
/// all have closed.
///
/// Handlers can extract the client's address with `ConnectInfo<SocketAddr>`.
///
/// # Errors
///
/// The listener's local address cannot be read. Accept errors (a client that left, too many
/// open files) are waited out and do not stop the server.
pub async fn serve<F>(listener: TcpListener, router: Router, limits: ServeLimits, shutdown: F) -> std::io::Result<()>
where
    F: Future<Output = ()> + Send + 'static,
{
    let hosts = Arc::new(limits.host_allow_list(listener.local_addr()?));
    let max = limits.max_connections.clamp(1, MAX_CONNECTIONS);
    let permits = Arc::new(Semaphore::new(max));
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout);
    let (stop, stopped) = watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            () = &mut shutdown => break,
            p = Arc::clone(&permits).acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
        };
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::debug!(error = %e, "accepting a connection failed");
                    // Too many open files and the like: give the process time to close some.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let router = router.clone();
        let hosts = Arc::clone(&hosts);
        let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
            let mut router = router.clone();
            let refusal = hosts.refusal(req.headers());
            req.extensions_mut().insert(ConnectInfo(peer));
            async move {
                if let Some(refusal) = refusal {
                    return Ok::<_, Infallible>(refusal);
                }
                tower_service::Service::call(&mut router, req).await
            }
        });
        let conn = builder.serve_connection(TokioIo::new(stream), service);
        let mut stopped = stopped.clone();
        tokio::spawn(async move {
            let _permit = permit;
            tokio::pin!(conn);
            tokio::select! {
                r = conn.as_mut() => {
                    if let Err(e) = r {
                        tracing::debug!(error = %e, "a connection ended with an error");
                    }
                    return;
                }
                _ = stopped.wait_for(|s| *s) => {}
            }
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        });
    }
    let _ = stop.send(true);
    // Every connection holds a permit until it closes.
    let _ = permits.acquire_many(u32::try_from(max).unwrap_or(u32::MAX)).await;
    Ok(())
}
