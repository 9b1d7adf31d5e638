//! Schedules fired by two apps at once (two store instances on one PostgreSQL schema, as two
//! servers; two handles of one `RedbStore` in one process): every fire, however overdue, queues
//! one run between them, and the runs run on a worker to their end.

use std::collections::BTreeMap;
use std::sync::{Arc, Barrier};

use crate::schedules::{MINUTE, OWNER, redb_app, run_queue_to_its_end, stamp, store_of};
use crate::support::pg::pg_url;
use crate::support::worker_graph::{Job, fresh_schema, job};
use agentflow::persist::ThreadStatus;
use agentflow::prelude::*;
use agentflow::schedule::Cron;
use agentflow::{Store, timer::now_ms};
use agentflow_store::PostgresStore;

/// Schedules raced for in each round.
const SCHEDULES: usize = 6;
/// Rounds: each moves the clock three and a half periods past every schedule's next time.
const ROUNDS: usize = 3;

fn pg_app(url: &str, schema: &str) -> App<Job, ()> {
    let store = PostgresStore::builder().schema(schema).open(url).expect("open the PostgreSQL store");
    job::graph().app().store(Arc::new(store) as Arc<dyn Store>)
}

/// Makes [`SCHEDULES`] schedules every ten minutes on `a`, then for [`ROUNDS`] rounds moves the
/// clock 35 minutes past the latest next time and has `a` and `b` fire at the same instant:
/// each schedule fires once a round, its run queued once, named for the round's minute. Then a
/// worker runs every run to its end.
async fn two_apps_race(a: App<Job, ()>, b: App<Job, ()>) {
    let every_10 = Cron::parse("*/10 * * * *").unwrap();
    for i in 0..SCHEDULES {
        a.schedule(&format!("race-{i}"), every_10.as_str(), &Job::new(2, false, 0), OWNER).unwrap();
    }
    let mut expected = Vec::new();
    for round in 0..ROUNDS {
        let latest = a.schedules().unwrap().iter().map(|s| s.next_at).max().unwrap();
        let now = latest + 35 * MINUTE;
        let barrier = Barrier::new(2);
        let fire = |app: &App<Job, ()>| {
            barrier.wait();
            app.fire_due_schedules(now).unwrap()
        };
        let (by_a, by_b) = std::thread::scope(|s| {
            let (ha, hb) = (s.spawn(|| fire(&a)), s.spawn(|| fire(&b)));
            (ha.join().unwrap(), hb.join().unwrap())
        });
        let mut fired: BTreeMap<String, usize> = BTreeMap::new();
        for thread in by_a.iter().chain(&by_b) {
            *fired.entry(thread.clone()).or_default() += 1;
        }
        let want: Vec<String> = (0..SCHEDULES).map(|i| format!("race-{i}-{}", stamp(now))).collect();
        assert_eq!(fired.keys().cloned().collect::<Vec<_>>(), want, "round {round}: every schedule fired");
        assert!(fired.values().all(|n| *n == 1), "round {round}: each by one app only: {by_a:?} {by_b:?}");
        for s in a.schedules().unwrap() {
            assert_eq!(s.next_at, every_10.next_after(now).unwrap(), "round {round}: {s:?}");
            assert_eq!(s.last_fired_at, Some(now));
        }
        expected.extend(want);
    }
    let mut queued: Vec<String> = store_of(&a).list_runs().unwrap().into_iter().map(|r| r.thread).collect();
    queued.sort();
    expected.sort();
    assert_eq!(queued, expected, "one run queued per schedule and round, no more");

    run_queue_to_its_end(&a).await;
    for thread in &expected {
        let record = a.thread(thread).unwrap().expect("the run made its thread");
        assert_eq!(record.status, ThreadStatus::Completed, "{thread}: {}", record.detail);
        assert_eq!(a.state(thread).unwrap().unwrap().state.counter, 2, "{thread}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_handles_of_one_redb_store_firing_at_once_queue_one_run_per_fire() {
    let a = redb_app();
    let b = a.clone();
    two_apps_race(a, b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_two_servers_firing_overdue_schedules_at_once_queue_one_run_per_fire() {
    let Some(url) = pg_url() else { return };
    let schema = fresh_schema("schedules");
    // Two store instances, each its own connection pool: as two servers sharing the schema.
    let (a, b) = (pg_app(&url, &schema), pg_app(&url, &schema));
    assert!(a.fire_due_schedules(now_ms()).unwrap().is_empty());
    two_apps_race(a, b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_schedules_are_kept_for_every_server_of_the_schema() {
    let Some(url) = pg_url() else { return };
    let schema = fresh_schema("schedules_kept");
    let (a, b) = (pg_app(&url, &schema), pg_app(&url, &schema));
    let made = a.schedule("kept", "15 4 * * SUN", &Job::new(1, false, 0), OWNER).unwrap();
    assert_eq!(b.schedules().unwrap(), vec![made.clone()], "read back as made, by another instance");
    assert!(b.unschedule("kept").unwrap());
    assert!(a.schedules().unwrap().is_empty());
    assert!(!a.unschedule("kept").unwrap());
}
