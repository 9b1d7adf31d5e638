//! What writing or checking a graph's lock fails with.

use std::path::PathBuf;

/// Why [`check_lock`](super::check_lock) failed: a lock file it could not read or write, or a
/// graph that does not match its locks.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// A lock file (or the lock directory) could not be read.
    #[error("cannot read the lock {}: {source}; check the file's permissions, or delete it and lock the version again with `agentflow graphs lock`", path.display())]
    Unreadable {
        /// The file or directory.
        path: PathBuf,
        /// What the file system said.
        source: std::io::Error,
    },
    /// A lock file could not be written.
    #[error("cannot write the lock {}: {source}; check that the directory is writable", path.display())]
    Unwritable {
        /// The file or directory.
        path: PathBuf,
        /// What the file system said.
        source: std::io::Error,
    },
    /// A lock file is not a lock: not JSON, or a part missing or of the wrong kind.
    #[error("the lock {} is malformed: {reason}; restore it from version control, or lock the version again with `agentflow graphs lock`", path.display())]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A lock file written in a format this crate does not read.
    #[error("the lock {} has format {found}, and this version of agentflow reads format {expected}: upgrade agentflow, or lock the version again with `agentflow graphs lock`", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// The format the file names (its `format` field, as written).
        found: String,
        /// The format this crate reads and writes, [`LOCK_FORMAT`](super::LOCK_FORMAT).
        expected: u32,
    },
    /// `AGENTFLOW_LOCK` holds something else than `write` or `check`.
    #[error(
        "AGENTFLOW_LOCK is `{value}`: set it to `write` to write the lock of the graph's version, or unset it to check the graph against its locks"
    )]
    Mode {
        /// What the variable holds.
        value: String,
    },
    /// No lock directory is known: the graph declares none and `CARGO_MANIFEST_DIR` is not
    /// set.
    #[error(
        "no lock directory for graph `{id}`: CARGO_MANIFEST_DIR is not set; run the check through `cargo test` (`agentflow graphs check`)"
    )]
    NoDirectory {
        /// The graph's id.
        id: String,
    },
    /// The node shape `#[graph]` recorded for the graph is not JSON (the macro and the runtime
    /// are of different versions).
    #[error(
        "the node shape recorded for graph `{id}` is not JSON ({reason}): build with matching versions of agentflow and agentflow-macros"
    )]
    Shape {
        /// The graph's id.
        id: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A file in the lock directory named like a lock with its version written with leading
    /// zeros (`v01.lock`): no version reads it, so it would silently check nothing.
    #[error(
        "{} is not a lock name agentflow reads: the lock of version {version} is named `v{version}.lock`, its version written without leading zeros; rename the file, or delete it",
        path.display()
    )]
    Misnamed {
        /// The file.
        path: PathBuf,
        /// The version its name writes with leading zeros.
        version: u32,
    },
    /// The graph differs from the lock of its own version, or threads of an older locked
    /// version could not resume on it.
    #[error("{}", mismatch(id, *version, lock, changes, problems))]
    Mismatch {
        /// The graph's id.
        id: String,
        /// The graph's version.
        version: u32,
        /// The lock of the graph's version.
        lock: PathBuf,
        /// How the graph differs from the lock of its version, one sentence each (empty when
        /// it matches).
        changes: Vec<String>,
        /// What threads of older versions would meet, each with what to declare.
        problems: Vec<String>,
    },
}

/// The message of [`LockError::Mismatch`]: the changes against the graph's own lock, with what
/// to do, then each problem with an older version.
fn mismatch(id: &str, version: u32, lock: &std::path::Path, changes: &[String], problems: &[String]) -> String {
    let mut out = format!("graph `{id}` version {version} does not match its locks:");
    if !changes.is_empty() {
        out.push_str(&format!("\n- it differs from the lock of version {version}, {}:", lock.display()));
        for change in changes {
            out.push_str(&format!("\n    {change}"));
        }
        out.push_str(&format!(
            "\n  raise `version = {}` in `#[graph]` (threads of version {version} then resume through \
             `migrate(from = {version}, ..)`), or if version {version} was never released, lock it again \
             with `agentflow graphs lock`",
            version.saturating_add(1)
        ));
    }
    for problem in problems {
        out.push_str(&format!("\n- {problem}"));
    }
    out
}
