//! Cron schedules: runs of a graph started at the times a five-field cron expression names, in
//! UTC ([`App::schedule`](crate::App::schedule)).
//!
//! A schedule is kept in the store ([`ScheduleRecord`]), so every process sharing it knows it.
//! Each [`Scheduler`](crate::timer::Scheduler) looks at its graph's schedules
//! ([`App::fire_due_schedules`](crate::App::fire_due_schedules)) and fires those due: one fire
//! queues a run of a new thread `<id>-<YYYYMMDDTHHMMZ>` (the UTC minute it fired) for a
//! [`Worker`](crate::Worker), and moves the schedule to the first time its expression names
//! after now, in one transaction that claims the fire only if no other process moved the
//! schedule first ([`Store::fire_schedule`](agentflow_store::Store::fire_schedule)). So:
//!
//! - two processes that find the same schedule due start one run between them;
//! - a schedule that fell due several times while no scheduler ran (the servers were down, the
//!   clock jumped) fires once when one runs again, not once per missed time;
//! - a schedule's runs are queued runs: they need a worker of the graph to run them.
//!
//! Each run's thread gets a `run.submitted` audit entry naming `schedule:<id>` as who asked,
//! with the schedule, its expression and the time that fell due.

mod authority;
mod cron;
mod error;
mod fire;

pub use agentflow_store::ScheduleRecord;
#[cfg(feature = "server")]
pub(crate) use authority::OwnerLookup;
pub(crate) use authority::{FireCheck, refused_entry};
pub use authority::{RESERVED_THREAD_PREFIX, SCHEDULE_REFUSED_KIND, is_reserved_thread_id, refusal_stream};
pub use cron::{CRON_SYNTAX, Cron, CronError, MAX_CRON_LEN};
pub(crate) use error::check_id;
pub use error::{MAX_SCHEDULE_ID_LEN, ScheduleError};
pub use fire::schedule_actor;
pub(crate) use fire::{fire_of, fire_thread};
