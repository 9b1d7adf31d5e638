//! Schedules on one process's `RedbStore`: what is refused and why, who sees which, a fire long
//! overdue made once, and the scheduler firing a due schedule for a worker to run.

use std::sync::Arc;
use std::time::Duration;

use crate::support::worker_graph::{Job, job, wait_until};
use agentflow::access::{AccessError, Actor, Operation, RoleAccess};
use agentflow::persist::ThreadStatus;
use agentflow::prelude::*;
use agentflow::schedule::{Cron, CronError, ScheduleError, ScheduleRecord};
use agentflow::timer::{SchedulerConfig, now_ms};
use agentflow::{CancellationToken, RedbStore, Store, Submission, Worker};

/// Who the scheduled runs act for: the jobs' graph lists a tool the default policy gates.
pub const OWNER: &str = "agent:jobs";
pub const MINUTE: u64 = 60_000;
const LIMIT: Duration = Duration::from_secs(60);

pub fn redb_app() -> App<Job, ()> {
    job::graph().app().store(Arc::new(RedbStore::in_memory().expect("in-memory store")))
}

pub fn store_of(app: &App<Job, ()>) -> &dyn Store {
    app.backing_store().expect("a store").as_ref()
}

/// Runs the queued runs of `app` on a worker until the queue is empty, then stops it.
pub async fn run_queue_to_its_end(app: &App<Job, ()>) {
    let stop = CancellationToken::new();
    let worker = Worker::new(app.clone(), Arc::new(())).concurrency(4).poll_interval(Duration::from_millis(10));
    let handle = tokio::spawn(worker.run(stop.clone()));
    wait_until("the queue is empty", LIMIT, || app.live_runs().unwrap().is_empty()).await;
    stop.cancel();
    handle.await.unwrap().unwrap();
}

/// Checks that schedule `made` of `app`, overdue at `now` by three and a half periods of ten
/// minutes, fired once, as `thread`: one run queued, the schedule moved to the first time after
/// `now`, its `run.submitted` entry naming it; then that the run ran to its end.
pub async fn assert_fired_once(app: &App<Job, ()>, made: &ScheduleRecord, now: u64, thread: &str) {
    let store = store_of(app);
    let runs: Vec<_> = store.list_runs().unwrap().into_iter().filter(|r| r.thread.starts_with(&made.id)).collect();
    assert_eq!(runs.len(), 1, "one run for the missed fires: {runs:?}");
    assert_eq!(runs[0].thread, thread);
    assert_eq!(runs[0].input.as_deref(), Some(&made.input[..]), "the schedule's input");
    assert_eq!(runs[0].owner, OWNER);
    let kept = store.schedule(&made.id).unwrap().expect("the schedule is kept");
    let after = Cron::parse(&made.cron).unwrap().next_after(now).unwrap();
    assert_eq!(kept.next_at, after, "the next time after now, not after the missed ones");
    assert!(kept.next_at > now && kept.next_at - now <= 10 * MINUTE);
    assert_eq!((kept.last_fired_at, kept.last_thread.as_deref()), (Some(now), Some(thread)));
    assert!(app.fire_due_schedules(now).unwrap().is_empty(), "not due again before its next time");

    run_queue_to_its_end(app).await;
    let record = app.thread(thread).unwrap().expect("the run made its thread");
    assert_eq!(record.status, ThreadStatus::Completed, "{}", record.detail);
    assert_eq!(app.state(thread).unwrap().unwrap().state.counter, 2);
    let submitted: Vec<_> = app.audit_log(thread).unwrap().into_iter().filter(|e| e.kind == "run.submitted").collect();
    assert_eq!(submitted.len(), 1, "{submitted:?}");
    assert_eq!(submitted[0].actor, format!("schedule:{}", made.id));
    assert_eq!(submitted[0].detail["due"], made.next_at);
    assert_eq!(submitted[0].detail["cron"], made.cron.as_str());
}

/// The UTC minute of `at` as the schedule's threads are named.
pub fn stamp(at: u64) -> String {
    let secs = at / 1000;
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}{m:02}{d:02}T{:02}{:02}Z", rest / 3600, rest % 3600 / 60)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_three_and_a_half_periods_overdue_fires_once_and_its_run_runs_to_its_end() {
    let app = redb_app();
    let made = app.schedule("every-10", "*/10 * * * *", &Job::new(2, false, 0), OWNER).unwrap();
    let before = now_ms();
    assert!(made.next_at > made.created_at && made.next_at.is_multiple_of(10 * MINUTE), "{made:?}");
    assert!(made.next_at <= before + 10 * MINUTE);
    assert_eq!(made.last_fired_at, None);
    // Not due yet.
    assert!(app.fire_due_schedules(made.next_at - 1).unwrap().is_empty());
    // The clock moves past three missed fires and half a period.
    let now = made.next_at + 35 * MINUTE;
    let started = app.fire_due_schedules(now).unwrap();
    let thread = format!("every-10-{}", stamp(now));
    assert_eq!(started, vec![thread.clone()]);
    assert_fired_once(&app, &made, now, &thread).await;
}

#[test]
fn the_thread_stamp_of_the_tests_is_the_utc_minute() {
    // 2024-03-10 12:34:56.789 UTC; 2000-02-29 23:59 UTC.
    assert_eq!(stamp(1_710_074_096_789), "20240310T1234Z");
    assert_eq!(stamp(951_868_740_000), "20000229T2359Z");
}

#[test]
fn bad_expressions_ids_and_owners_are_refused_saying_what_to_write() {
    let app = redb_app();
    let input = Job::new(1, false, 0);
    let err = app.schedule("s", "0 */5 * * * *", &input, OWNER).unwrap_err();
    assert!(matches!(err, ScheduleError::Cron(CronError::Invalid { .. })), "{err}");
    let message = err.to_string();
    assert!(message.contains("it has 6 fields, not 5"), "{message}");
    assert!(message.contains("minute hour day-of-month month day-of-week"), "{message}");
    let err = app.schedule("s", "0 five * * *", &input, OWNER).unwrap_err().to_string();
    assert!(err.contains("the hour field `five` does not read"), "{err}");
    let err = app.schedule("s", "0 0 30 2 *", &input, OWNER).unwrap_err();
    assert!(matches!(err, ScheduleError::Cron(CronError::NeverFires { .. })), "{err}");
    for bad in ["", "a b", "a/b", &"x".repeat(101)] {
        let err = app.schedule(bad, "* * * * *", &input, OWNER).unwrap_err();
        assert!(matches!(err, ScheduleError::Id { .. }), "{bad:?}: {err}");
    }
    let err = app.schedule("s", "* * * * *", &input, "").unwrap_err();
    assert!(matches!(err, ScheduleError::OwnerRequired(_)), "{err}");
    let err = app.schedule("s", "* * * * *", &input, "a\0b").unwrap_err();
    assert!(matches!(err, ScheduleError::NulByte { what: "owner", .. }), "{err}");
    let err = job::graph().app().schedule("s", "* * * * *", &input, OWNER).unwrap_err();
    assert!(matches!(err, ScheduleError::NoStore), "{err}");
    assert!(app.schedules().unwrap().is_empty(), "nothing refused was kept");
}

#[test]
fn schedules_are_the_graphs_and_the_tenants_they_belong_to() {
    let app = redb_app();
    let store = store_of(&app);
    let input = Job::new(1, false, 0);
    // A schedule of another graph in the same store: not listed, not replaced, not removed here.
    store.put_schedule(ScheduleRecord::new("theirs", "other", "* * * * *", b"{}".to_vec(), "o", 0, 0)).unwrap();
    assert!(matches!(app.schedule("theirs", "* * * * *", &input, OWNER), Err(ScheduleError::OtherGraph { .. })));
    assert!(matches!(app.unschedule("theirs"), Err(ScheduleError::OtherGraph { .. })));
    assert!(app.fire_due_schedules(now_ms()).unwrap().is_empty(), "another graph's schedule is its own to fire");

    let acme = app.acting_as(Actor::new("ann", ["ops"]).for_tenants(["acme"]));
    let globex = app.acting_as(Actor::new("gus", ["ops"]).for_tenants(["globex"]));
    let made =
        acme.schedule_with("nightly", "0 2 * * *", &input, Submission::new().owner(OWNER).tenant("acme")).unwrap();
    assert_eq!(made.tenant.as_deref(), Some("acme"));
    let err =
        acme.schedule_with("x", "0 2 * * *", &input, Submission::new().owner(OWNER).tenant("globex")).unwrap_err();
    assert!(matches!(err, ScheduleError::Access(AccessError::Denied { operation: Operation::Start, .. })), "{err}");
    let err = acme.schedule("x", "0 2 * * *", &input, OWNER).unwrap_err();
    assert!(matches!(err, ScheduleError::Access(_)), "an actor of named tenants makes no tenant-less schedule: {err}");
    // Another tenant's actor neither sees, replaces nor removes it.
    assert!(globex.schedules().unwrap().is_empty());
    assert!(!globex.unschedule("nightly").unwrap());
    assert!(matches!(
        globex.schedule_with("nightly", "* * * * *", &input, Submission::new().owner(OWNER).tenant("globex")),
        Err(ScheduleError::Taken { .. })
    ));
    assert_eq!(acme.schedules().unwrap(), vec![made.clone()]);
    assert_eq!(app.schedules().unwrap(), vec![made], "the process acts for every tenant");

    // The policy decides who makes (start), lists (list) and removes (cancel) schedules.
    let policy = RoleAccess::new().allow(Operation::List, "viewer").allow(Operation::Cancel, "operator");
    let guarded = app.clone().access(policy);
    let viewer = guarded.acting_as(Actor::new("vic", ["viewer"]));
    assert_eq!(viewer.schedules().unwrap().len(), 1);
    assert!(matches!(viewer.schedule("v", "* * * * *", &input, OWNER), Err(ScheduleError::Access(_))));
    assert!(matches!(viewer.unschedule("nightly"), Err(ScheduleError::Access(_))));
    let operator = guarded.acting_as(Actor::new("olga", ["operator"]));
    assert!(operator.unschedule("nightly").unwrap());
    assert!(!operator.unschedule("nightly").unwrap(), "gone");
    assert!(app.schedules().unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replacing_a_schedule_keeps_its_last_fire_and_takes_the_new_expression() {
    let app = redb_app();
    let made = app.schedule("r", "*/10 * * * *", &Job::new(2, false, 0), OWNER).unwrap();
    let now = made.next_at + MINUTE;
    let thread = app.fire_due_schedules(now).unwrap().pop().expect("fired");
    let replaced = app.schedule("r", "0 3 * * *", &Job::new(1, false, 0), OWNER).unwrap();
    assert_eq!(replaced.cron, "0 3 * * *");
    assert_eq!(replaced.last_thread.as_deref(), Some(thread.as_str()));
    assert_eq!(replaced.next_at % (24 * 60 * MINUTE), 3 * 60 * MINUTE, "03:00 UTC");
    assert_eq!(app.schedules().unwrap(), vec![replaced]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scheduler_fires_a_due_schedule_and_a_worker_runs_it_to_its_end() {
    let app = redb_app();
    let store = Arc::clone(app.backing_store().unwrap());
    // Due a while ago (the servers were down); yearly, so it does not fall due again meanwhile.
    let input = serde_json::to_vec(&Job::new(2, false, 0)).unwrap();
    let due = now_ms() - 90 * MINUTE;
    store
        .put_schedule(ScheduleRecord::new("yearly", job::graph().name(), "0 0 1 1 *", input, OWNER, due, due))
        .unwrap();
    let scheduler =
        app.scheduler_with(Arc::new(()), SchedulerConfig::default().schedules_every(Duration::from_millis(20)));
    let stop = CancellationToken::new();
    let worker = Worker::new(app.clone(), Arc::new(())).poll_interval(Duration::from_millis(10));
    let handle = tokio::spawn(worker.run(stop.clone()));
    let mut thread = None;
    wait_until("the schedule's run completed", LIMIT, || {
        thread = store.schedule("yearly").unwrap().and_then(|s| s.last_thread);
        thread.as_ref().is_some_and(|t| app.thread(t).unwrap().is_some_and(|r| r.status == ThreadStatus::Completed))
    })
    .await;
    scheduler.shutdown().await;
    stop.cancel();
    handle.await.unwrap().unwrap();
    let thread = thread.unwrap();
    assert!(thread.starts_with("yearly-"), "{thread}");
    assert_eq!(app.state(&thread).unwrap().unwrap().state.counter, 2);
    let kept = store.schedule("yearly").unwrap().unwrap();
    assert!(kept.next_at > now_ms(), "moved to next new year: {kept:?}");
    let threads = store.list_threads().unwrap();
    assert_eq!(threads.iter().filter(|t| t.id.starts_with("yearly-")).count(), 1, "fired once");
}
