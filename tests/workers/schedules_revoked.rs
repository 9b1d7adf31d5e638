//! A schedule's fire is checked again for its owner: once the owner loses the role that lets
//! them start runs, the tenant, or their place among the known users, the schedule starts
//! nothing, stays as it was (due), and its refusal is audited once, naming why; given the right
//! back, it fires. No thread, whoever names it, takes a schedule's refusal stream.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::schedules::{MINUTE, redb_app, stamp, store_of};
use crate::support::worker_graph::Job;
use agentflow::access::{Actor, Operation, RoleAccess};
use agentflow::schedule::{SCHEDULE_REFUSED_KIND, refusal_stream};
use agentflow::{RunError, Submission, WorkerError};

/// The known users, as a server's users file would name them now.
type Directory = Arc<Mutex<BTreeMap<String, Actor>>>;

fn set(directory: &Directory, actor: Option<Actor>) {
    let mut known = directory.lock().unwrap();
    match actor {
        Some(actor) => known.insert("ann".to_string(), actor),
        None => known.remove("ann"),
    };
}

#[test]
fn a_schedule_whose_owner_lost_the_right_to_start_its_runs_does_not_fire() {
    let policy = RoleAccess::new().allow(Operation::Start, "operator");
    let app = redb_app().access(policy);
    let operator = || Actor::new("ann", ["operator"]).for_tenants(["acme"]);
    let runs = Submission::new().owner("ann").tenant("acme");
    let made = app.clone().acting_as(operator()).schedule_with("nightly", "*/10 * * * *", &Job::new(1, false, 0), runs);
    let made = made.unwrap();
    let store = store_of(&app);
    let directory: Directory = Arc::default();
    let lookup = |directory: &Directory| {
        let directory = Arc::clone(directory);
        move |name: &str| directory.lock().unwrap().get(name).cloned()
    };
    // Each scheduler below is a process started anew: it reports a refusal once.
    let scheduler = || app.clone().schedule_owners(lookup(&directory));
    // In the schedule's own stream, not in the thread of the due minute's name.
    let refusals = || {
        store
            .list_audit(&refusal_stream("nightly"))
            .unwrap()
            .into_iter()
            .filter(|e| e.kind == SCHEDULE_REFUSED_KIND)
            .collect::<Vec<_>>()
    };
    let now = made.next_at + MINUTE / 2;

    // The role that lets her start runs is removed.
    set(&directory, Some(Actor::new("ann", Vec::<String>::new()).for_tenants(["acme"])));
    let lost_role = scheduler();
    assert!(lost_role.fire_due_schedules(now).unwrap().is_empty(), "refused: nothing fired");
    assert!(lost_role.fire_due_schedules(now + 1000).unwrap().is_empty(), "still refused");
    assert!(store.list_runs().unwrap().is_empty(), "no run was queued");
    assert_eq!(store.schedule("nightly").unwrap().as_ref(), Some(&made), "the schedule is kept as it was, due");
    let audited = refusals();
    assert_eq!(audited.len(), 1, "audited once for its due time: {audited:?}");
    assert_eq!(audited[0].actor, "schedule:nightly");
    let due_thread = format!("nightly-{}", stamp(made.next_at));
    assert!(store.list_audit(&due_thread).unwrap().is_empty(), "nothing in the due minute's thread");
    assert_eq!(audited[0].detail["owner"], "ann");
    assert_eq!(audited[0].detail["due"], made.next_at);
    let reason = audited[0].detail["reason"].as_str().unwrap();
    assert!(reason.contains("`ann` may not") && reason.contains("`operator`"), "{reason}");

    // She keeps the role but no longer acts for the schedule's tenant.
    set(&directory, Some(Actor::new("ann", ["operator"]).for_tenants(["globex"])));
    assert!(scheduler().fire_due_schedules(now).unwrap().is_empty());
    let reason = refusals()[1].detail["reason"].as_str().unwrap().to_string();
    assert!(reason.contains("tenant `acme`"), "{reason}");

    // She is no longer a user at all.
    set(&directory, None);
    assert!(scheduler().fire_due_schedules(now).unwrap().is_empty());
    let reason = refusals()[2].detail["reason"].as_str().unwrap().to_string();
    assert!(reason.contains("`ann` is no longer a known user"), "{reason}");
    assert!(store.list_runs().unwrap().is_empty());

    // Without a lookup, the fire is checked for the app's own actor: one without the role is
    // refused as well.
    let bystander = app.clone().acting_as(Actor::new("bob", Vec::<String>::new()));
    assert!(bystander.fire_due_schedules(now).unwrap().is_empty());
    assert_eq!(refusals().len(), 4);

    // Given the role back, the schedule fires (once), for her tenant.
    set(&directory, Some(operator()));
    let started = scheduler().fire_due_schedules(now).unwrap();
    assert_eq!(started, [format!("nightly-{}", stamp(now))]);
    let queued = store.list_runs().unwrap();
    assert_eq!(queued.len(), 1);
    assert_eq!((queued[0].owner.as_str(), queued[0].tenant.as_deref()), ("ann", Some("acme")));
    assert!(store.schedule("nightly").unwrap().unwrap().next_at > now, "moved on");
}

/// A library app that passes ids its users chose: a thread named as a schedule's refusal stream
/// is refused on every path that creates a thread (queued for a tenant, queued with every
/// option, run in this process), so no tenant reads another's refusals as its thread's audit.
#[tokio::test]
async fn no_thread_takes_the_name_of_a_schedule_s_refusal_stream() {
    let app = redb_app();
    let store = store_of(&app);
    let stream = refusal_stream("nightly");
    let input = Job::new(1, false, 0);
    let refused = |e: WorkerError| matches!(e, WorkerError::ReservedThreadId { ref thread } if *thread == stream);
    assert!(refused(app.submit_for(&stream, &input, "eve", "globex").unwrap_err()));
    let submission = Submission::new().owner("eve").tenant("globex");
    assert!(refused(app.submit_with(&stream, &input, submission).unwrap_err()));
    assert!(refused(app.submit(&stream, &input).unwrap_err()));
    let run = app.runner(&()).thread(&stream).owner("eve").tenant("globex").run(input.clone()).await.err();
    assert!(matches!(run, Some(RunError::ReservedThreadId { ref thread }) if *thread == stream), "{run:?}");
    assert!(store.list_runs().unwrap().is_empty(), "nothing was queued");
    assert!(store.thread(&stream).unwrap().is_none(), "no such thread");
    // Other ids holding `schedule` are threads like any other.
    app.submit_for("schedule-nightly", &input, "eve", "globex").unwrap();
}
