//! How a run ends.

use std::fmt;
use std::time::{Duration, SystemTime};

use crate::core::budget::{Budget, RunUsage};
use crate::core::error::NodeError;
use crate::durable::{PersistError, ResumeError};
use crate::interrupt::Pending;

/// How a run ended. A run that hit a budget is never reported as completed.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub enum Outcome {
    /// Every branch reached `END`.
    Completed,
    /// A budget ran out; the state is the one after the last finished step.
    BudgetExhausted {
        /// The budget.
        which: Budget,
    },
    /// A node failed for good; the state is the one before the failed step.
    Failed {
        /// The node that failed.
        node: String,
        /// Why.
        error: NodeError,
    },
    /// The run was cancelled from outside; it stopped at a step boundary or inside a step.
    Cancelled,
    /// The run paused for a human; the state is the one before the paused
    /// step. Resume the thread to continue.
    Interrupted {
        /// The thread to resume (`None` for a run without a store, which
        /// cannot be resumed).
        thread: Option<String>,
        /// What the run waits for.
        pending: Vec<Pending>,
    },
    /// The run failed or was cancelled, and the compensations of its
    /// completed calls ran, newest first (see [`crate::saga`]); the state is
    /// the one the run stopped with.
    Compensated {
        /// Why the run compensated: how it had ended.
        reason: String,
        /// The calls undone, in the order they were undone.
        undone: Vec<Undone>,
        /// Calls whose outcome is unknown (`OUTCOME_UNKNOWN` records, as
        /// `tool (record id)`): not compensated, a human settles them.
        unknown: Vec<String>,
    },
    /// A compensation failed; the ones after it did not run. The thread
    /// stays `compensating`: a human looks, and a resume retries from this one.
    CompensationFailed {
        /// Why the run compensated: how it had ended.
        reason: String,
        /// The compensating tool that failed.
        compensation: String,
        /// The forward tool whose call it was to undo.
        tool: String,
        /// The forward call's id.
        call_id: String,
        /// Why it failed.
        error: String,
        /// The `OUTCOME_UNKNOWN` record to settle, when the compensation was
        /// cut off mid-call.
        approval: Option<String>,
        /// The calls undone before it.
        undone: Vec<Undone>,
    },
    /// Every paused node waits on a durable timer (`cx.sleep`); the state is
    /// the one before the sleeping step and nothing is held in memory. The
    /// thread's status is `sleeping` and its timer is stored; resume it at
    /// or after `until` (a [`Scheduler`](crate::timer::Scheduler) does) and
    /// the sleeping nodes run again from their start, their `sleep` calls
    /// returning at once. [`Outcome::remaining`] says how long is left.
    Sleeping {
        /// The thread to resume.
        thread: String,
        /// When it is due: the latest wake time of its sleeping nodes (whole milliseconds;
        /// serialized as unix milliseconds).
        #[serde(with = "unix_ms")]
        until: SystemTime,
    },
    /// The run was paused from outside, at a step boundary or inside a step (a pause request,
    /// [`App::pause_run`](crate::App::pause_run), read by the [`Worker`](crate::Worker)
    /// running it): the thread's status is `paused`, nothing was undone, and
    /// a resume ([`App::submit_resume`](crate::App::submit_resume) or
    /// `runner.resume()`) continues with the step after the last committed one.
    /// (Appended last.)
    Paused,
}

impl Outcome {
    /// Whether every branch reached `END`.
    pub fn is_completed(&self) -> bool {
        matches!(self, Outcome::Completed)
    }

    /// For [`Outcome::Sleeping`], how long until the thread is due: zero once `until` has
    /// passed. `None` for every other outcome.
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use agentflow::Outcome;
    ///
    /// let until = SystemTime::now() + Duration::from_secs(3600);
    /// let sleeping = Outcome::Sleeping { thread: "t-1".into(), until };
    /// assert!(sleeping.remaining().is_some_and(|left| left <= Duration::from_secs(3600)));
    /// assert_eq!(Outcome::Completed.remaining(), None);
    /// ```
    pub fn remaining(&self) -> Option<Duration> {
        match self {
            Outcome::Sleeping { until, .. } => Some(until.duration_since(SystemTime::now()).unwrap_or(Duration::ZERO)),
            _ => None,
        }
    }
}

/// `until` of [`Outcome::Sleeping`] as unix milliseconds, the form timers are stored in (and
/// the serialized form of the outcome).
pub(crate) mod unix_ms {
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    /// The wall-clock time `ms` unix milliseconds stand for (a time past what the platform
    /// can hold reads as the farthest it can: year 9999, else the epoch itself).
    pub(crate) fn to_time(ms: u64) -> SystemTime {
        UNIX_EPOCH
            .checked_add(Duration::from_millis(ms))
            .or_else(|| UNIX_EPOCH.checked_add(Duration::from_secs(253_402_300_799)))
            .unwrap_or(UNIX_EPOCH)
    }

    /// `time` in unix milliseconds (0 before the epoch, saturating at `u64::MAX`).
    pub(crate) fn of(time: SystemTime) -> u64 {
        time.duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    pub(crate) fn serialize<S: serde::Serializer>(time: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(of(*time))
    }

    pub(crate) fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<SystemTime, D::Error> {
        <u64 as serde::Deserialize>::deserialize(d).map(to_time)
    }
}

/// `time` as RFC 3339 in UTC with milliseconds (`2026-12-06T15:04:05.123Z`), for people.
fn utc(time: SystemTime) -> String {
    let c = crate::core::clock::civil(unix_ms::of(time));
    format!("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", c.year, c.month, c.day, c.hour, c.minute, c.second, c.milli)
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Completed => f.write_str("Completed"),
            Outcome::BudgetExhausted { which } => write!(f, "BudgetExhausted {{ which: {which} }}"),
            Outcome::Failed { node, error } => {
                write!(f, "Failed {{ node: {node}, error: {error} }}")
            }
            Outcome::Cancelled => f.write_str("Cancelled"),
            Outcome::Interrupted { pending, .. } => {
                let at: Vec<String> = pending.iter().map(|p| format!("{:?} at {}", p.kind, p.node)).collect();
                write!(f, "Interrupted {{ {} }}", at.join(", "))
            }
            Outcome::Compensated { undone, unknown, .. } => {
                let undone: Vec<String> = undone.iter().map(|u| format!("{} by {}", u.tool, u.compensation)).collect();
                write!(f, "Compensated {{ undone: [{}], unknown: [{}] }}", undone.join(", "), unknown.join(", "))
            }
            Outcome::CompensationFailed { compensation, tool, error, .. } => {
                write!(f, "CompensationFailed {{ compensation: {compensation}, undoing: {tool}, error: {error} }}")
            }
            Outcome::Sleeping { until, .. } => write!(f, "Sleeping {{ until: {} }}", utc(*until)),
            Outcome::Paused => f.write_str("Paused"),
        }
    }
}

/// One forward call a compensation undid.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct Undone {
    /// The node that made the forward call.
    pub node: String,
    /// The forward call's id.
    pub call_id: String,
    /// The forward tool.
    pub tool: String,
    /// The compensating tool that undid it.
    pub compensation: String,
}

/// The result of a run: how it ended and the state it ended with.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Run<S> {
    /// How the run ended.
    pub outcome: Outcome,
    /// The state after the last completed super-step.
    pub state: S,
    /// How many super-steps completed.
    pub steps: u32,
    /// Model calls, tool calls and tokens consumed: for a thread, its total
    /// over every run so far (what its limits are compared with); for a run
    /// without a thread, this run's.
    pub usage: RunUsage,
    /// This invocation's share of [`Run::usage`].
    pub usage_this_run: RunUsage,
}

/// A run could not be carried out at all (as opposed to an [`Outcome`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// A breakpoint (`interrupt_before` / `interrupt_after`) names no node of the graph.
    #[error("breakpoint on unknown node `{node}`; the nodes are {}", nodes.join(", "))]
    UnknownBreakpoint {
        /// The name given.
        node: String,
        /// The graph's nodes.
        nodes: Vec<&'static str>,
    },
    /// `max_steps(0)`: a run needs at least one super-step.
    #[error("max_steps must be at least 1")]
    ZeroMaxSteps,
    /// `resume` / `resume_with` without `.thread(id)`.
    #[error("resuming needs `.thread(id)`: the thread to continue")]
    ResumeNeedsThread,
    /// `lease_ttl` below the shortest lease a run can renew.
    #[error("lease_ttl must be at least {min:?}, not {asked:?}")]
    LeaseTtlTooShort {
        /// The shortest accepted.
        min: std::time::Duration,
        /// The one asked for.
        asked: std::time::Duration,
    },
    /// Another executor holds the thread.
    #[error(
        "thread `{thread}` is being run by `{holder}` (lease until unix ms {expires_at}); \
         wait for it to finish, or for its lease to expire if it crashed"
    )]
    ThreadBusy {
        /// The thread id.
        thread: String,
        /// Who holds it.
        holder: String,
        /// When the holder's lease expires (unix millis).
        expires_at: u64,
    },
    /// `run` was asked to start a thread that already exists.
    #[error("thread `{thread}` already exists; continue it with `.resume()` or pick a new thread id")]
    ThreadExists {
        /// The thread id.
        thread: String,
    },
    /// A new thread's id or owner holds a NUL byte, which no store keeps (PostgreSQL `text`
    /// cannot hold one; refused on every store alike, before anything is written).
    #[error("the {what} {value:?} contains a NUL byte, which a store cannot keep; choose one without it")]
    NulByte {
        /// What holds it: `thread id` or `owner`.
        what: &'static str,
        /// The value given.
        value: String,
    },
    /// `thread(..)` was set but the graph has no store.
    #[error("a thread id needs a store; attach one with `graph.app().store(store)`")]
    NoStore,
    /// The thread cannot be resumed with this graph.
    #[error(transparent)]
    Resume(#[from] ResumeError),
    /// `resume_with(value)` on a thread that waits for no value.
    #[error("thread `{thread}` is not waiting for a value ({status}); use `.resume()` to continue it")]
    NotWaiting {
        /// The thread id.
        thread: String,
        /// Where it stands.
        status: String,
    },
    /// `resume()` on a thread that waits for a human's value.
    #[error(
        "thread `{thread}` is waiting at node `{node}` for a value; continue it with `.resume_with(value)` \
         (or, when its step asks several questions, answer each with `.resume_answering(question_id, value)`)"
    )]
    ValueRequired {
        /// The thread id.
        thread: String,
        /// The node that asked.
        node: String,
    },
    /// The run lost the thread's lease (its holder missed renewals and
    /// another executor took the thread over). The running step was
    /// cancelled and nothing of it was committed; the other executor owns
    /// the thread now. Look at the thread before resuming it.
    #[error(
        "the lease on thread `{thread}` was lost{}: the running step was cancelled and nothing of it was committed; \
         another executor may be running the thread now",
        holder.as_ref().map_or_else(String::new, |h| format!(" to `{h}`"))
    )]
    LeaseLost {
        /// The thread id.
        thread: String,
        /// Who holds the thread now, when known.
        holder: Option<String>,
    },
    /// The runner's limit is above the one stored with the thread.
    #[error(
        "thread `{thread}` is limited to {stored} {which}; a run may not raise it to {asked}: \
         call `app.raise_limits(thread, limits, actor)` (audited) first"
    )]
    LimitRaised {
        /// The thread id.
        thread: String,
        /// The limit.
        which: Budget,
        /// The thread's stored limit.
        stored: u64,
        /// What the runner asked for.
        asked: u64,
    },
    /// The store failed; the run stopped rather than continue unrecorded.
    #[error(transparent)]
    Persist(#[from] PersistError),
    /// `resume_with(value)` on a thread whose step waits for answers to several questions (two
    /// nodes, or map instances, each asked in `cx.interrupt`): one value is not given to all of
    /// them unasked. Nothing ran. (Appended last.)
    #[error(
        "thread `{thread}` waits for answers to {} questions (ids {}); a bare value does not answer them all: \
         answer each with `.resume_answering(question_id, value)` (the ids are `Pending::question_id` of \
         `app.pending(thread)`), or, only if one value is meant for every one of them and they all ask \
         the very same thing, with `.resume_with_all_alike(value)`",
        questions.len(),
        questions.join(", ")
    )]
    SeveralQuestions {
        /// The thread id.
        thread: String,
        /// The ids of the questions that wait for an answer ([`Pending::question_id`]).
        questions: Vec<String>,
    },
    /// `resume_with_all_alike(value)` on a thread whose waiting items do not all ask the same
    /// thing: each needs its own answer. Nothing ran. (Appended last.)
    #[error(
        "thread `{thread}` waits on questions that ask different things (ids {}); answer each with \
         `.resume_answering(question_id, value)`",
        questions.join(", ")
    )]
    QuestionsDiffer {
        /// The thread id.
        thread: String,
        /// The ids of the questions that wait for an answer ([`Pending::question_id`]).
        questions: Vec<String>,
    },
    /// Recording an answer given with `resume_answering` was refused or failed (the thread does
    /// not ask that question, it was answered already, ...). (Appended last.)
    #[error(transparent)]
    Answer(Box<crate::approval::answer::AnswerError>),
    /// A new persisted thread with no owner, whose graph (or a subgraph of it) lists a tool the
    /// policy may hold for a human's approval: set `.owner(..)`. Refused before anything runs.
    /// (Appended last.)
    #[error(transparent)]
    OwnerRequired(#[from] crate::tool::OwnerRequired),
    /// The app's access policy refused to start or resume the thread for the app's actor
    /// ([`App::acting_as`](crate::App::acting_as)). Nothing ran. (Appended last.)
    #[error(transparent)]
    Access(Box<crate::access::AccessError>),
    /// A new thread's id starts with
    /// [`RESERVED_THREAD_PREFIX`](crate::schedule::RESERVED_THREAD_PREFIX) (`schedule:`), the
    /// prefix of the schedules' own audit streams, which no thread may share. Nothing ran.
    /// (Appended last.)
    #[error(
        "the thread id {thread:?} starts with `schedule:`, which names the audit streams of cron schedules; \
         choose another"
    )]
    ReservedThreadId {
        /// The thread id.
        thread: String,
    },
}

impl From<crate::access::AccessError> for RunError {
    fn from(e: crate::access::AccessError) -> Self {
        RunError::Access(Box::new(e))
    }
}

impl From<crate::approval::answer::AnswerError> for RunError {
    fn from(e: crate::approval::answer::AnswerError) -> Self {
        RunError::Answer(Box::new(e))
    }
}

impl Outcome {
    /// The `outcome` label of a run's end in the metrics (see [`crate::metrics`]).
    pub(crate) fn label(&self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::BudgetExhausted { .. } => "budget_exhausted",
            Outcome::Failed { .. } => "failed",
            Outcome::Cancelled => "cancelled",
            Outcome::Interrupted { .. } => "interrupted",
            Outcome::Compensated { .. } => "compensated",
            Outcome::CompensationFailed { .. } => "compensation_failed",
            Outcome::Sleeping { .. } => "sleeping",
            Outcome::Paused => "paused",
        }
    }
}

impl From<crate::durable::ThreadError> for RunError {
    fn from(e: crate::durable::ThreadError) -> Self {
        use crate::durable::ThreadError;
        match e {
            ThreadError::Exists { thread } => RunError::ThreadExists { thread },
            ThreadError::Busy { thread, holder, expires_at } => RunError::ThreadBusy { thread, holder, expires_at },
            ThreadError::LeaseLost { thread, holder } => RunError::LeaseLost { thread, holder },
            ThreadError::Persist(e) => RunError::Persist(e),
            ThreadError::Resume(e) => RunError::Resume(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    use super::Outcome;

    fn sleeping(until: SystemTime) -> Outcome {
        Outcome::Sleeping { thread: "t-1".into(), until }
    }

    #[test]
    fn remaining_is_the_time_left_until_the_wake_zero_once_past_and_none_when_not_asleep() {
        let left = sleeping(SystemTime::now() + Duration::from_secs(3600)).remaining().expect("asleep");
        assert!(left <= Duration::from_secs(3600) && left > Duration::from_secs(3590), "{left:?}");
        assert_eq!(sleeping(SystemTime::now() - Duration::from_secs(5)).remaining(), Some(Duration::ZERO));
        assert_eq!(sleeping(UNIX_EPOCH).remaining(), Some(Duration::ZERO));
        assert_eq!(Outcome::Completed.remaining(), None);
        assert_eq!(Outcome::Paused.remaining(), None);
    }

    #[test]
    fn until_is_a_system_time_serialized_as_unix_millis_and_shown_in_utc() {
        let until = UNIX_EPOCH + Duration::from_millis(1_796_569_445_123);
        let outcome = sleeping(until);
        let json = serde_json::to_value(&outcome).unwrap();
        assert_eq!(json, serde_json::json!({ "Sleeping": { "thread": "t-1", "until": 1_796_569_445_123_u64 } }));
        assert_eq!(serde_json::from_value::<Outcome>(json).unwrap(), outcome);
        assert_eq!(outcome.to_string(), "Sleeping { until: 2026-12-06T15:04:05.123Z }");
        assert_eq!(sleeping(UNIX_EPOCH).to_string(), "Sleeping { until: 1970-01-01T00:00:00.000Z }");
        // A leap day, and the last millisecond of a year.
        let leap = UNIX_EPOCH + Duration::from_millis(951_782_400_000);
        assert_eq!(sleeping(leap).to_string(), "Sleeping { until: 2000-02-29T00:00:00.000Z }");
        let eve = UNIX_EPOCH + Duration::from_millis(1_798_761_599_999);
        assert_eq!(sleeping(eve).to_string(), "Sleeping { until: 2026-12-31T23:59:59.999Z }");
    }

    #[test]
    fn unix_millis_convert_both_ways_and_absurd_ones_do_not_panic() {
        use super::unix_ms::{of, to_time};
        for ms in [0, 1, 1_796_569_445_123, 253_402_300_799_999] {
            assert_eq!(of(to_time(ms)), ms);
        }
        assert!(of(to_time(u64::MAX)) > 0);
        assert_eq!(of(UNIX_EPOCH - Duration::from_secs(1)), 0);
    }
}
