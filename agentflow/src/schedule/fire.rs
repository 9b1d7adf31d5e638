//! One fire of a due schedule: the run it queues, its thread's name and the schedule's next time
//! ([`fire_of`]).

use agentflow_store::{NewAuditEntry, NewRun, ScheduleFire, ScheduleRecord};
use serde_json::json;

use super::cron::{Cron, CronError, minute_stamp};

/// The actor the `run.submitted` entry of schedule `id`'s runs names.
pub fn schedule_actor(id: &str) -> String {
    format!("schedule:{id}")
}

/// The thread a fire of schedule `id` at `fired_at` (unix millis) starts:
/// `<id>-<YYYYMMDDTHHMMZ>`, the UTC minute of the fire; `attempt` > 0 adds `-<attempt + 1>` (a
/// thread of that name exists already: the schedule was removed and made again within the
/// minute).
pub(crate) fn fire_thread(id: &str, fired_at: u64, attempt: u32) -> String {
    let stamp = minute_stamp(fired_at).unwrap_or_else(|| fired_at.to_string());
    match attempt {
        0 => format!("{id}-{stamp}"),
        n => format!("{id}-{stamp}-{}", n.saturating_add(1)),
    }
}

/// The fire of due schedule `record` at `now` starting thread `thread`: claimed only if the
/// schedule's `next_at` is still the one read, which becomes the first time the cron names
/// strictly after `now`, so every fire missed before `now` is made once, by this one.
///
/// # Errors
/// The stored expression does not read, or names no time after `now`.
pub(crate) fn fire_of(record: &ScheduleRecord, now: u64, thread: &str) -> Result<ScheduleFire, CronError> {
    let next_at = Cron::parse(&record.cron)?.next_after(now)?;
    let mut run = NewRun::new(thread, &record.graph, Some(record.input.clone()), &record.owner, now);
    let mut detail = json!({
        "graph": record.graph,
        "owner": record.owner,
        "schedule": record.id,
        "cron": record.cron,
        "due": record.next_at,
    });
    if let Some(tenant) = &record.tenant {
        detail["tenant"] = tenant.as_str().into();
        run = run.with_tenant(tenant.as_str());
    }
    if let Some(url) = &record.webhook {
        run = run.with_webhook(url.as_str());
    }
    let entry = NewAuditEntry::new(now, schedule_actor(&record.id), "run.submitted", detail);
    Ok(ScheduleFire::new(&record.id, record.next_at, next_at, now, run, entry))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2024-03-10 12:00 UTC.
    const NOON: u64 = 1_710_072_000_000;
    const MINUTE: u64 = 60_000;

    #[test]
    fn a_fire_long_overdue_moves_the_schedule_past_now_once() {
        // Every 10 minutes; due at 11:25, now 12:00 + 30 s: 3.5 periods late.
        let due = NOON - 35 * MINUTE;
        let now = NOON + 30_000;
        let mut record = ScheduleRecord::new("report", "g", "*/10 * * * *", b"{}".to_vec(), "ann", due, 0);
        record.tenant = Some("acme".to_string());
        let fire = fire_of(&record, now, &fire_thread("report", now, 0)).unwrap();
        assert_eq!(fire.expected_next, due);
        assert_eq!(fire.next_at, NOON + 10 * MINUTE, "the next occurrence after now, not after the missed one");
        assert_eq!(fire.fired_at, now);
        assert_eq!(fire.run.thread, "report-20240310T1200Z");
        assert_eq!(fire.run.input.as_deref(), Some(&b"{}"[..]));
        assert_eq!((fire.run.owner.as_str(), fire.run.tenant.as_deref(), fire.run.at), ("ann", Some("acme"), now));
        assert_eq!(fire.entry.actor, "schedule:report");
        assert_eq!(fire.entry.kind, "run.submitted");
        assert_eq!(fire.entry.detail["due"], due);
        assert_eq!(fire.entry.detail["tenant"], "acme");
    }

    #[test]
    fn a_damaged_stored_expression_is_an_error_not_a_fire() {
        let record = ScheduleRecord::new("x", "g", "0 0 * * * *", Vec::new(), "", 0, 0);
        assert!(matches!(fire_of(&record, NOON, "x-1"), Err(CronError::Invalid { .. })));
    }

    #[test]
    fn later_attempts_name_other_threads() {
        assert_eq!(fire_thread("a", NOON, 0), "a-20240310T1200Z");
        assert_eq!(fire_thread("a", NOON, 1), "a-20240310T1200Z-2");
    }
}
