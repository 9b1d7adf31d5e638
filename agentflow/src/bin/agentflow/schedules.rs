//! `schedules` and `schedules delete ID`: the store's cron schedules, listed and removed, checked
//! for the `--as` actor (`list`, `cancel`) and only those of its tenants. A schedule is made by
//! the app or the server's API (its input is the graph's state, which needs the graph's types).

use agentflow::Store;
use agentflow::access::Operation;
use agentflow::schedule::ScheduleRecord;
use agentflow::server::inspect::display::ago;
use agentflow_store::QueueError;
use clap::{Args, Subcommand};
use serde_json::{Value, json};

use crate::access::{Guard, denied};
use crate::out::{self, now_ms};
use crate::{Failure, Outcome};

/// `schedules` arguments.
#[derive(Args, Debug)]
pub struct SchedulesArgs {
    /// What to do (default: list them).
    #[command(subcommand)]
    pub action: Option<ScheduleAction>,
}

/// What to do with the schedules.
#[derive(Subcommand, Debug, Clone)]
pub enum ScheduleAction {
    /// Remove a schedule: it fires no more (the runs it started are left as they are).
    Delete {
        /// The schedule's id.
        id: String,
    },
}

/// `schedules [delete ID]`.
pub fn schedules(store: &dyn Store, guard: &Guard, args: &SchedulesArgs, as_json: bool) -> Outcome {
    match &args.action {
        None => list(store, guard, as_json),
        Some(ScheduleAction::Delete { id }) => delete(store, guard, id, as_json),
    }
}

/// A queue error as the command's failure.
fn failure(e: QueueError) -> Failure {
    match e {
        QueueError::Unsupported { .. } => Failure::not_found(format!("{e}; this store keeps no cron schedules")),
        other => Failure::store(other),
    }
}

/// A schedule, as `--json` prints it (the input left out: it reads with the graph's types; the
/// webhook URL masked, [`mask_url`](agentflow::secret::mask_url)).
pub fn view(s: &ScheduleRecord) -> Value {
    json!({
        "id": s.id, "graph": s.graph, "cron": s.cron, "owner": s.owner, "tenant": s.tenant,
        "webhook": s.webhook.as_deref().map(agentflow::secret::mask_url), "next_at": s.next_at, "created_at": s.created_at,
        "last_fired_at": s.last_fired_at, "last_thread": s.last_thread,
    })
}

/// Prints `rows` (schedules as `--json` shows them) as a table.
pub fn print(rows: &[Value], as_json: bool) -> Outcome {
    if as_json {
        return out::json(&Value::Array(rows.to_vec()));
    }
    let now = now_ms();
    let text = |v: &Value| v.as_str().map_or_else(|| "-".to_string(), str::to_string);
    let when = |v: &Value| v.as_u64().map_or_else(|| "-".to_string(), |at| ago(at, now));
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|s| {
            vec![
                text(&s["id"]),
                text(&s["graph"]),
                text(&s["cron"]),
                when(&s["next_at"]),
                when(&s["last_fired_at"]),
                text(&s["last_thread"]),
                text(&s["owner"]),
                text(&s["tenant"]),
            ]
        })
        .collect();
    out::table(&["ID", "GRAPH", "CRON (UTC)", "NEXT", "LAST FIRED", "LAST THREAD", "OWNER", "TENANT"], &rows)
}

fn list(store: &dyn Store, guard: &Guard, as_json: bool) -> Outcome {
    guard.list()?;
    let listing = store.scan_schedules().map_err(failure)?;
    for skipped in &listing.skipped {
        eprintln!(
            "agentflow: skipped a schedule that does not decode: {}",
            crate::out::printable_line(&skipped.to_string())
        );
    }
    let mut kept = listing.items;
    kept.retain(|s| guard.actor().acts_for(s.tenant.as_deref()));
    print(&kept.iter().map(view).collect::<Vec<_>>(), as_json)
}

fn delete(store: &dyn Store, guard: &Guard, id: &str, as_json: bool) -> Outcome {
    guard.access().allow(Operation::Cancel, None).map_err(denied)?;
    let missing =
        || Failure::not_found(format!("no schedule `{id}` (none you may see); `agentflow schedules` lists them"));
    let kept = store.schedule(id).map_err(failure)?.ok_or_else(missing)?;
    if !guard.actor().acts_for(kept.tenant.as_deref()) || !store.delete_schedule(id).map_err(failure)? {
        return Err(missing());
    }
    if as_json {
        return out::json(&json!({ "id": id, "unscheduled": true }));
    }
    outln!("removed schedule `{id}` ({} {}); the runs it started are left as they are", kept.graph, kept.cron)
}
