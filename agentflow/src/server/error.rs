//! Why a server could not start or keep serving: its users file, its address, its store, its
//! socket or its settings; each message says what to do.

use std::net::SocketAddr;
use std::path::PathBuf;

/// Why a server could not start or keep serving.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// The users file cannot be read or is not valid.
    #[error("the users file {}: {reason}", path.display())]
    Users {
        /// The file.
        path: PathBuf,
        /// What is wrong with it and what to do.
        reason: String,
    },
    /// The address cannot be listened on.
    #[error("cannot listen on {addr}: {source}; pick a free address and port (another process may use this one)")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// The store failed.
    #[error("the store failed: {0}")]
    Store(String),
    /// The owner's Unix socket cannot be set up.
    #[error("the socket {}: {reason}", path.display())]
    Socket {
        /// The socket's path.
        path: PathBuf,
        /// What went wrong and what to do.
        reason: String,
    },
    /// A setting is not usable.
    #[error("{0}")]
    Config(String),
}
