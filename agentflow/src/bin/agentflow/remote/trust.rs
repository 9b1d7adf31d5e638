//! Whether the server a redb file's sidecar names may be asked: the sidecar, the socket and the
//! process answering on it must all be of the account that owns the store file, and that
//! process the one the sidecar names.
//!
//! The sidecar is a file anyone who may write in the store file's directory can write, so it is
//! believed only when it belongs to the store file's owner ([`redb_owner::read`] checks that);
//! the socket it names must be a socket of that owner (`lstat`, not through a link); and after
//! connecting, the kernel's word on the peer (`SO_PEERCRED`) must be that owner's uid and the
//! sidecar's pid. Otherwise the request is never sent: a planted sidecar pointing at another
//! account's socket would show made-up approvals and receive the decisions.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use agentflow_store::redb_owner::{self, Owner};
use tokio::net::UnixStream;

/// What refusing a server says after naming what did not match.
const NOTHING_SENT: &str = "nothing was sent to it. If a server of this store's owner is running, stop it and \
                            start it again; else remove the sidecar (`<file>.owner`) and the socket";

/// Why the sidecar of store file `file` is not believed, when it names a live process but does
/// not belong to the file's owner; `None` when there is no such sidecar.
pub fn untrusted_sidecar(file: &Path) -> Option<String> {
    let owner = redb_owner::read_any(file).filter(|o| redb_owner::is_alive(o.pid))?;
    let sidecar = redb_owner::sidecar_path(file);
    let sidecar_uid = std::fs::symlink_metadata(&sidecar).ok()?.uid();
    let file_uid = redb_owner::file_uid(file)?;
    (sidecar_uid != file_uid).then(|| {
        format!(
            "the sidecar {} names the agentflow server {}, but it belongs to uid {sidecar_uid}, not to uid {file_uid} \
             who owns the store file, so it is not believed and its socket is not used; {NOTHING_SENT}",
            sidecar.display(),
            owner.describe()
        )
    })
}

/// `Ok` when `owner`'s socket is a socket owned by `uid` (the store file's owner), checked
/// without following a link; else what did not match.
pub fn check_socket(owner: &Owner, uid: u32) -> Result<(), String> {
    let socket = &owner.socket;
    let meta = std::fs::symlink_metadata(socket)
        .map_err(|e| format!("the socket {} the sidecar names cannot be examined ({e})", socket.display()))?;
    if !meta.file_type().is_socket() {
        return Err(format!(
            "{} (named by the sidecar as the server's socket) is not a socket; {NOTHING_SENT}",
            socket.display()
        ));
    }
    if meta.uid() != uid {
        return Err(format!(
            "the socket {} belongs to uid {}, not to uid {uid} who owns the store file; {NOTHING_SENT}",
            socket.display(),
            meta.uid()
        ));
    }
    Ok(())
}

/// `Ok` when the process on the other end of `stream` is of `uid` (the store file's owner) and
/// is `owner`'s pid, as the kernel reports it; else what did not match.
pub fn check_peer(stream: &UnixStream, owner: &Owner, uid: u32) -> Result<(), String> {
    let socket = owner.socket.display();
    let cred = stream
        .peer_cred()
        .map_err(|e| format!("who answers on the socket {socket} cannot be told ({e}); {NOTHING_SENT}"))?;
    if cred.uid() != uid {
        return Err(format!(
            "the process answering on the socket {socket} runs as uid {}, not as uid {uid} who owns the store file; \
             {NOTHING_SENT}",
            cred.uid()
        ));
    }
    let expected = i32::try_from(owner.pid).ok();
    match cred.pid() {
        Some(pid) if Some(pid) == expected => Ok(()),
        Some(pid) => Err(format!(
            "the process answering on the socket {socket} is pid {pid}, not pid {} that the sidecar names; \
             {NOTHING_SENT}",
            owner.pid
        )),
        None => Err(format!(
            "the system does not say which process answers on the socket {socket}, so it cannot be told to be pid {} \
             that the sidecar names; {NOTHING_SENT}",
            owner.pid
        )),
    }
}
