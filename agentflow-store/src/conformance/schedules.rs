//! Cron schedules: kept, replaced, listed and removed; a fire moves a schedule's `next_at` and
//! queues its run in one transaction, only while `next_at` is what the firer read, so of
//! concurrent fires one is made, and the fires a schedule missed are made once.

use std::sync::Barrier;

use serde_json::json;

use crate::conformance::fixtures::NOW;
use crate::{NewAuditEntry, NewRun, QueueError, ScheduleFire, ScheduleRecord, Store};

/// An hour, in millis: the period of the suite's schedules.
const HOUR: u64 = 3_600_000;

fn nightly(next_at: u64) -> ScheduleRecord {
    let mut s = ScheduleRecord::new("nightly", "g", "0 * * * *", br#"{"n":1}"#.to_vec(), "alice", next_at, NOW);
    s.tenant = Some("acme".to_string());
    s.webhook = Some("https://example.test/cron".to_string());
    s
}

/// A fire of `schedule` at `now`, as a scheduler makes it: its run is a new thread named by
/// the fire's time, from the schedule's input, owner, tenant and webhook.
fn fire_of(schedule: &ScheduleRecord, now: u64, next_at: u64) -> ScheduleFire {
    let thread = format!("{}-{}", schedule.id, schedule.next_at);
    let mut run = NewRun::new(&thread, &schedule.graph, Some(schedule.input.clone()), &schedule.owner, now);
    run.tenant.clone_from(&schedule.tenant);
    run.webhook.clone_from(&schedule.webhook);
    let entry = NewAuditEntry::new(now, format!("schedule:{}", schedule.id), "run.submitted", json!({}));
    ScheduleFire::new(&schedule.id, schedule.next_at, next_at, now, run, entry)
}

/// Schedules are kept by id (a put replaces), read, listed by id and removed.
pub fn schedules_roundtrip(store: &dyn Store) {
    assert!(store.scan_schedules().unwrap().items.is_empty());
    assert_eq!(store.schedule("nightly").unwrap(), None);
    let s = nightly(NOW + HOUR);
    store.put_schedule(s.clone()).unwrap();
    assert_eq!(store.schedule("nightly").unwrap(), Some(s.clone()));
    let mut other = ScheduleRecord::new("hourly", "h", "5 * * * *", b"{}".to_vec(), "bob", NOW + 2 * HOUR, NOW);
    other.last_fired_at = Some(NOW - HOUR);
    other.last_thread = Some("hourly-1".to_string());
    store.put_schedule(other.clone()).unwrap();
    let mut replaced = s.clone();
    replaced.cron = "30 2 * * *".to_string();
    replaced.webhook = None;
    store.put_schedule(replaced.clone()).unwrap();
    assert_eq!(store.scan_schedules().unwrap().items, [other.clone(), replaced]);
    assert!(store.delete_schedule("nightly").unwrap());
    assert!(!store.delete_schedule("nightly").unwrap());
    assert_eq!(store.scan_schedules().unwrap().items, [other]);
}

/// A fire whose `next_at` is still the schedule's moves it and queues the run with its audit
/// entry; the same fire again, a fire of a gone schedule, and a fire whose run is refused write
/// nothing. A schedule whose `next_at` lies hours in the past (fires missed while nothing ran)
/// is fired once, to the next time after now.
pub fn schedule_fire_moves_next_at_and_queues_the_run(store: &dyn Store) {
    // Three and a half periods missed.
    let s = nightly(NOW - 3 * HOUR - HOUR / 2);
    store.put_schedule(s.clone()).unwrap();
    let fire = fire_of(&s, NOW, NOW + HOUR / 2);
    let thread = fire.run.thread.clone();
    assert!(store.fire_schedule(fire.clone()).unwrap());
    let moved = store.schedule("nightly").unwrap().unwrap();
    assert_eq!(
        (moved.next_at, moved.last_fired_at, moved.last_thread.as_deref()),
        (NOW + HOUR / 2, Some(NOW), Some(thread.as_str()))
    );
    assert_eq!(
        (moved.cron.as_str(), moved.input.as_slice(), moved.created_at),
        (s.cron.as_str(), s.input.as_slice(), NOW)
    );
    let runs = store.list_runs().unwrap();
    assert_eq!(runs.len(), 1, "one run for every fire missed");
    let run = &runs[0];
    assert_eq!((run.thread.as_str(), run.graph.as_str(), run.owner.as_str()), (thread.as_str(), "g", "alice"));
    assert_eq!((run.input.as_deref(), run.tenant.as_deref()), (Some(s.input.as_slice()), Some("acme")));
    assert_eq!((run.webhook.as_deref(), run.follow_up), (Some("https://example.test/cron"), false));
    let audit = store.list_audit(&thread).unwrap();
    assert_eq!(
        (audit.len(), audit[0].actor.as_str(), audit[0].kind.as_str()),
        (1, "schedule:nightly", "run.submitted")
    );

    // The same fire again (another process read the same `next_at`): refused, nothing written.
    assert!(!store.fire_schedule(fire).unwrap());
    assert!(!store.fire_schedule(fire_of(&nightly(NOW), NOW, NOW + HOUR)).unwrap(), "a `next_at` it never had");
    let mut gone = nightly(NOW);
    gone.id = "gone".to_string();
    assert!(!store.fire_schedule(fire_of(&gone, NOW, NOW + HOUR)).unwrap());
    assert_eq!(store.list_runs().unwrap().len(), 1);
    assert_eq!(store.schedule("nightly").unwrap(), Some(moved.clone()));

    // A run that cannot be queued (its thread is queued already) refuses the fire: the schedule
    // does not move.
    let mut clash = fire_of(&moved, NOW + HOUR / 2, NOW + HOUR + HOUR / 2);
    clash.run.thread.clone_from(&thread);
    let err = store.fire_schedule(clash).unwrap_err();
    assert!(matches!(&err, QueueError::AlreadyQueued { thread: t } if *t == thread), "{err}");
    assert_eq!(store.schedule("nightly").unwrap(), Some(moved.clone()));
    assert_eq!(store.list_audit(&thread).unwrap().len(), 1);

    // The next fire, at its time.
    assert!(store.fire_schedule(fire_of(&moved, NOW + HOUR / 2, NOW + HOUR + HOUR / 2)).unwrap());
    assert_eq!(store.list_runs().unwrap().len(), 2);
    assert_eq!(store.schedule("nightly").unwrap().unwrap().next_at, NOW + HOUR + HOUR / 2);
}

/// Eight processes fire one due schedule at once: one fire is made, one run queued.
pub fn schedule_fire_race(store: &dyn Store) {
    let s = nightly(NOW - HOUR);
    store.put_schedule(s.clone()).unwrap();
    let barrier = Barrier::new(8);
    let made: Vec<bool> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let (barrier, s) = (&barrier, &s);
                scope.spawn(move || {
                    barrier.wait();
                    store.fire_schedule(fire_of(s, NOW, NOW + HOUR)).unwrap()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(made.iter().filter(|m| **m).count(), 1, "{made:?}");
    assert_eq!(store.list_runs().unwrap().len(), 1);
    assert_eq!(store.list_audit(&format!("nightly-{}", NOW - HOUR)).unwrap().len(), 1);
    assert_eq!(store.schedule("nightly").unwrap().unwrap().next_at, NOW + HOUR);
}
