//! A started server: its router (the inbox, the JSON API and its OpenAPI document), the workers
//! and timer schedulers of its graphs, and the claim of its store file; served on the address it
//! was bound to, or mounted in another service, until it is shut down.

use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;

use axum::Router;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::error::ServerError;
use super::owner::OwnerGuard;
use crate::serve_limits::{self, ServeLimits};

/// A started [`Server`](super::Server): its graphs run (a worker and a timer scheduler each),
/// its store file is claimed (the sidecar written, the owner's socket served), and its router
/// answers. Made by [`Server::start`](super::Server::start) (to mount the router in a service of
/// your own) or [`Server::listen`](super::Server::listen) (bound to an address, to
/// [`serve`](RunningServer::serve)).
///
/// [`RunningServer::shutdown`] ends the open streams, stops the workers (a running step
/// finishes first), the schedulers and the socket, and removes the sidecar; dropping it does the
/// same without waiting.
#[derive(Debug)]
pub struct RunningServer {
    pub(crate) router: Router,
    pub(crate) listener: Option<TcpListener>,
    pub(crate) local_addr: Option<SocketAddr>,
    pub(crate) limits: ServeLimits,
    pub(crate) stop: CancellationToken,
    /// Ends every open stream (at shutdown, before the connections are waited for).
    pub(crate) streams: CancellationToken,
    pub(crate) workers: Vec<JoinHandle<()>>,
    pub(crate) owner: Option<OwnerGuard>,
}

impl RunningServer {
    /// The server's router: the inbox's pages, the JSON API under `/api` and its OpenAPI
    /// document at `/openapi.json`. Mount it in a service of your own, or
    /// [`serve`](RunningServer::serve) it. Cheap to clone; serving it after
    /// [`shutdown`](RunningServer::shutdown) reads a store no worker runs threads of.
    pub fn router(&self) -> Router {
        self.router.clone()
    }

    /// The address the server listens on, once bound ([`Server::listen`](super::Server::listen)):
    /// with port 0 asked for, the port the system gave.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.local_addr
    }

    /// The owner's Unix socket the `agentflow` command-line tool reaches this server on, when its
    /// store is a redb file.
    pub fn socket(&self) -> Option<&Path> {
        self.owner.as_ref().map(OwnerGuard::socket)
    }

    /// Serves the router on the address the server was bound to, under its
    /// [`ServeLimits`], until `shutdown` completes; then ends the open streams, lets each open
    /// connection finish the request it serves and shuts the server down
    /// ([`RunningServer::shutdown`]).
    ///
    /// # Errors
    ///
    /// [`ServerError::Config`] for a server started without an address
    /// ([`Server::start`](super::Server::start): serve its [`router`](RunningServer::router)
    /// yourself); [`ServerError::Bind`] when the listener's address cannot be read.
    pub async fn serve(mut self, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<(), ServerError> {
        let Some(listener) = self.listener.take() else {
            return Err(ServerError::Config(
                "this server was started without an address (`Server::start`); start it with `Server::listen(addr)` \
                 to serve it, or serve `RunningServer::router()` in your own service"
                    .to_string(),
            ));
        };
        let addr = self.local_addr.unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)));
        // Open streams never end by themselves: they end first, so their connections close.
        let streams = self.streams.clone();
        let shutdown = async move {
            shutdown.await;
            streams.cancel();
        };
        let served = serve_limits::serve(listener, self.router.clone(), self.limits.clone(), shutdown).await;
        self.shutdown().await;
        served.map_err(|source| ServerError::Bind { addr, source })
    }

    /// Stops the server's graphs: the workers let their running steps finish and leave those
    /// runs queued, paused, for the next start (see [`Worker`](crate::Worker)); the timer
    /// schedulers stop; the owner's socket stops answering and the sidecar is removed. The store
    /// is closed once the last handle to it (the apps', the router's) is dropped.
    pub async fn shutdown(mut self) {
        self.streams.cancel();
        self.stop.cancel();
        for worker in std::mem::take(&mut self.workers) {
            if let Err(e) = worker.await {
                tracing::error!(error = %e, "a graph's worker task of the server failed");
            }
        }
        if let Some(owner) = self.owner.take() {
            owner.release().await;
        }
    }
}

impl Drop for RunningServer {
    fn drop(&mut self) {
        // The workers stop on their own (a running step finishes first); the guard's drop
        // removes the socket and the sidecar.
        self.streams.cancel();
        self.stop.cancel();
    }
}
