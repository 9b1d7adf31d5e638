//! `stuck`: what no one is moving forward, listed by the library's
//! [`agentflow::server::inspect::stuck`] (its docs say what counts as stuck): a thread waiting on a
//! person longer than `--waiting` (default 1h), a timer more than `--overdue` (default 1m)
//! past its wake time, a lease that expired, a running step older than `--running` (default
//! 10m, a worker's node time limit).

use std::sync::Arc;

use agentflow::Store;
use agentflow::server::inspect::display::ago;
use agentflow::server::inspect::stuck::find_with;
use clap::Args;
use serde_json::{Value, json};

use crate::out::{self, now_ms};
use crate::{Failure, Outcome};

/// `stuck` thresholds.
#[derive(Args, Debug)]
pub struct StuckArgs {
    /// How long a thread may wait on a person before it counts as stuck.
    #[arg(long, default_value = "1h", value_name = "DURATION")]
    pub waiting: String,
    /// How long past its wake time a timer may be before it counts as overdue.
    #[arg(long, default_value = "1m", value_name = "DURATION")]
    pub overdue: String,
    /// How long a running thread's step may run before it counts as overdue.
    #[arg(long, default_value = "10m", value_name = "DURATION")]
    pub running: String,
}

/// `stuck`.
pub fn stuck(store: &Arc<dyn Store>, guard: &crate::access::Guard, args: &StuckArgs, as_json: bool) -> Outcome {
    guard.list()?;
    let waiting = out::parse_duration(&args.waiting).map_err(Failure::usage)?;
    let overdue = out::parse_duration(&args.overdue).map_err(Failure::usage)?;
    let running = out::parse_duration(&args.running).map_err(Failure::usage)?;
    let now = now_ms();
    let mut found = find_with(store, waiting, overdue, running, now)?;
    found.retain(|s| guard.sees_id(store.as_ref(), &s.thread));
    if as_json {
        out::json(&Value::Array(
            found
                .iter()
                .map(|s| json!({ "thread": s.thread, "reason": s.reason, "since": s.since, "detail": s.detail }))
                .collect(),
        ))?;
        return Ok(());
    }
    let rows: Vec<Vec<String>> = found
        .iter()
        .map(|s| vec![s.thread.clone(), s.reason.to_string(), ago(s.since, now), s.detail.clone()])
        .collect();
    out::table(&["THREAD", "REASON", "SINCE", "DETAIL"], &rows)?;
    Ok(())
}
