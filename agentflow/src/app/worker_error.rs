//! What goes wrong submitting, controlling or working on queued runs: [`WorkerError`].

use agentflow_store::QueueError;

#[cfg(doc)]
use crate::app::App;
use crate::durable::PersistError;

/// Submitting, controlling or working on queued runs failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkerError {
    /// The app has no store to queue runs in.
    #[error("queued runs need a store; attach one with `graph.app().store(store)`")]
    NoStore,
    /// `submit` for a thread that exists already.
    #[error("thread `{thread}` already exists; continue it with `app.submit_resume(thread)` or pick a new thread id")]
    ThreadExists {
        /// The thread.
        thread: String,
    },
    /// `submit_resume` for a thread that does not exist.
    #[error("thread `{thread}` does not exist; start it with `app.submit(thread, input)`")]
    UnknownThread {
        /// The thread.
        thread: String,
    },
    /// The run queue refused or failed.
    #[error(transparent)]
    Queue(#[from] QueueError),
    /// Reading or encoding failed.
    #[error(transparent)]
    Persist(#[from] PersistError),
    /// `submit_resume` for a thread that waits in `cx.interrupt` for a person's value, which a
    /// worker cannot give. (Appended last.)
    #[error(
        "thread `{thread}` waits at node `{node}` for a value; answer it (the approval inbox, `agentflow answer`, `ApprovalDesk::answer_interrupt`: a run a worker parked is then woken, otherwise submit it again), continue it with `app.runner(deps).thread(..).resume_with(value)`, or cancel it with `app.cancel_run`"
    )]
    ValueRequired {
        /// The thread.
        thread: String,
        /// The node that asked.
        node: String,
    },
    /// `pause_run` for a thread that is not running: it waits for a person (`interrupted`) or
    /// for its timer (`sleeping`), so there is no step to pause it at. (Appended last.)
    #[error(
        "thread `{thread}` is {status}, not running: there is nothing to pause; it continues once decided or due, or stop it for good with `app.cancel_run`"
    )]
    NotRunning {
        /// The thread.
        thread: String,
        /// Its status (`interrupted` or `sleeping`).
        status: String,
    },
    /// `submit` for a thread id, owner or tenant that holds a NUL byte, which no store keeps (refused
    /// on every store alike, before anything is queued). (Appended last.)
    #[error("the {what} {value:?} contains a NUL byte, which a store cannot keep; choose one without it")]
    NulByte {
        /// What holds it: `thread id`, `owner` or `tenant`.
        what: &'static str,
        /// The value given.
        value: String,
    },
    /// `submit` with no owner for a graph (or a subgraph of it) that lists a tool the policy may
    /// hold for a human's approval: submit with [`App::submit_as`]. Nothing is queued.
    /// (Appended last.)
    #[error(transparent)]
    OwnerRequired(#[from] crate::tool::OwnerRequired),
    /// The app's access policy refused the operation. (Appended last.)
    #[error(transparent)]
    Access(#[from] crate::access::AccessError),
    /// A resume asked for without the graph (the CLI's) of a thread whose graph the store does
    /// not describe: no worker can be named for it. (Appended last.)
    #[error(
        "the store has no description of thread `{thread}`'s graph, so the workers to resume it cannot be named; \
         resume it from the app (`app.submit_resume`)"
    )]
    GraphUnknown {
        /// The thread.
        thread: String,
    },
    /// A submit under an idempotency key kept already: an earlier submit with it started thread
    /// `thread`, and nothing was queued now. `same_request`: that submit was the same as this
    /// one (a retry: its run is the answer); otherwise the key was used for another request.
    /// (Appended last.)
    #[error(
        "idempotency key `{key}` was used already, for thread `{thread}`{}",
        if *same_request {
            " by the same request: that run is its answer"
        } else {
            " by a different request: send a new key with a new request"
        }
    )]
    KeyUsed {
        /// The key.
        key: String,
        /// The thread the first submit with it started.
        thread: String,
        /// Whether that submit was the same request as this one.
        same_request: bool,
    },
    /// A follow-up run refused ([`App::submit_follow_up`]): the thread has a run that is
    /// `status` and the strategy is `reject`, or the strategy (`interrupt`, `rollback`) would
    /// cancel a run no worker has started yet, so that the thread would never exist. Nothing
    /// was queued. (Appended last.)
    #[error(
        "thread `{thread}` has a run that is {status}, so strategy `{strategy}` refuses this follow-up; send it again \
         once that run ended, or with strategy `enqueue` to run it after that run"
    )]
    FollowUpRefused {
        /// The thread.
        thread: String,
        /// How its run stands (its status, or `queued`).
        status: String,
        /// The strategy that refused it (`reject`, `interrupt`, `rollback`).
        strategy: &'static str,
    },
    /// A follow-up run refused ([`App::submit_follow_up`]): thread `thread` was written by
    /// another graph, by a newer version of this one, or by this version built otherwise (its
    /// graph fingerprint is `stored`, this app's `current`), so no worker of this build could
    /// restart it. A thread an older version of this graph wrote is not refused: the worker
    /// moves it to this version first. Nothing was queued. (Appended last.)
    #[error(
        "thread `{thread}` was written by another graph, a newer version of this one, or this version built \
         otherwise (fingerprint {stored}, this graph's {current}), so a follow-up run of this build cannot continue \
         it; send it to the graph and version that wrote the thread; nothing was queued"
    )]
    FollowUpOtherGraph {
        /// The thread.
        thread: String,
        /// The fingerprint of the graph that wrote the thread.
        stored: String,
        /// This app's graph fingerprint.
        current: String,
    },
    /// A follow-up run refused ([`App::submit_follow_up`]): thread `thread` was purged (its
    /// history and state are gone), so there is nothing for a follow-up to continue. Nothing
    /// was queued. (Appended last.)
    #[error(
        "thread `{thread}` was purged: its history and state are gone, so a follow-up run cannot continue it; start          a new thread instead; nothing was queued"
    )]
    FollowUpPurged {
        /// The thread.
        thread: String,
    },
    /// `submit` of a new thread whose id starts with
    /// [`RESERVED_THREAD_PREFIX`](crate::schedule::RESERVED_THREAD_PREFIX) (`schedule:`), the
    /// prefix of the schedules' own audit streams, which no thread may share. Nothing was
    /// queued. (Appended last.)
    #[error(
        "the thread id {thread:?} starts with `schedule:`, which names the audit streams of cron schedules; \
         choose another; nothing was queued"
    )]
    ReservedThreadId {
        /// The thread id.
        thread: String,
    },
}

impl From<agentflow_store::ReadError> for WorkerError {
    fn from(e: agentflow_store::ReadError) -> Self {
        WorkerError::Persist(e.into())
    }
}
