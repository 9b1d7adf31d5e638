//! Cron schedules: a graph's run started at the times a cron expression gives, kept in the store
//! so that every server sharing it knows them, and fired by whichever claims a fire first
//! ([`Store::fire_schedule`](crate::Store::fire_schedule) with a [`ScheduleFire`](crate::ScheduleFire)):
//! one run per fire across servers, and one run for all the fires missed while no server ran.

use serde::{Deserialize, Serialize};

/// A cron schedule as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ScheduleRecord {
    /// Its id (chosen by who made it).
    pub id: String,
    /// The graph it starts runs of.
    pub graph: String,
    /// The cron expression, five fields, in UTC (the store keeps it as given).
    pub cron: String,
    /// The input state of each run it starts (JSON; sealed by a sealing store).
    pub input: Vec<u8>,
    /// Who owns the threads it starts.
    pub owner: String,
    /// The tenant its threads are created for.
    pub tenant: Option<String>,
    /// The URL told when each of its runs stops (see [`NewRun::webhook`](crate::NewRun::webhook)).
    pub webhook: Option<String>,
    /// When it fires next (unix millis).
    pub next_at: u64,
    /// When it was made (unix millis).
    pub created_at: u64,
    /// When it last fired (unix millis), if ever.
    pub last_fired_at: Option<u64>,
    /// The thread its last fire started, if any.
    pub last_thread: Option<String>,
}

impl ScheduleRecord {
    /// Schedule `id` of `graph` by `cron`, starting runs from `input` owned by `owner`, firing
    /// next at `next_at`, made at `created_at`.
    pub fn new(id: &str, graph: &str, cron: &str, input: Vec<u8>, owner: &str, next_at: u64, created_at: u64) -> Self {
        ScheduleRecord {
            id: id.to_string(),
            graph: graph.to_string(),
            cron: cron.to_string(),
            input,
            owner: owner.to_string(),
            tenant: None,
            webhook: None,
            next_at,
            created_at,
            last_fired_at: None,
            last_thread: None,
        }
    }
}
