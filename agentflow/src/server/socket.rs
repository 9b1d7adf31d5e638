//! The owner's Unix socket: bound where no other user can connect before its mode is set, and
//! served over HTTP/1.1, each connection as the person its peer's OS user is mapped to.
//!
//! # No window for other users
//!
//! The socket is bound inside a fresh directory of mode 0700 (created under a new name, so no
//! one can have placed anything in it), its mode set to 0600 there, and only then renamed to
//! `<file>.sock` beside the store file. Nobody but this OS user can reach it while it has the
//! default mode, and the rename replaces a socket a killed server left behind in one step.
//! Setting the process's umask instead would change it for every thread of the process, and a
//! `chmod` after `bind` but before `listen` needs the raw system calls. When `<file>.sock` is
//! too long for a socket address (`sun_path`), the socket stays in a fresh 0700 directory in
//! the temporary directory, and the sidecar names it there.
//!
//! The mode is not the access control: every connection is checked by its peer's uid (below),
//! so even on a system that ignores socket modes a peer acts only as the person its OS user is.

use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::HeaderValue;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::UnixListener;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

use agentflow_store::redb_owner::with_suffix;

use crate::server::ServerError;
use crate::server::api::caller::PeerUser;
use crate::server::peer::{self, Peer};
use crate::server::users::Users;

/// The longest socket path the system takes (`sun_path` less its NUL): 108 bytes on Linux,
/// 104 on the BSDs and macOS.
const MAX_SOCKET_PATH: usize = if cfg!(any(target_os = "linux", target_os = "android")) { 107 } else { 103 };
/// Connections served at once; further ones wait in the listen queue.
const MAX_CONNECTIONS: usize = 64;
/// How long a connection may take to send a request head.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Attempts at a fresh directory name before giving up (each fails only if the name is taken).
const NAME_ATTEMPTS: u32 = 16;

/// The response header that names, on every answer of the owner's socket, the person the
/// server acted as (the person's name, UTF-8, percent-encoded).
pub const PERSON_HEADER: &str = "x-agentflow-person";

/// A bound socket and where it is.
#[derive(Debug)]
pub(crate) struct Bound {
    /// The listening socket.
    pub listener: UnixListener,
    /// Its path (absolute when the store file's path is).
    pub path: PathBuf,
    /// The private directory it lives in, when it could not go beside the store file; removed
    /// with it.
    pub private_dir: Option<PathBuf>,
}

/// Binds the socket of store file `file` (an absolute path): `<file>.sock` if it fits a socket
/// address, else in a private directory in the temporary directory. A socket left at
/// `<file>.sock` by a killed server is replaced.
pub(crate) fn bind(file: &Path) -> Result<Bound, ServerError> {
    let beside = with_suffix(file, ".sock");
    let dir = match file.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if fits(&beside) {
        let private = fresh_private_dir(&dir, &beside)?;
        let temp = private.join("s");
        if fits(&temp) {
            let bound = bind_private(&temp).and_then(|listener| {
                std::fs::rename(&temp, &beside).map_err(|e| socket_error(&beside, &e, "cannot move it into place"))?;
                Ok(listener)
            });
            let _ = std::fs::remove_file(&temp);
            let _ = std::fs::remove_dir(&private);
            return bound.map(|listener| Bound { listener, path: beside, private_dir: None });
        }
        let _ = std::fs::remove_dir(&private);
    }
    let private = fresh_private_dir(&std::env::temp_dir(), &beside)?;
    let path = private.join("agentflow.sock");
    if !fits(&path) {
        let _ = std::fs::remove_dir(&private);
        return Err(ServerError::Socket {
            path,
            reason: format!(
                "the path is longer than a Unix socket address takes ({MAX_SOCKET_PATH} bytes), and so is `{}`; \
                 set TMPDIR to a shorter directory, or move the store file to a shorter path",
                beside.display()
            ),
        });
    }
    match bind_private(&path) {
        Ok(listener) => Ok(Bound { listener, path, private_dir: Some(private) }),
        Err(e) => {
            let _ = std::fs::remove_dir(&private);
            Err(e)
        }
    }
}

fn fits(path: &Path) -> bool {
    path.as_os_str().len() <= MAX_SOCKET_PATH
}

fn socket_error(path: &Path, e: &std::io::Error, what: &str) -> ServerError {
    ServerError::Socket {
        path: path.to_path_buf(),
        reason: format!("{what} ({e}); the server needs to create files beside its store file: check its permissions"),
    }
}

/// Binds `path`, inside a private directory, and sets its mode to 0600.
fn bind_private(path: &Path) -> Result<UnixListener, ServerError> {
    use std::os::unix::fs::PermissionsExt;
    let listener = UnixListener::bind(path).map_err(|e| socket_error(path, &e, "cannot bind it"))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| socket_error(path, &e, "cannot set its mode to 0600"))?;
    Ok(listener)
}

/// A new directory of mode 0700 in `parent`, under a name nobody has taken (creating it fails
/// on a name that exists, whatever is there).
fn fresh_private_dir(parent: &Path, socket: &Path) -> Result<PathBuf, ServerError> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let mut last = None;
    for attempt in 0..NAME_ATTEMPTS {
        let tag = (u64::from(seed) ^ (u64::from(std::process::id()) << 20)).wrapping_add(u64::from(attempt) * 7919);
        let dir = parent.join(format!(".af-{:08x}", tag & 0xffff_ffff));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {
                // The umask may have taken bits off; 0700 exactly.
                std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
                    .map_err(|e| socket_error(&dir, &e, "cannot set the mode of its directory"))?;
                return Ok(dir);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => {
                return Err(socket_error(socket, &e, &format!("cannot create a directory in {}", parent.display())));
            }
        }
    }
    let e = last.unwrap_or_else(|| std::io::Error::other("no name was free"));
    Err(socket_error(socket, &e, &format!("cannot create a directory in {}", parent.display())))
}

/// Serves `api` on `listener` until `stop` turns true (or its sender is dropped): each
/// connection as the person its peer's OS user is mapped to ([`PeerUser`] in every request's
/// extensions), or `403` for every request of a peer that maps to no person. Once stopped, open
/// connections finish the request they serve; the task ends when all have closed.
pub(crate) async fn serve(listener: UnixListener, api: Router, users: Arc<Users>, mut stop: watch::Receiver<bool>) {
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(HEADER_READ_TIMEOUT);
    let mut connections = JoinSet::new();
    let stopping = async move {
        // An error: the sender is gone, which stops as well.
        let _ = stop.wait_for(|s| *s).await;
    };
    tokio::pin!(stopping);
    let (closing, closed) = watch::channel(false);
    loop {
        // Finished connections are reaped as the loop goes.
        while connections.try_join_next().is_some() {}
        let permit = tokio::select! {
            () = &mut stopping => break,
            p = Arc::clone(&permits).acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
        };
        let stream = tokio::select! {
            () = &mut stopping => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::debug!(error = %e, "accepting a connection on the owner's socket failed");
                    // Too many open files and the like: give the process time to close some.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let api = api.clone();
        let users = Arc::clone(&users);
        let builder = builder.clone();
        let mut closed = closed.clone();
        connections.spawn(async move {
            let _permit = permit;
            let peer = peer::identify(&stream, &users).await;
            let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
                let mut api = api.clone();
                let peer = peer.clone();
                async move {
                    match peer {
                        Peer::Person(user) => {
                            let person = person_header(&user.name);
                            req.extensions_mut().insert(PeerUser(user));
                            let mut response = tower_service::Service::call(&mut api, req).await?;
                            if let Some(person) = person {
                                response.headers_mut().insert(PERSON_HEADER, person);
                            }
                            Ok(response)
                        }
                        Peer::Refused { message } => Ok::<_, Infallible>(peer::refusal(&message)),
                    }
                }
            });
            let conn = builder.serve_connection(TokioIo::new(stream), service);
            tokio::pin!(conn);
            tokio::select! {
                r = conn.as_mut() => {
                    if let Err(e) = r {
                        tracing::debug!(error = %e, "a connection on the owner's socket ended with an error");
                    }
                    return;
                }
                _ = closed.wait_for(|c| *c) => {}
            }
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        });
    }
    drop(listener);
    let _ = closing.send(true);
    while connections.join_next().await.is_some() {}
}

/// `name` as a [`PERSON_HEADER`] value: every byte but ASCII letters, digits and `-._~@`
/// percent-encoded.
fn person_header(name: &str) -> Option<HeaderValue> {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'@') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    HeaderValue::from_str(&out).ok()
}
