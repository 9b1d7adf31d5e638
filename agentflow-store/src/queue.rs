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
use crate::record::{IdempotencyKey, Lease, NewAuditEntry, NewWebhookDelivery, ThreadStatus};

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
    /// Held behind a thread that waits outside the queue for a person (stopped at a breakpoint,
    /// paused, waiting for an approval or an answer, or compensating: its compensation stopped
    /// midway and waits for a resume) or for its timer, with follow-up runs
    /// behind it ([`Settle::hold`], or a follow-up queued for a thread that waits with no run in
    /// the queue, see [`FollowUpRule::Enqueue`]): claimable once
    /// [`Store::wake_run`](crate::Store::wake_run) makes it ready (a resume submitted for the
    /// thread does), once a control request is set on it, once the thread's timer is due while
    /// it sleeps, or once the thread's status is neither `interrupted`, `paused`, `compensating`
    /// nor `sleeping`
    /// (it moved on without the queue: the claim, marked [`QueuedRun::held`], finds its run
    /// ended, and the settle that removes the row puts the first follow-up in its place).
    /// (Appended last; store format 10, PostgreSQL schema 13.)
    Held,
}

impl RunWait {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            RunWait::Ready => "READY",
            RunWait::Approval => "APPROVAL",
            RunWait::Timer => "TIMER",
            RunWait::Answer => "ANSWER",
            RunWait::Held => "HELD",
        }
    }

    /// The value stored as `name`, if it is one.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "READY" => Some(RunWait::Ready),
            "APPROVAL" => Some(RunWait::Approval),
            "TIMER" => Some(RunWait::Timer),
            "ANSWER" => Some(RunWait::Answer),
            "HELD" => Some(RunWait::Held),
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
    /// The delivery of the run's webhook ([`QueuedRun::webhook`]), written in the same
    /// transaction as the settle (the row's webhook is cleared); ignored when the row has none.
    /// (Appended last.)
    pub webhook: Option<NewWebhookDelivery>,
}

impl Settle {
    /// The run ended: the row leaves the queue, or, when the thread has follow-up runs
    /// ([`Store::enqueue_follow_up`](crate::Store::enqueue_follow_up)), the first of them takes
    /// its place, ready, in the same transaction.
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
        Settle { park: Some(RunWait::Approval), awaits: ids, ..Settle::default() }
    }

    /// The run stopped where a person continues it (at a breakpoint, or paused): the row leaves
    /// the queue as [`Settle::remove`] removes it, unless follow-up runs wait behind it; then it
    /// stays, parked as [`RunWait::Held`], so they wait until the thread's run ends (a follow-up
    /// must not start the thread over the step it stopped at).
    pub fn hold() -> Self {
        Settle { park: Some(RunWait::Held), ..Settle::default() }
    }

    /// The same settle, writing the run's webhook delivery (see [`Settle::webhook`]).
    #[must_use]
    pub fn with_webhook(mut self, delivery: NewWebhookDelivery) -> Self {
        self.webhook = Some(delivery);
        self
    }

    /// The same settle, answering the control request `control` (see [`Settle::handled`]).
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
    /// The start's idempotency key: the run is queued and the key kept in one transaction; a
    /// run whose key is kept already (unexpired, see
    /// [`IDEMPOTENCY_KEY_TTL_MS`](crate::IDEMPOTENCY_KEY_TTL_MS)) is refused with
    /// [`QueueError::KeyUsed`], which names the thread the first request started. (Appended last.)
    pub idempotency: Option<IdempotencyKey>,
    /// A follow-up run of an existing thread ([`Store::enqueue_follow_up`](crate::Store::enqueue_follow_up)):
    /// `input` is an update (JSON) applied to the thread's state through its reducers before the
    /// graph runs again from its start node. (Appended last.)
    pub follow_up: bool,
    /// For a follow-up: roll the thread back first (audited, the `rollback` strategy), so the
    /// update applies to the state before the run it replaces. The value bounds which run that
    /// is, and the worker that claims the follow-up decides the checkpoint then: the run
    /// replaced is the earliest one of the thread whose starting checkpoint (its input, a fork,
    /// a follow-up's restart) is at or after this seq, and the thread goes back to the
    /// checkpoint that run started from; with no such run, nothing is rolled back.
    /// (Appended last.)
    pub fork_from: Option<u64>,
    /// A URL to tell when the run first stops (ends, or waits for a person or its timer): the
    /// worker's settle writes the delivery ([`Settle::webhook`]). (Appended last.)
    pub webhook: Option<String>,
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
            idempotency: None,
            follow_up: false,
            fork_from: None,
            webhook: None,
        }
    }

    /// The same run as a follow-up of the existing thread: `input` is an update (see
    /// [`NewRun::follow_up`]), applied after forking at `fork_from` if given.
    #[must_use]
    pub fn as_follow_up(mut self, fork_from: Option<u64>) -> Self {
        self.follow_up = true;
        self.fork_from = fork_from;
        self
    }

    /// The same run, telling `url` when it first stops (see [`NewRun::webhook`]).
    #[must_use]
    pub fn with_webhook(mut self, url: impl Into<String>) -> Self {
        self.webhook = Some(url.into());
        self
    }

    /// The same run, started under idempotency key `key` (see [`NewRun::idempotency`]).
    #[must_use]
    pub fn with_idempotency(mut self, key: IdempotencyKey) -> Self {
        self.idempotency = Some(key);
        self
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
    /// A follow-up run: `input` is an update of the existing thread ([`NewRun::follow_up`]).
    /// (Appended last.)
    pub follow_up: bool,
    /// For a follow-up: the checkpoint to fork at first ([`NewRun::fork_from`]). (Appended last.)
    pub fork_from: Option<u64>,
    /// The URL to tell when the run first stops ([`NewRun::webhook`]); cleared once a settle
    /// wrote its delivery. (Appended last.)
    pub webhook: Option<String>,
    /// Claimed while it was held ([`RunWait::Held`]), not woken by a resume: its thread's run
    /// ended without the queue (or a control request was set on it, or its thread's timer is
    /// due), so the worker looks at the thread before resuming it: a run that ended is not run
    /// again. `false` for a run listed rather than claimed. (Appended last.)
    pub held: bool,
}

/// One fire of a schedule ([`Store::fire_schedule`](crate::Store::fire_schedule)): if the
/// schedule's `next_at` is still `expected_next`, it becomes `next_at`, the schedule records the
/// fire, and `run` is queued with `entry` in its thread's audit log, all in one transaction.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ScheduleFire {
    /// The schedule.
    pub id: String,
    /// The `next_at` the firer read: the fire is claimed only if it is still so.
    pub expected_next: u64,
    /// The schedule's next fire after this one (after now: the fires missed in between are
    /// not made one by one).
    pub next_at: u64,
    /// When it fired (unix millis).
    pub fired_at: u64,
    /// The run it starts (a new thread).
    pub run: NewRun,
    /// The `run.submitted` entry of the run's thread.
    pub entry: NewAuditEntry,
}

impl ScheduleFire {
    /// A fire of schedule `id`; see the fields.
    pub fn new(id: &str, expected_next: u64, next_at: u64, fired_at: u64, run: NewRun, entry: NewAuditEntry) -> Self {
        ScheduleFire { id: id.to_string(), expected_next, next_at, fired_at, run, entry }
    }
}

/// Where [`Store::enqueue_follow_up`](crate::Store::enqueue_follow_up) puts a follow-up run
/// when its thread has a run in the queue already.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FollowUpPlace {
    /// After the thread's other follow-ups (`enqueue`).
    Back,
    /// Before the follow-ups put at the back, after the ones put at the front before it (in
    /// the order they were submitted): it runs as soon as the run in the queue and those end
    /// (`interrupt`, `rollback`, which cancel that run).
    Front,
}

/// What [`Store::enqueue_follow_up_as`](crate::Store::enqueue_follow_up_as) does about the run
/// the thread may have, decided in the transaction that queues the follow-up (so a concurrent
/// submission, settle or claim sees either all of it or none).
///
/// A thread is active while it has a run in the queue or its status is not finished
/// ([`ThreadStatus::is_finished`](crate::ThreadStatus::is_finished): running, waiting for a
/// person or its timer, paused, compensating).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum FollowUpRule {
    /// Refuse the follow-up while the thread is active ([`QueueError::Active`]); queue it at
    /// once otherwise.
    Reject,
    /// Queue it behind the thread's run, after its other follow-ups
    /// ([`FollowUpPlace::Back`]). A thread with no run in the queue that waits for a person or
    /// its timer (status `interrupted`, `paused`, `compensating` or `sleeping`) first gets a run
    /// held for it
    /// ([`RunWait::Held`], a resume of the thread, owned as the thread is), so the follow-up
    /// waits until the thread's run ends.
    Enqueue,
    /// Ask the thread's run in the queue to stop for good (a cancel request, with `cancel`, the
    /// `run.cancel_requested` entry, in the thread's audit log) and queue the follow-up at
    /// [`FollowUpPlace::Front`]; with no run in the queue it is queued at once.
    Interrupt {
        /// The audit entry of the cancel request (written only when a run is asked to stop).
        cancel: NewAuditEntry,
    },
}

/// What [`Store::enqueue_follow_up`](crate::Store::enqueue_follow_up) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FollowUpQueued {
    /// The thread had no run in the queue: the follow-up is its queued run now.
    Now,
    /// The thread has a run in the queue: the follow-up waits with `ahead` follow-ups before it,
    /// and becomes the queued run once those and the run end.
    Behind {
        /// How many follow-ups run before it.
        ahead: usize,
    },
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
    /// `enqueue_run` with an idempotency key kept already: an earlier request with it started
    /// thread `thread`. Nothing was written. `same_request` tells whether that request was the
    /// same as this one (a retry: attach to its run) or another (a key used twice: choose a new
    /// key). (Appended last.)
    #[error(
        "idempotency key `{key}` was used already, for thread `{thread}`{}",
        if *same_request { "" } else { " by a different request: send a new key with a new request" }
    )]
    KeyUsed {
        /// The key.
        key: String,
        /// The thread the first request with it started.
        thread: String,
        /// Whether that request was the same as this one.
        same_request: bool,
    },
    /// [`FollowUpRule::Reject`] for a thread that is active: how its run stands is `status`
    /// (the thread's status, or `queued`, `queued, waiting (..)` for a run no worker has started
    /// or that waits). Nothing was written. (Appended last.)
    #[error("thread `{thread}` has a run that is {status}; nothing was queued")]
    Active {
        /// The thread.
        thread: String,
        /// How its run stands.
        status: String,
    },
}

/// How the run of a thread whose status is `status` and whose queued run waits for `queued`
/// stands, when the thread is active (see [`FollowUpRule`]); `None` when it is not.
pub(crate) fn active_as(status: Option<ThreadStatus>, queued: Option<RunWait>) -> Option<String> {
    match (status, queued) {
        (Some(status), _) if !status.is_finished() => Some(status.as_str().to_string()),
        (_, Some(RunWait::Ready)) => Some("queued".to_string()),
        (_, Some(wait)) => Some(format!("queued, waiting ({})", wait.as_str().to_lowercase())),
        (_, None) => None,
    }
}

/// Whether a thread of status `status` with no run in the queue waits outside it, for a person
/// (stopped at a breakpoint, paused, waiting for an approval or an answer, or compensating
/// midway) or its timer: a follow-up queued with [`FollowUpRule::Enqueue`] waits behind a run
/// held for it.
pub(crate) fn waits_outside_the_queue(status: ThreadStatus) -> bool {
    matches!(
        status,
        ThreadStatus::Interrupted | ThreadStatus::Paused | ThreadStatus::Sleeping | ThreadStatus::Compensating
    )
}

/// What the queue methods of a `Store` without a queue answer.
pub(crate) fn unsupported() -> QueueError {
    QueueError::Unsupported { detail: "the Store implementation does not override the queue methods".to_string() }
}

/// The control requests set on the runs of `runs` that `holder` claimed and holds the lease of
/// at `now` (what [`Store::run_controls`](crate::Store::run_controls) answers by default).
pub(crate) fn controls_of(runs: Vec<QueuedRun>, holder: &str, now: u64) -> Vec<(String, RunControl)> {
    runs.into_iter()
        .filter(|r| {
            r.holder.as_deref() == Some(holder)
                && r.lease.as_ref().is_some_and(|l| l.holder == holder && l.expires_at > now)
        })
        .filter_map(|r| Some((r.thread, r.control?)))
        .collect()
}
