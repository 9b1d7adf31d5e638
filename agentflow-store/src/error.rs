//! One error type per family of operations. Each is `#[non_exhaustive]`; failures of the file or
//! of a stored record are a [`StorageError`], which every family wraps and which names the path.

use std::path::PathBuf;

use crate::codec::too_deep;
use crate::record::{ApprovalStatus, Lease, LegalHold, ThreadStatus};

/// A boxed error returned by a caller-supplied callback.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The file, or a record in it, could not be used.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum StorageError {
    /// redb found the file damaged.
    #[error(
        "{}: the store file is corrupted ({detail}); restore it from a backup or move it aside and start a new store",
        path.display()
    )]
    Corrupted {
        /// The store file.
        path: PathBuf,
        /// What redb reported.
        detail: String,
    },
    /// A record's bytes do not decode.
    #[error(
        "{}: record {key} in table `{table}` cannot be decoded ({reason}); the file was damaged or written by an incompatible program: restore it from a backup",
        path.display()
    )]
    Decode {
        /// The store file.
        path: PathBuf,
        /// Table holding the record.
        table: String,
        /// The record's key, rendered for humans.
        key: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Reading or writing the file failed.
    #[error(
        "{}: i/o error ({detail}); check the disk, free space and permissions, then reopen the store",
        path.display()
    )]
    Io {
        /// The store file.
        path: PathBuf,
        /// The I/O error kind.
        kind: std::io::ErrorKind,
        /// The I/O error message.
        detail: String,
    },
    /// The store was closed, or its writer thread stopped after a failure.
    #[error("{}: the store is closed ({detail}); open it again", path.display())]
    Closed {
        /// The store file.
        path: PathBuf,
        /// Why.
        detail: String,
    },
    /// Any other redb failure.
    #[error("{}: storage failure ({detail}); reopen the store", path.display())]
    Backend {
        /// The store file.
        path: PathBuf,
        /// What redb reported.
        detail: String,
    },
    /// A database server refused a value it cannot hold: a NUL byte in a PostgreSQL `text`
    /// value (an id, a name, a key). Nothing was written.
    #[error(
        "{}: the database server cannot hold a value ({detail}); nothing was written: remove the NUL byte from the id, name or key that holds one",
        path.display()
    )]
    Unstorable {
        /// The store (a server URL without its password).
        path: PathBuf,
        /// What the server reported.
        detail: String,
    },
    /// A database server could not be reached: the connection was refused, timed out or dropped.
    #[error(
        "{}: cannot reach the database server ({detail}); check that it is running and that the host and port in the URL are right, then retry",
        path.display()
    )]
    Unreachable {
        /// The store (a server URL without its password).
        path: PathBuf,
        /// What the client reported.
        detail: String,
    },
    /// A database server refused the login.
    #[error(
        "{}: the database server refused the login ({detail}); fix the user name and password in the URL, or the server's pg_hba.conf",
        path.display()
    )]
    Authentication {
        /// The store (a server URL without its password).
        path: PathBuf,
        /// What the server reported.
        detail: String,
    },
    /// A transaction kept failing on conflicts with concurrent ones (serialization failures,
    /// deadlocks), also after the store retried it.
    #[error(
        "{}: the transaction conflicted with concurrent ones {attempts} times in a row ({detail}); nothing was written: retry the operation",
        path.display()
    )]
    Conflict {
        /// The store (a server URL without its password).
        path: PathBuf,
        /// How many times it was tried.
        attempts: u32,
        /// What the server reported last.
        detail: String,
    },
    /// A sealed payload (feature `encryption`) could not be sealed or opened: its thread's data
    /// key is gone (destroyed by a purge, or the key store is not the one the data was written
    /// with), the key-encryption key that wraps it is not available, or the sealed bytes were
    /// changed or moved to another thread or field. Nothing was written.
    #[error("thread `{thread}`: a sealed {what} cannot be used ({detail})")]
    Sealed {
        /// The thread whose payload it is.
        thread: String,
        /// Which payload (`checkpoint snapshot`, `effect result`, ..).
        what: String,
        /// Why, and what to do about it.
        detail: String,
    },
}

/// A JSON value handed to the store nests deeper than its limit ([`MAX_JSON_DEPTH`] for
/// approval conditions, [`MAX_DOCUMENT_DEPTH`] for audit details and checkpoint metadata), so
/// it could not be read back; nothing was written.
///
/// [`MAX_JSON_DEPTH`]: crate::MAX_JSON_DEPTH
/// [`MAX_DOCUMENT_DEPTH`]: crate::MAX_DOCUMENT_DEPTH
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{path}` nests deeper than {limit} levels of arrays and objects; the store writes only JSON it can read back: flatten the value or store it as a string"
)]
pub struct JsonTooDeep {
    /// Where the limit is first exceeded, starting with the value's name (`conditions.a[0]`).
    pub path: String,
    /// The limit that applies to this value.
    pub limit: usize,
}

impl JsonTooDeep {
    /// Refuses JSON nested deeper than `limit`: the store writes only what it reads back.
    pub(crate) fn check(value: &serde_json::Value, limit: usize, root: &str) -> Result<(), JsonTooDeep> {
        match too_deep(value, limit, root) {
            None => Ok(()),
            Some(path) => Err(JsonTooDeep { path, limit }),
        }
    }
}

/// [`RedbStore::open`](crate::RedbStore::open) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The file is locked by another open store: another process, or another `RedbStore` in
    /// this one.
    #[error("{}: {}", path.display(), already_open(held_by.as_deref()))]
    AlreadyOpen {
        /// The store file.
        path: PathBuf,
        /// The server holding it, as its [sidecar](crate::redb_owner) describes it
        /// ([`Owner::describe`](crate::redb_owner::Owner::describe): program, pid and socket),
        /// when a live process left one; `None` for any other holder.
        held_by: Option<String>,
    },
    /// The file is not a redb database at all (a text file, random bytes, a truncated header).
    #[error(
        "{}: not an agentflow store ({detail}); point the store at another file, or delete this one if it is expendable",
        path.display()
    )]
    NotAStore {
        /// The file.
        path: PathBuf,
        /// What redb reported.
        detail: String,
    },
    /// The file is empty. A store file never is (it is created whole), so this is not a store,
    /// or a store that lost its contents; it is not turned into a new store.
    #[error(
        "{}: the file is empty, so it is not an agentflow store (a store file is never empty); if a store was expected here, restore it from a backup, else delete the empty file and open again to create a new store",
        path.display()
    )]
    Empty {
        /// The file.
        path: PathBuf,
    },
    /// A redb database written by another program.
    #[error(
        "{}: a redb database written by another program (tables: {}); agentflow-store will not modify it: use another file",
        path.display(), tables.join(", ")
    )]
    Foreign {
        /// The file.
        path: PathBuf,
        /// The tables found in it.
        tables: Vec<String>,
    },
    /// The file is damaged.
    #[error(
        "{}: the store file is corrupted ({detail}); restore it from a backup or move it aside and start a new store",
        path.display()
    )]
    Corrupted {
        /// The file.
        path: PathBuf,
        /// What was found.
        detail: String,
    },
    /// The file was written by another version of agentflow-store (or an older redb file format).
    #[error(
        "{}: store format {found} is not supported by this build (it reads format {supported}); {}",
        path.display(),
        format_advice(found, supported)
    )]
    UnsupportedFormat {
        /// The file.
        path: PathBuf,
        /// Format found in the file.
        found: String,
        /// Format this build reads.
        supported: String,
    },
    /// The file could not be opened or created.
    #[error("{}: cannot open the store file ({source}); check the path and permissions", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// Any other failure while opening.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// A read failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// A parent link leads to a checkpoint that is not stored, before a snapshot was found.
    #[error(
        "{}: checkpoint {seq} of thread `{thread}` cannot be rebuilt: its ancestor {missing} is missing and no snapshot was found before it; the history was damaged: fork from a checkpoint that has a snapshot",
        path.display()
    )]
    BrokenChain {
        /// The store file.
        path: PathBuf,
        /// Thread.
        thread: String,
        /// Checkpoint asked for.
        seq: u64,
        /// The missing ancestor.
        missing: u64,
    },
    /// The file or a record failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// [`Store::commit_step`](crate::Store::commit_step) or [`Store::flush`](crate::Store::flush)
/// failed; nothing of the commit was written.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum CommitError {
    /// The committing holder no longer holds the thread's lease.
    #[error(
        "thread `{thread}`: `{holder}` no longer holds the lease (current: {}); stop this run, another executor has taken the thread over",
        current.as_ref().map_or_else(|| "none".to_string(), |l| format!("`{}` until {}", l.holder, l.expires_at))
    )]
    LeaseLost {
        /// Thread.
        thread: String,
        /// Holder named in the commit.
        holder: String,
        /// The lease as stored.
        current: Option<Lease>,
    },
    /// The checkpoint's seq is not greater than the thread's latest.
    #[error(
        "thread `{thread}`: checkpoint seq {seq} is not after the latest checkpoint {latest}; history is never rewritten: use seq {}",
        latest.saturating_add(1)
    )]
    SeqNotIncreasing {
        /// Thread.
        thread: String,
        /// Seq of the refused checkpoint.
        seq: u64,
        /// Latest stored seq.
        latest: u64,
    },
    /// The checkpoint's parent does not exist (or is not older than it).
    #[error(
        "thread `{thread}`: checkpoint {seq} names parent {parent}, which is not an older stored checkpoint of the thread"
    )]
    ParentMissing {
        /// Thread.
        thread: String,
        /// Seq of the refused checkpoint.
        seq: u64,
        /// The named parent.
        parent: u64,
    },
    /// The commit is inconsistent.
    #[error("thread `{thread}`: invalid commit: {reason}")]
    Invalid {
        /// Thread.
        thread: String,
        /// What is wrong.
        reason: String,
    },
    /// An approval carried in the commit was refused.
    #[error(transparent)]
    Approval(ApprovalError),
    /// An audit detail or the checkpoint metadata nests too deep to be read back.
    #[error("thread `{thread}`: {source}")]
    TooDeep {
        /// Thread.
        thread: String,
        /// Which value and where.
        #[source]
        source: JsonTooDeep,
    },
    /// The file or a record failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

impl From<ApprovalError> for CommitError {
    fn from(err: ApprovalError) -> Self {
        match err {
            ApprovalError::Storage(e) => CommitError::Storage(e),
            other => CommitError::Approval(other),
        }
    }
}

/// A lease operation failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum LeaseError {
    /// Another holder has an unexpired lease.
    #[error(
        "thread `{thread}` is busy: `{holder}` holds it until {expires_at}; wait for that run to finish or for the lease to expire"
    )]
    ThreadBusy {
        /// Thread.
        thread: String,
        /// Current holder.
        holder: String,
        /// Unix millis when its lease expires.
        expires_at: u64,
    },
    /// Renew or release by someone who does not hold the lease.
    #[error(
        "thread `{thread}`: `{holder}` does not hold the lease (current: {}); acquire it first",
        current.as_ref().map_or_else(|| "none".to_string(), |l| format!("`{}` until {}", l.holder, l.expires_at))
    )]
    NotHeld {
        /// Thread.
        thread: String,
        /// Who asked.
        holder: String,
        /// The lease as stored.
        current: Option<Lease>,
    },
    /// The file or a record failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// Writing to the effect journal failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum EffectError {
    /// The file failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// Appending to the audit log failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum AuditError {
    /// The entry's detail nests too deep to be read back; nothing was written.
    #[error("thread `{thread}`: audit entry `{kind}`: {source}")]
    TooDeep {
        /// Thread.
        thread: String,
        /// The entry's kind.
        kind: String,
        /// Where.
        #[source]
        source: JsonTooDeep,
    },
    /// The file failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// An approval operation was refused.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ApprovalError {
    /// No approval has this id.
    #[error("approval `{id}` does not exist")]
    NotFound {
        /// Approval id.
        id: String,
    },
    /// `put_approval` with an id that is taken.
    #[error("approval `{id}` already exists; approvals are created once, use a new id")]
    AlreadyExists {
        /// Approval id.
        id: String,
    },
    /// `put_approval` with a status other than `PENDING` or `OUTCOME_UNKNOWN`.
    #[error("approval `{id}` must be created PENDING (or OUTCOME_UNKNOWN), not {status}")]
    NotPending {
        /// Approval id.
        id: String,
        /// Status given.
        status: ApprovalStatus,
    },
    /// The approval is not in the expected status: someone else moved it first.
    #[error("approval `{id}` is already {current} (expected {expected}); it was decided elsewhere: reload it")]
    AlreadyDecided {
        /// Approval id.
        id: String,
        /// Status expected by the caller.
        expected: ApprovalStatus,
        /// Status found.
        current: ApprovalStatus,
    },
    /// The approval's conditions nest too deep to be read back; nothing was written.
    #[error("approval `{id}`: {source}")]
    TooDeep {
        /// Approval id.
        id: String,
        /// Where.
        #[source]
        source: JsonTooDeep,
    },
    /// The requested move is not in the state machine.
    #[error(
        "approval `{id}`: {from} -> {to} is not a legal transition (PENDING -> APPROVED | REJECTED | EXPIRED | CANCELLED, APPROVED -> EXECUTING | EXPIRED | CANCELLED, EXECUTING -> SUCCEEDED | FAILED)"
    )]
    IllegalTransition {
        /// Approval id.
        id: String,
        /// From status.
        from: ApprovalStatus,
        /// To status.
        to: ApprovalStatus,
    },
    /// The file or a record failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// [`Store::compact`](crate::Store::compact) failed; the data part is all-or-nothing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CompactError {
    /// The thread does not exist.
    #[error("thread `{thread}` does not exist")]
    UnknownThread {
        /// Thread.
        thread: String,
    },
    /// The thread may still continue.
    #[error(
        "thread `{thread}` is {status}; only finished threads (completed, failed, cancelled, budget_exhausted) are compacted"
    )]
    NotFinished {
        /// Thread.
        thread: String,
        /// Its status.
        status: ThreadStatus,
    },
    /// The caller's fold callback failed; nothing was changed.
    #[error("thread `{thread}`: folding the state of checkpoint {seq} failed: {source}")]
    Fold {
        /// Thread.
        thread: String,
        /// Checkpoint being folded.
        seq: u64,
        /// The callback's error.
        #[source]
        source: BoxError,
    },
    /// Reading the history failed.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// The file failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The thread, or a thread it is a subgraph child of, is under legal hold: its history is
    /// kept whole. Nothing was changed.
    #[error(
        "thread `{thread}` is under legal hold (set on `{held}` by `{}` at {}: {}); nothing was compacted: release the hold first if the case allows it",
        hold.by, hold.at, hold.reason
    )]
    Held {
        /// The thread asked for.
        thread: String,
        /// The held thread: `thread` itself or one of its ancestors.
        held: String,
        /// The hold.
        hold: LegalHold,
    },
}

/// [`Store::purge_thread`](crate::Store::purge_thread) or
/// [`Store::set_legal_hold`](crate::Store::set_legal_hold) failed; nothing was changed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum PurgeError {
    /// The thread, one of its subgraph children or a thread it is a subgraph child of is
    /// under legal hold.
    #[error(
        "thread `{thread}` is under legal hold (set by `{}` at {}: {}); nothing was purged: release the hold first if the case allows it",
        hold.by, hold.at, hold.reason
    )]
    Held {
        /// The held thread (the one asked for, one of its subgraph children or an ancestor).
        thread: String,
        /// The hold.
        hold: LegalHold,
    },
    /// The thread does not exist.
    #[error("thread `{thread}` does not exist; check the id (`agentflow threads` lists them)")]
    UnknownThread {
        /// Thread.
        thread: String,
    },
    /// The tombstone entry's detail nests too deep to be read back.
    #[error("thread `{thread}`: {source}")]
    TooDeep {
        /// Thread.
        thread: String,
        /// Where.
        #[source]
        source: JsonTooDeep,
    },
    /// The store does not implement purge or legal holds.
    #[error("this store cannot purge threads or hold them ({detail}); use a store that does (redb, PostgreSQL)")]
    Unsupported {
        /// Which method is missing.
        detail: String,
    },
    /// Reading the threads to purge failed.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// The file or a record failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

impl From<AuditError> for PurgeError {
    fn from(err: AuditError) -> Self {
        match err {
            AuditError::TooDeep { thread, source, .. } => PurgeError::TooDeep { thread, source },
            AuditError::Storage(e) => PurgeError::Storage(e),
        }
    }
}

/// What to do about a store file of another format.
fn format_advice(found: &str, supported: &str) -> &'static str {
    // `supported` names one format or several (`3 to 5`): older is below the oldest of them.
    let oldest = supported.split(|c: char| !c.is_ascii_digit()).filter_map(|n| n.parse::<u64>().ok()).min();
    match (found.parse::<u64>(), oldest) {
        (Ok(found), Some(supported)) if found < supported => {
            "it was written by an older agentflow-store: finish or read its threads with that version, \
             then start a new file (there is no in-place upgrade)"
        }
        _ => "it was written by a newer agentflow-store: upgrade agentflow-store",
    }
}

/// What [`OpenError::AlreadyOpen`] says after the path: who holds the file and what to do.
fn already_open(held_by: Option<&str>) -> String {
    match held_by {
        Some(server) => format!(
            "held by the agentflow server {server}, which owns it while it runs (a redb file is open in one process \
             at a time); `agentflow pending`, `approve`, `reject` and `show` reach it through its socket, and \
             programs through its HTTP API; host this app in that server, or stop the server and run again"
        ),
        None => "another process has this store open; stop it or use another file".to_string(),
    }
}
