//! What goes wrong making, removing, listing or firing cron schedules: [`ScheduleError`].

use agentflow_store::{QueueError, ReadError};

use super::cron::CronError;
use crate::access::AccessError;
use crate::durable::PersistError;
use crate::tool::OwnerRequired;

/// The longest schedule id taken.
pub const MAX_SCHEDULE_ID_LEN: usize = 100;

/// Making, removing, listing or firing a cron schedule failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScheduleError {
    /// The cron expression was refused, or names no time.
    #[error(transparent)]
    Cron(#[from] CronError),
    /// The schedule id is empty, too long, or holds a character other than ASCII letters,
    /// digits, `.`, `_` and `-` (it names the threads the schedule starts, and URLs).
    #[error(
        "schedule id {id:?} is not valid: {reason}; use 1 to {MAX_SCHEDULE_ID_LEN} ASCII letters, digits, `.`, `_` or `-`"
    )]
    Id {
        /// The id given.
        id: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The owner or tenant holds a NUL byte, which no store keeps.
    #[error("the {what} {value:?} contains a NUL byte, which a store cannot keep; choose one without it")]
    NulByte {
        /// `owner` or `tenant`.
        what: &'static str,
        /// The value given.
        value: String,
    },
    /// The schedule's [`Submission`](crate::Submission) names an idempotency key: each fire
    /// starts a run of its own, and one key would refuse every fire after the first.
    #[error(
        "a schedule starts a new run at each fire, so it takes no idempotency key (one key would refuse every fire \
         after the first); leave `Submission::idempotency` unset"
    )]
    KeyNotAllowed,
    /// The app has no store to keep schedules in.
    #[error("cron schedules need a store; attach one with `graph.app().store(store)`")]
    NoStore,
    /// A schedule of that id starts runs of another graph: ids are shared by the graphs of a
    /// store.
    #[error("schedule `{id}` belongs to graph `{graph}`; remove it there, or choose another id")]
    OtherGraph {
        /// The schedule.
        id: String,
        /// The graph it starts runs of.
        graph: String,
    },
    /// A schedule of that id is kept for a tenant the actor does not act for: the id is taken
    /// (which tenant's it is, is not told).
    #[error("schedule id `{id}` is taken; choose another")]
    Taken {
        /// The id given.
        id: String,
    },
    /// The app's access policy refused the operation.
    #[error(transparent)]
    Access(#[from] AccessError),
    /// The graph may call a tool the policy may hold for a human's approval, and the schedule
    /// names no owner to request it for.
    #[error(transparent)]
    OwnerRequired(#[from] OwnerRequired),
    /// The input state could not be stored (a value that would not read back, a credential).
    #[error(transparent)]
    Persist(#[from] PersistError),
    /// The store refused or failed ([`QueueError::Unsupported`]: a store without schedules).
    #[error(transparent)]
    Queue(#[from] QueueError),
}

impl From<ReadError> for ScheduleError {
    fn from(e: ReadError) -> Self {
        ScheduleError::Persist(e.into())
    }
}

/// `Ok` if `id` is a schedule id taken ([`ScheduleError::Id`]).
pub(crate) fn check_id(id: &str) -> Result<(), ScheduleError> {
    let refuse = |reason: String| Err(ScheduleError::Id { id: id.to_string(), reason });
    if id.is_empty() {
        return refuse("it is empty".to_string());
    }
    if id.len() > MAX_SCHEDULE_ID_LEN {
        return refuse(format!("it is {} bytes long", id.len()));
    }
    if let Some(c) = id.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))) {
        return refuse(format!("it holds {c:?}"));
    }
    Ok(())
}
