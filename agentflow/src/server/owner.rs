//! The owner of a redb file: a server holds its store file for its lifetime, answers on a Unix
//! socket beside it, and names itself in the file's sidecar
//! ([`agentflow_store::redb_owner`]), so that an app that finds the file held is told which
//! server holds it, and the `agentflow` command-line tool reaches that server through the socket
//! (`agentflow pending`, `approve`, `reject`, `show`) instead of failing on the held file.
//!
//! [`claim`] binds the socket (the socket module says how no other user can reach it), writes
//! the sidecar and serves the API on the socket; the [`OwnerGuard`] it answers removes both
//! when released or dropped. A store that is not a file (PostgreSQL, shared by many processes)
//! has no owner.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use agentflow_store::redb_owner::{self, Owner};
use axum::Router;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::Store;
use crate::server::ServerError;
use crate::server::socket;
use crate::server::users::Users;

/// How long [`OwnerGuard::release`] lets open connections finish their requests.
const RELEASE_GRACE: Duration = Duration::from_secs(10);

/// The store files this process owns now: a second claim of one would take the first one's
/// socket.
static CLAIMED: Mutex<BTreeSet<PathBuf>> = Mutex::new(BTreeSet::new());

/// Makes this process the owner of `store`'s file, if it is one ([`Store::file_path`]): binds
/// the socket beside it (`<file>.sock`, mode 0600), writes the sidecar (`<file>.owner`) naming
/// this process and the socket, and serves `api` on the socket, each connection as the person
/// of `users` its peer's OS user is mapped to (`"os_user"`). `None` for a store that is not a
/// file.
///
/// The caller keeps the store open for as long as it keeps the guard, and releases the guard
/// before it closes the store: the sidecar is true only while the file is held.
///
/// # Errors
///
/// [`ServerError::Socket`]: the socket or the sidecar cannot be created beside the file, or
/// this process owns the file already (another server in it).
pub(crate) async fn claim(
    store: &Arc<dyn Store>,
    api: Router,
    users: Arc<Users>,
) -> Result<Option<OwnerGuard>, ServerError> {
    let Some(path) = store.file_path() else { return Ok(None) };
    // Absolute: the sidecar names the socket for processes with other working directories.
    let file = std::fs::canonicalize(&path).map_err(|e| ServerError::Socket {
        path: redb_owner::with_suffix(&path, ".sock"),
        reason: format!("cannot resolve the store file's path ({e}); check that it exists and can be read"),
    })?;
    let claimed = Claimed::take(&file)?;
    let bound = socket::bind(&file)?;
    let owner = Owner::new(program(), bound.path.clone(), crate::core::clock::now_ms());
    let guard_parts = (bound.path.clone(), bound.private_dir.clone());
    if let Err(e) = redb_owner::write(&file, &owner) {
        remove_socket(&guard_parts.0, guard_parts.1.as_deref());
        return Err(ServerError::Socket {
            path: redb_owner::sidecar_path(&file),
            reason: format!(
                "cannot write the owner's sidecar ({e}); the server writes it beside its store file, so that \
                 the `agentflow` tool finds it: make the directory writable for the server"
            ),
        });
    }
    let (stop, stopped) = watch::channel(false);
    let task = tokio::spawn(socket::serve(bound.listener, api, users, stopped));
    Ok(Some(OwnerGuard { file, owner, private_dir: guard_parts.1, stop, task: Some(task), _claimed: claimed }))
}

/// A claim of a store file: the socket served and the sidecar written. Dropping it (or
/// [`OwnerGuard::release`]) stops the socket and removes it and the sidecar.
#[derive(Debug)]
pub(crate) struct OwnerGuard {
    file: PathBuf,
    owner: Owner,
    private_dir: Option<PathBuf>,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
    _claimed: Claimed,
}

impl OwnerGuard {
    /// The socket the `agentflow` tool reaches this server on.
    pub(crate) fn socket(&self) -> &Path {
        &self.owner.socket
    }

    /// Stops accepting connections on the socket, lets the open ones finish the request they
    /// serve (for at most 10 s), and removes the socket and the sidecar.
    pub(crate) async fn release(mut self) {
        let _ = self.stop.send(true);
        if let Some(mut task) = self.task.take()
            && tokio::time::timeout(RELEASE_GRACE, &mut task).await.is_err()
        {
            task.abort();
        }
        // Drop removes the files.
    }
}

impl Drop for OwnerGuard {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            task.abort();
        }
        // Only this server's: one that started on the file since keeps its own socket.
        let sidecar = redb_owner::read_any(&self.file);
        if sidecar.is_none() || sidecar.as_ref() == Some(&self.owner) {
            remove_socket(&self.owner.socket, self.private_dir.as_deref());
        }
        if let Err(e) = redb_owner::remove(&self.file, &self.owner) {
            tracing::warn!(file = %self.file.display(), error = %e, "the owner's sidecar could not be removed");
        }
    }
}

fn remove_socket(socket: &Path, private_dir: Option<&Path>) {
    let _ = std::fs::remove_file(socket);
    if let Some(dir) = private_dir {
        let _ = std::fs::remove_dir(dir);
    }
}

/// A file in [`CLAIMED`], taken out when dropped.
#[derive(Debug)]
struct Claimed(PathBuf);

impl Claimed {
    fn take(file: &Path) -> Result<Claimed, ServerError> {
        let mut claimed = CLAIMED.lock().unwrap_or_else(PoisonError::into_inner);
        if !claimed.insert(file.to_path_buf()) {
            return Err(ServerError::Socket {
                path: redb_owner::with_suffix(file, ".sock"),
                reason: format!(
                    "another server in this process owns {} already; serve every app of one store file from one \
                     server (add them with `.app(..)`)",
                    file.display()
                ),
            });
        }
        Ok(Claimed(file.to_path_buf()))
    }
}

impl Drop for Claimed {
    fn drop(&mut self) {
        CLAIMED.lock().unwrap_or_else(PoisonError::into_inner).remove(&self.0);
    }
}

/// This program's name, for the sidecar.
fn program() -> String {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "agentflow server".to_string())
}
