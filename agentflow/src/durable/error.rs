//! Errors of persistence and resume.

use agentflow_store::{CommitError, EffectError, LeaseError, ReadError};

/// Reading or writing the store failed; the run stopped rather than go on
/// without its checkpoints.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PersistError {
    /// Writing a checkpoint failed.
    #[error("could not commit the checkpoint: {0}")]
    Commit(#[from] CommitError),
    /// Reading the store failed.
    #[error("could not read the store: {0}")]
    Read(#[from] ReadError),
    /// Taking or renewing the thread's lease failed.
    #[error("lease: {0}")]
    Lease(#[from] LeaseError),
    /// Journaling an effect failed.
    #[error("could not journal the effect: {0}")]
    Effect(#[from] EffectError),
    /// A stored state, update or effect result no longer deserialises.
    #[error(
        "thread `{thread}` checkpoint {seq}: stored {what} does not decode as the current type ({source}); \
         the state type changed without a `#[state(version = N)]` bump, or the data is damaged"
    )]
    Decode {
        /// The thread.
        thread: String,
        /// The checkpoint.
        seq: u64,
        /// What was being read.
        what: &'static str,
        /// The decoder's message.
        source: serde_json::Error,
    },
    /// A value would not read back as written (a NaN, an infinity, nesting
    /// too deep); nothing of it was stored.
    #[error("refused to store {what}: {source}")]
    Value {
        /// What was being written.
        what: &'static str,
        /// Which part and why.
        #[source]
        source: crate::core::value_check::ValueError,
    },
    /// A value could not be serialised.
    #[error("could not serialise {what}: {source}")]
    Encode {
        /// What was being written.
        what: &'static str,
        /// The encoder's message.
        source: serde_json::Error,
    },
    /// The blocking task that ran a store call panicked or was cancelled
    /// (the runtime is shutting down).
    #[error("the store task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
    /// A call cut off mid-way, that the step did not make again, could not
    /// be recorded as an unknown outcome; the step was not committed, so a
    /// resume tries again.
    #[error("could not record the unknown outcome of `{key}` (node `{node}`): {reason}; resume the thread to retry")]
    UnknownOutcome {
        /// Node that made the call.
        node: String,
        /// The call's journal key.
        key: String,
        /// What failed.
        reason: String,
    },
    /// The store's commit writer stopped without answering a commit; the
    /// commit may or may not be on disk. Resume the thread to find out.
    #[error("the store dropped a commit without answering; resume the thread to see what was stored")]
    CommitDropped,
    /// A value holds text that looks like a credential (an API key, a token, a private key);
    /// nothing of it was stored. The error names where, never the value.
    #[error(
        "refused to store {what}: `{pointer}` looks like {}; keep the secret in a secret store and put \
         only its reference (`agentflow::secret::Secret`) into the state or the call, or, for a state field that \
         must hold it, mark the field `#[state(credential)]` and use a store with encryption at rest",
        kind.with_article()
    )]
    Credential {
        /// What was being written.
        what: &'static str,
        /// The JSON pointer (RFC 6901) of the string inside it (`/messages/3/content`).
        pointer: String,
        /// What it looks like.
        kind: crate::secret::CredentialKind,
    },
    /// The state has fields marked `#[state(credential)]`, and the store keeps payloads in
    /// clear; the run did not start.
    #[error(
        "`{state}` marks field `{field}` as holding credentials, but this store does not encrypt payloads; \
         enable encryption at rest (the store's `encryption` feature) or keep the credential out of the state \
         as a `Secret<T>` reference"
    )]
    CredentialsUnsealed {
        /// The state type.
        state: &'static str,
        /// The first field marked as holding credentials.
        field: &'static str,
    },
    /// Journaling a compensation (saga) failed; the thread stays
    /// `compensating`, and a resume continues where it stopped.
    #[error("could not journal the compensation: {0}; resume the thread to continue compensating")]
    Saga(String),
}

/// A thread cannot be resumed with this graph.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ResumeError {
    /// No thread has this id.
    #[error("no thread `{thread}` in the store; start it with `.run(input)` first")]
    UnknownThread {
        /// The thread id.
        thread: String,
    },
    /// The thread has no checkpoint to continue from.
    #[error("thread `{thread}` has no checkpoint to resume from")]
    NoCheckpoint {
        /// The thread id.
        thread: String,
    },
    /// The graph's structure changed since the thread was stored.
    #[error(
        "graph fingerprint changed since thread `{thread}` was stored ({stored} -> {current}): {changes}; \
         resume it with the graph version that started it, or fork a new thread"
    )]
    GraphChanged {
        /// The thread id.
        thread: String,
        /// The stored fingerprint.
        stored: String,
        /// This graph's fingerprint.
        current: String,
        /// What changed, node by node, as far as the stored description tells.
        changes: String,
    },
    /// The state's schema version changed and no migration covers it.
    #[error(
        "thread `{thread}` stores state version {stored} but `{state}` is version {current}; \
         register a migration with `graph.app().migration({stored}, |old| ..)`"
    )]
    SchemaVersion {
        /// The thread id.
        thread: String,
        /// The state type.
        state: &'static str,
        /// The stored version.
        stored: u32,
        /// The current version.
        current: u32,
    },
    /// A migration function refused the stored state.
    #[error("migration of thread `{thread}` from state version {from} failed: {message}")]
    Migration {
        /// The thread id.
        thread: String,
        /// The version migrated from.
        from: u32,
        /// The migration's message.
        message: String,
    },
    /// The version changed and the checkpoint to resume has no full snapshot to migrate.
    #[error(
        "thread `{thread}` must be migrated from state version {stored}, but checkpoint {seq} holds only \
         a delta; finish or interrupt the thread with the old version first"
    )]
    NeedsSnapshot {
        /// The thread id.
        thread: String,
        /// The checkpoint.
        seq: u64,
        /// The stored version.
        stored: u32,
    },
    /// The thread already finished; there is nothing to resume.
    #[error("thread `{thread}` already ended ({status}); fork it from a checkpoint to run it again")]
    Finished {
        /// The thread id.
        thread: String,
        /// How it ended.
        status: String,
    },
    /// The thread was stored by a newer version of its graph than the one resuming it: a
    /// thread never moves back to an older version. (Appended last.)
    #[error(
        "thread `{thread}` was stored by version {stored} of graph `{graph}`, and this build runs version \
         {current}; resume it with a build of version {stored} or later (a thread never moves back to an \
         older version)"
    )]
    GraphNewer {
        /// The thread id.
        thread: String,
        /// The graph's id.
        graph: String,
        /// The version the thread is stored on.
        stored: u32,
        /// This graph's version.
        current: u32,
    },
    /// The thread waits in a node the current version no longer has, and no `migrate(..)` of the
    /// graph says where it goes; nothing was changed. (Appended last.)
    #[error(
        "thread `{thread}` was stored by version {from} of graph `{graph}` and is parked in node `{node}`, \
         which version {to} no longer has: declare where it goes with \
         `migrate(from = {declare_from}, nodes({node} -> <node or END>))`; the thread stays on version {from}"
    )]
    NodeUnmapped {
        /// The thread id.
        thread: String,
        /// The graph's id.
        graph: String,
        /// The node, as the last declared migration names it.
        node: String,
        /// The version the thread is stored on.
        from: u32,
        /// This graph's version.
        to: u32,
        /// The `migrate(from = ..)` to declare the node's fate in.
        declare_from: u32,
    },
    /// A declared `args(tool = ..)` function refused the arguments of an approval the thread
    /// waits for; nothing was changed. (Appended last.)
    #[error(
        "thread `{thread}` stays on version {from} of its graph: the arguments of its pending approval \
         `{approval}` of `{tool}` could not be migrated to version {to}: {reason}; fix the function given in \
         `args({tool} = ..)`, or declare `args({tool} = cancel)`"
    )]
    ArgsRefused {
        /// The thread id.
        thread: String,
        /// The approval.
        approval: String,
        /// The tool, as the version the function maps to names it.
        tool: String,
        /// The version the thread is stored on.
        from: u32,
        /// This graph's version.
        to: u32,
        /// What the function returned.
        reason: String,
    },
    /// A declared argument mapping (`args(tool = path)`) refused the arguments of a tool call
    /// the model asked for in a reply journaled before the move; nothing was changed. (Appended
    /// last.)
    #[error(
        "thread `{thread}` stays on version {from} of its graph: the arguments of the call `{call}` of `{tool}` its \
         model asked for (in a reply journaled before the move) could not be migrated to version {to}: {reason}; fix \
         the function given in `args({tool} = ..)`, or declare `args({tool} = cancel)`"
    )]
    CallArgsRefused {
        /// The thread id.
        thread: String,
        /// The call's id.
        call: String,
        /// The tool, as the version the function maps to names it.
        tool: String,
        /// The version the thread is stored on.
        from: u32,
        /// This graph's version.
        to: u32,
        /// What the function returned.
        reason: String,
    },
    /// Two nodes the thread stands at (or has kept writes of, or asks questions from) would both
    /// take the same name on the current version (`nodes(a -> c)` with `c` kept): one's work
    /// would be lost; nothing was changed. (Appended last.)
    #[error(
        "thread `{thread}` stays on version {from} of its graph: its nodes `{first}` and `{second}` would both \
         become `{node}` on version {to}, and one's work would be lost; resume the thread on version {from} until \
         that step finishes, or map one of them elsewhere in `migrate(from = {from}, nodes(..))`"
    )]
    NodesMerged {
        /// The thread id.
        thread: String,
        /// One of the two nodes, as the stored version names it.
        first: String,
        /// The other.
        second: String,
        /// The name both take on this graph's version.
        node: String,
        /// The version the thread is stored on.
        from: u32,
        /// This graph's version.
        to: u32,
    },
    /// A direct call ([`Ctx::run_tool`](crate::Ctx::run_tool)) of a tool whose arguments
    /// `args(..)` maps ran (or began) in the step the move would continue, and the arguments it
    /// was made with are not kept (no approval holds them): on the current version it could not
    /// be found and would run again; nothing was changed. (Appended last.)
    #[error(
        "thread `{thread}` stays on version {from} of its graph: direct call number {call} of `{tool}` by node `{node}` \
         ran before the move, and its arguments, which `args({now} = ..)` maps for version {to}, are not kept, so \
         version {to} would run it again; resume the thread on version {from} until that step finishes, or drop the \
         `args({now} = ..)` mapping"
    )]
    DirectCallArgsUnknown {
        /// The thread id.
        thread: String,
        /// The node that made the call, as the stored version names it.
        node: String,
        /// The call's position among the direct calls of the node's attempt (its id is
        /// `{node}-{tool}-{call}`).
        call: u32,
        /// The tool, as the stored version names it.
        tool: String,
        /// The tool, as this graph's version names it.
        now: String,
        /// The version the thread is stored on.
        from: u32,
        /// This graph's version.
        to: u32,
    },
}

/// Reading or branching a thread's history failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HistoryError {
    /// The graph has no store; attach one with `graph.app().store(..)`.
    #[error("this graph has no store; attach one with `graph.app().store(store)`")]
    NoStore,
    /// No thread has this id.
    #[error("no thread `{thread}` in the store")]
    UnknownThread {
        /// The thread id.
        thread: String,
    },
    /// The thread has no checkpoint with this number.
    #[error("thread `{thread}` has no checkpoint {seq}; list them with `app.history(thread)`")]
    UnknownCheckpoint {
        /// The thread id.
        thread: String,
        /// The checkpoint asked for.
        seq: u64,
    },
    /// The store failed or held data that does not decode.
    #[error(transparent)]
    Persist(#[from] PersistError),
    /// Compaction failed.
    #[error("compaction failed: {0}")]
    Compact(#[from] agentflow_store::CompactError),
    /// The thread's calls were undone by its compensations (or are being undone), so its
    /// state cannot be updated and carried on.
    #[error(
        "thread `{thread}` is {status}: its calls were undone, so its state cannot be updated and run on; \
         resume it to finish compensating, or fork it at a checkpoint to run again from there"
    )]
    Undone {
        /// The thread id.
        thread: String,
        /// `compensating` or `compensated`.
        status: &'static str,
    },
    /// The app's access policy refused the operation. (Appended last.)
    #[error(transparent)]
    Access(#[from] crate::access::AccessError),
    /// A purge or a legal hold was refused by the store (a hold, a store without purge).
    /// (Appended last.)
    #[error(transparent)]
    Purge(#[from] agentflow_store::PurgeError),
    /// A run holds the thread (or one of its subgraph children): it is not purged under a
    /// running run. (Appended last.)
    #[error(
        "thread `{thread}` is in use: `{holder}` holds it until {expires_at}; cancel the run (`agentflow cancel`) \
         and purge once it has stopped"
    )]
    InUse {
        /// The thread held (the one asked for, or one of its subgraph children).
        thread: String,
        /// Who holds its lease.
        holder: String,
        /// Unix millis when the lease expires.
        expires_at: u64,
    },
    /// A read of personal data could not be recorded in the thread's audit log, so the state
    /// was not handed out. (Appended last.)
    #[error("the read of thread `{thread}`'s personal data could not be audited, so it was not returned: {source}")]
    PersonalDataAudit {
        /// The thread read.
        thread: String,
        /// Why the entry was not written.
        #[source]
        source: Box<agentflow_store::AuditError>,
    },
    /// A fork to a checkpoint written by an older version of the thread's graph, before the
    /// thread moved to a newer one, when that move was made by a build that did not record which
    /// graph the thread had before it: the forked thread could not be moved again. Nothing was
    /// written. (Appended last.)
    #[error(
        "checkpoint {seq} of thread `{thread}` was written by version {from} of its graph, before the thread moved \
         to version {to} at checkpoint {moved_at}, and that move did not record the graph the thread had before it; \
         fork at checkpoint {moved_at} or later"
    )]
    ForkAcrossVersions {
        /// The thread id.
        thread: String,
        /// The checkpoint asked for.
        seq: u64,
        /// The checkpoint the thread's move to a newer version wrote.
        moved_at: u64,
        /// The version that wrote checkpoint `seq`.
        from: u32,
        /// The version the thread moved to.
        to: u32,
    },
    /// An update of a thread whose state is stored at an older state version (moved to a newer
    /// version of its graph, no step run there yet) could not bring the state to the current
    /// version: the state migration refused it (`source`), or the latest checkpoint holds only
    /// updates since its last whole state ([`ResumeError::NeedsSnapshot`]). Nothing was written.
    #[error(
        "the update of thread `{thread}` must migrate its state from state version {stored} to {current}: {source}"
    )]
    StateMigration {
        /// The thread id.
        thread: String,
        /// The state version the thread's state is stored at.
        stored: u32,
        /// The current state version.
        current: u32,
        /// Why the state could not be migrated.
        #[source]
        source: Box<ResumeError>,
    },
    /// A `rollback` follow-up would go back to checkpoint `seq`, which holds the state as an
    /// older state version stored it (before the thread's move to a newer version of its
    /// graph): a restart does not migrate a state. Nothing was written.
    #[error(
        "a rollback of thread `{thread}` would go back to checkpoint {seq}, whose state is stored at state version \
         {stored} (the thread's is {current} since its move); a restart does not migrate it: fork the thread to \
         checkpoint {seq} and resume it (the resume migrates), or roll back only runs that started after the move"
    )]
    RollbackAcrossStateVersions {
        /// The thread id.
        thread: String,
        /// The checkpoint the rollback would go back to.
        seq: u64,
        /// The state version that checkpoint's state is stored at.
        stored: u32,
        /// The thread's state version.
        current: u32,
    },
}

impl From<ReadError> for HistoryError {
    fn from(e: ReadError) -> Self {
        HistoryError::Persist(e.into())
    }
}

/// Why a run could not open, or keep, its thread: what durable execution tells the run, which
/// reads it as the matching `RunError`.
#[derive(Debug)]
pub(crate) enum ThreadError {
    /// A new thread was asked for under an id that exists.
    Exists { thread: String },
    /// Another holder has the thread's lease until `expires_at` (unix millis).
    Busy { thread: String, holder: String, expires_at: u64 },
    /// The run lost the thread's lease (to `holder`, when known).
    LeaseLost { thread: String, holder: Option<String> },
    /// The store failed, or a value was refused.
    Persist(PersistError),
    /// The thread cannot be resumed as it is.
    Resume(ResumeError),
}

impl From<PersistError> for ThreadError {
    fn from(e: PersistError) -> Self {
        ThreadError::Persist(e)
    }
}

impl From<ResumeError> for ThreadError {
    fn from(e: ResumeError) -> Self {
        ThreadError::Resume(e)
    }
}
