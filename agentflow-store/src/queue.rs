//! The run queue: runs submitted by any process for a pool of workers to claim
//! ([`Store::enqueue_run`](crate::Store::enqueue_run) and the methods after it), and the
//! control flags (cancel, pause) a process that does not run a thread sets on it.
//!
//! A queued run is one row per thread. It stays in the queue while the run is in a worker's
//! hands, so a worker that dies leaves it behind: once the dead worker's lease expires, another
//! worker claims it and resumes the thread from its last checkpoint. A worker removes the row
//! when the run ends ([`Store::settle_run`](crate::Store::settle_run)), or parks it while the
//! thread waits ([`RunWait`]: for a human's approval, its durable timer, or a person's answer);
//! a parked row becomes claimable again once what it waits for is there.
//!
//! With [`RedbStore`](crate::RedbStore) the queue is a table in the file (a submitted run
//! survives a restart) and claims are made by the store's single writer thread; with
//! `PostgresStore` it is a table claimed with `FOR UPDATE SKIP LOCKED`.

use serde::{Deserialize, Serialize};

use crate::error::StorageError;
use crate::record::Lease;

/// What a queued run waits for before a worker may claim it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum RunWait {
    /// Nothing: a worker may claim it (once no live lease holds its thread).
    Ready,
    /// A human's decision: claimable once none of the approvals of the thread and of its
    /// subgraph children at every level (threads whose [`ThreadRecord::parent`](crate::ThreadRecord::parent)s lead to it)
    /// is `PENDING` or `OUTCOME_UNKNOWN`, or
    /// once the thread's durable timer is due (the first approval's expiry: the resumed run
    /// expires it).
    Approval,
    /// The thread's durable timer: claimable once the thread has no timer later than now (it
    /// is due, or the thread was woken otherwise and moved on). (Appended last.)
    Timer,
    /// A person's value for the thread's `cx.interrupt`: claimable once
    /// [`Store::wake_run`](crate::Store::wake_run) makes it ready (recording an answer does), or
    /// once the thread's status is neither `interrupted` nor `failed` (a value of the wrong shape
    /// fails a thread where it waits): it moved on without the queue. (Appended last.)
    Answer,
}

impl RunWait {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            RunWait::Ready => "READY",
            RunWait::Approval => "APPROVAL",
            RunWait::Timer => "TIMER",
            RunWait::Answer => "ANSWER",
        }
    }

    /// The value stored as `name`, if it is one.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "READY" => Some(RunWait::Ready),
            "APPROVAL" => Some(RunWait::Approval),
            "TIMER" => Some(RunWait::Timer),
            "ANSWER" => Some(RunWait::Answer),
            _ => None,
        }
    }
}

/// A request, from any process, to stop a queued or running thread at its next step boundary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum RunControl {
    /// Stop and leave the queue; the thread ends `CANCELLED`.
    Cancel,
    /// Stop and leave the queue; the thread's status becomes
    /// [`ThreadStatus::Paused`](crate::ThreadStatus::Paused) (nothing is undone) and it is
    /// continued by submitting it again to resume.
    Pause,
}

impl RunControl {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            RunControl::Cancel => "CANCEL",
            RunControl::Pause => "PAUSE",
        }
    }

    /// The value stored as `name`, if it is one.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "CANCEL" => Some(RunControl::Cancel),
            "PAUSE" => Some(RunControl::Pause),
            _ => None,
        }
    }
}

/// How a worker ends its claim of a queued run ([`Store::settle_run`](crate::Store::settle_run)):
/// the row leaves the queue ([`Settle::remove`]: the run ended) or is parked until what the
/// thread waits for is there ([`Settle::park`], [`Settle::await_approvals`]).
///
/// A control request set on the row is answered by the same write:
/// - the one the worker acted on ([`Settle::handled`]) is cleared with the claim;
/// - a pause it did not act on is moot and cleared too: the run stopped already, ended or
///   waiting (a pause stops a run at a step boundary, not a wait);
/// - a cancel it did not act on (asked after the worker last read the row's requests, or after
///   the pause it acted on) keeps the row in the queue, claimable at once, so the next claim
///   ends the thread cancelled: a request the store took is never dropped by a settle.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Settle {
    /// `None`: the row leaves the queue; `Some(wait)`: it stays, parked until `wait` is there.
    pub park: Option<RunWait>,
    /// Parked for [`RunWait::Approval`]: the records it waits on (requests and
    /// `OUTCOME_UNKNOWN` records, of the thread or of its subgraph children). Empty: every
    /// waiting record of the thread and its children holds it. Ignored for other waits.
    pub awaits: Vec<String>,
    /// The control request the worker acted on (it stopped the run as asked, or found it moot),
    /// as it read it from the row: a claim's, or a heartbeat's.
    pub handled: Option<RunControl>,
}

impl Settle {
    /// The run ended: the row leaves the queue.
    pub fn remove() -> Self {
        Settle::default()
    }

    /// The thread waits for `wait`: the row stays, parked until it is there.
    pub fn park(wait: RunWait) -> Self {
        Settle { park: Some(wait), ..Settle::default() }
    }

    /// The thread waits for people to decide the records `ids` (see [`Settle::awaits`]): the
    /// row stays, parked until none of them waits for a human, or the thread's timer is due.
    pub fn await_approvals(ids: Vec<String>) -> Self {
        Settle { park: Some(RunWait::Approval), awaits: ids, handled: None }
    }

    /// The same, the worker having acted on `control` (see [`Settle::handled`]).
    #[must_use]
    pub fn handled(mut self, control: Option<RunControl>) -> Self {
        self.handled = control;
        self
    }

    /// What happens to a row whose control request is `control`: `true` when the request
    /// stays, the row kept claimable at once (a cancel the worker did not act on).
    pub(crate) fn keeps(&self, control: Option<RunControl>) -> bool {
        control == Some(RunControl::Cancel) && self.handled != Some(RunControl::Cancel)
    }
}

/// A run to put in the queue ([`Store::enqueue_run`](crate::Store::enqueue_run)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NewRun {
    /// The thread to run.
    pub thread: String,
    /// The graph whose workers may claim it (workers claim by graph name).
    pub graph: String,
    /// The serialised input state of a new thread; `None` resumes the existing thread.
    pub input: Option<Vec<u8>>,
    /// Who the thread belongs to.
    pub owner: String,
    /// When it was submitted (unix millis).
    pub at: u64,
    /// The tenant a new thread is created for (its [`ThreadRecord::tenant`](crate::ThreadRecord::tenant));
    /// `None`: no tenant. A resumed thread keeps the tenant it was created with. (Appended last.)
    pub tenant: Option<String>,
}

impl NewRun {
    /// A run of `graph` on `thread`, submitted at `at`, for no tenant; see the fields.
    pub fn new(thread: &str, graph: &str, input: Option<Vec<u8>>, owner: &str, at: u64) -> Self {
        NewRun {
            thread: thread.to_string(),
            graph: graph.to_string(),
            input,
            owner: owner.to_string(),
            at,
            tenant: None,
        }
    }

    /// The same run, for `tenant` (see [`NewRun::tenant`]).
    #[must_use]
    pub fn with_tenant(mut self, tenant: impl Into<String>) -> Self {
        self.tenant = Some(tenant.into());
        self
    }
}

/// A run in the queue, as listed or claimed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueuedRun {
    /// The thread.
    pub thread: String,
    /// The graph whose workers may claim it.
    pub graph: String,
    /// The serialised input of a new thread; `None` resumes the existing thread.
    pub input: Option<Vec<u8>>,
    /// Who the thread belongs to.
    pub owner: String,
    /// When it was submitted (unix millis).
    pub enqueued_at: u64,
    /// What it waits for.
    pub wait: RunWait,
    /// A stop requested from any process, if any.
    pub control: Option<RunControl>,
    /// The worker that claimed it last, if any.
    pub holder: Option<String>,
    /// When that worker last reported it alive (unix millis): at the claim, then at every
    /// [`Store::heartbeat_runs`](crate::Store::heartbeat_runs).
    pub heartbeat_at: Option<u64>,
    /// How many times a worker claimed it (more than one: a worker stopped or died with it).
    pub claims: u32,
    /// The thread's lease now (expired or not), if one is held.
    pub lease: Option<Lease>,
    /// The tenant it was submitted for ([`NewRun::tenant`]), if any. (Appended last.)
    pub tenant: Option<String>,
}

/// The run queue refused or failed an operation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum QueueError {
    /// The store failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// `enqueue_run` for a thread that is already queued.
    #[error("thread `{thread}` is already queued; wait for its run to end, or cancel it with a control request first")]
    AlreadyQueued {
        /// The thread.
        thread: String,
    },
    /// The store has no run queue (a `Store` implementation outside this crate that does not
    /// override the queue methods).
    #[error("this store has no run queue ({detail}); use RedbStore or PostgresStore to run workers")]
    Unsupported {
        /// Which store.
        detail: String,
    },
    /// The audit entry of a queue operation was refused (nothing was written). (Appended last.)
    #[error(transparent)]
    Audit(#[from] crate::error::AuditError),
    /// A pause for a run parked until what its thread waits for is there (a person, its timer):
    /// it has no step to stop at, and it continues by itself once that is there; a cancel
    /// stops it for good. Nothing was written. (Appended last.)
    #[error(
        "thread `{thread}` waits ({}), so a pause has nothing to stop; it continues by itself once that is \
         there; cancel it to stop it for good",
        wait.as_str()
    )]
    Waiting {
        /// The thread.
        thread: String,
        /// What its parked run waits for.
        wait: RunWait,
    },
}
