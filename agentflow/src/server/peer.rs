//! Who is on the other end of the owner's Unix socket: the peer's uid, as the kernel reports it
//! (`SO_PEERCRED`), its OS user name, and the person the users file maps that name to
//! (`"os_user"`); or, for a name no person has, the `403` every request of the connection gets.

use std::ffi::CStr;
use std::sync::Arc;

use axum::http::{StatusCode, header};
use axum::response::Response;
use tokio::net::UnixStream;

use crate::server::users::{User, Users};

/// The longest `getpwuid_r` buffer tried: a passwd entry is a few hundred bytes.
const MAX_PASSWD_BUFFER: usize = 1 << 20;

/// The person on the other end of a connection, or why there is none.
#[derive(Debug, Clone)]
pub(crate) enum Peer {
    /// The person the peer's OS user is mapped to.
    Person(Arc<User>),
    /// Nobody: the answer to every request of the connection.
    Refused {
        /// What to tell the peer.
        message: String,
    },
}

/// Who is on the other end of `stream`.
pub(crate) async fn identify(stream: &UnixStream, users: &Users) -> Peer {
    let uid = match stream.peer_cred() {
        Ok(cred) => cred.uid(),
        Err(e) => {
            return Peer::Refused {
                message: format!(
                    "the server cannot tell which OS user connected ({e}), so it answers nobody on this socket; \
                     use the server's HTTP API with a token instead"
                ),
            };
        }
    };
    // The lookup may ask a directory service (NSS): not on a runtime thread.
    let name = tokio::task::spawn_blocking(move || os_user_name(uid)).await.ok().flatten();
    let Some(name) = name else {
        return Peer::Refused {
            message: format!(
                "the OS user with uid {uid} has no name on the server's machine, so it maps to no person; \
                 connect as a user with a name, or use the server's HTTP API with a token"
            ),
        };
    };
    match users.by_os_user(&name) {
        Some(user) => Peer::Person(Arc::new(user.clone())),
        None => Peer::Refused {
            message: format!(
                "the OS user `{name}` is not mapped to a person of the server's users file; add \
                 \"os_user\": \"{name}\" to the entry of the person who uses it in the users file and restart the \
                 server. The socket has mode 0600, so only the server's own OS account (and root) can connect: map \
                 that account; people with accounts of their own use the HTTP API with a token"
            ),
        },
    }
}

/// The `403` JSON answer (`{"error": {"code": "forbidden", "message": ..}}`, as the API's
/// refusals) to a peer who is no person.
pub(crate) fn refusal(message: &str) -> Response {
    let body = serde_json::json!({ "error": { "code": "forbidden", "message": message } });
    let mut response = Response::new(axum::body::Body::from(body.to_string()));
    *response.status_mut() = StatusCode::FORBIDDEN;
    response.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static("application/json"));
    response
}

/// The name of the OS user `uid` (`getpwuid_r`), if it has one that is UTF-8.
pub(crate) fn os_user_name(uid: libc::uid_t) -> Option<String> {
    let mut buffer = vec![0u8; 1024];
    loop {
        // SAFETY: `passwd` is plain data that `getpwuid_r` fills in; all-zero is a valid value
        // of it (null pointers, zero ids).
        let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: every pointer is valid for the call: `entry` and `found` are live locals,
        // `buffer` is `buffer.len()` writable bytes; the strings `entry` points to are written
        // into `buffer`, which outlives their use below.
        let rc = unsafe { libc::getpwuid_r(uid, &mut entry, buffer.as_mut_ptr().cast(), buffer.len(), &mut found) };
        if rc == libc::ERANGE && buffer.len() < MAX_PASSWD_BUFFER {
            buffer.resize(buffer.len() * 4, 0);
            continue;
        }
        if rc != 0 || found.is_null() || entry.pw_name.is_null() {
            return None;
        }
        // SAFETY: on success `pw_name` points to a NUL-terminated string inside `buffer`.
        let name = unsafe { CStr::from_ptr(entry.pw_name) };
        return name.to_str().ok().filter(|n| !n.is_empty()).map(str::to_string);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_user_has_a_name() {
        // SAFETY: `getuid` has no preconditions.
        let uid = unsafe { libc::getuid() };
        let name = os_user_name(uid).expect("the current user has a passwd entry");
        assert!(!name.is_empty());
        if uid == 0 {
            assert_eq!(name, "root");
        }
    }

    #[tokio::test]
    async fn a_refusal_is_403_json_naming_the_fix() {
        let response = refusal("add \"os_user\": \"bob\"");
        assert_eq!(response.status(), StatusCode::FORBIDDEN);
        let body = axum::body::to_bytes(response.into_body(), 1 << 16).await.unwrap();
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(json["error"]["code"], "forbidden");
        assert!(json["error"]["message"].as_str().unwrap().contains("os_user"));
    }
}
