//! Follow-up runs: queued behind a thread's run at the back or the front, each taking the run's
//! place when the settle that ends it removes it, the run's webhook delivery written once by its
//! first settle, and a purge removing both.

use serde_json::json;

use crate::conformance::fixtures::{NOW, thread};
use crate::{
    FollowUpPlace, FollowUpQueued, NewAuditEntry, NewRun, NewWebhookDelivery, PURGED_KIND, QueuedRun, RunControl,
    RunWait, Settle, StepCommit, Store,
};

/// A follow-up of `thread` whose input is `input`.
fn follow_up(thread: &str, input: &str, at: u64) -> NewRun {
    NewRun::new(thread, "g", Some(input.as_bytes().to_vec()), "alice", at).as_follow_up(None)
}

fn submitted(at: u64) -> NewAuditEntry {
    NewAuditEntry::new(at, "alice", "run.submitted", json!({ "follow_up": true }))
}

/// The input of `run`, as text.
fn input(run: &QueuedRun) -> String {
    String::from_utf8_lossy(run.input.as_deref().unwrap_or_default()).into_owned()
}

/// The inputs of `runs`, as text.
fn inputs(runs: &[QueuedRun]) -> Vec<String> {
    runs.iter().map(input).collect()
}

/// The thread's queued run.
fn row(store: &dyn Store, thread: &str) -> Option<QueuedRun> {
    store.list_runs().unwrap().into_iter().find(|r| r.thread == thread)
}

/// Claims `thread`'s run for `holder` at `now` (it must be claimable).
fn claim(store: &dyn Store, holder: &str, now: u64) -> QueuedRun {
    let mut claimed = store.claim_runs("g", holder, 1000, now, 1).unwrap();
    assert_eq!(claimed.len(), 1, "a run to claim at {now}");
    claimed.remove(0)
}

/// A follow-up of a thread with no run is queued at once; others wait behind the run, at the
/// back or the front; the settle that removes the run puts the first follow-up in its place
/// (ready, never claimed), one at a time, while a parking settle or a cancel the worker did not
/// act on keeps them waiting; the last one's settle empties the queue.
pub fn follow_ups_take_the_place_of_the_ended_run(store: &dyn Store) {
    let first = follow_up("t", "first", NOW).with_webhook("https://example.test/hook");
    assert_eq!(store.enqueue_follow_up(first, submitted(NOW), FollowUpPlace::Back).unwrap(), FollowUpQueued::Now);
    let queued = row(store, "t").expect("the follow-up is the thread's queued run");
    assert!(queued.follow_up && queued.wait == RunWait::Ready && queued.holder.is_none());
    assert_eq!(
        (vec![input(&queued)], queued.webhook.as_deref()),
        (vec!["first".to_string()], Some("https://example.test/hook"))
    );
    assert_eq!(store.list_audit("t").unwrap().len(), 1, "the entry is written with it");
    assert!(store.list_follow_ups("t").unwrap().is_empty());

    let enqueue =
        |input: &str, at: u64, place| store.enqueue_follow_up(follow_up("t", input, at), submitted(at), place);
    assert_eq!(enqueue("b1", NOW + 1, FollowUpPlace::Back).unwrap(), FollowUpQueued::Behind { ahead: 0 });
    assert_eq!(enqueue("b2", NOW + 2, FollowUpPlace::Back).unwrap(), FollowUpQueued::Behind { ahead: 1 });
    assert_eq!(enqueue("f1", NOW + 3, FollowUpPlace::Front).unwrap(), FollowUpQueued::Behind { ahead: 0 });
    let mut forked = follow_up("t", "f2", NOW + 4).as_follow_up(Some(7));
    forked.follow_up = false;
    let place = FollowUpPlace::Front;
    // Those put at the front run in the order they were put there, before those at the back.
    assert_eq!(
        store.enqueue_follow_up(forked, submitted(NOW + 4), place).unwrap(),
        FollowUpQueued::Behind { ahead: 1 }
    );
    let waiting = store.list_follow_ups("t").unwrap();
    assert_eq!(inputs(&waiting), ["f1", "f2", "b1", "b2"]);
    assert!(waiting.iter().all(|r| r.follow_up && r.thread == "t" && r.wait == RunWait::Ready && r.claims == 0));
    assert_eq!((waiting[1].fork_from, waiting[1].enqueued_at), (Some(7), NOW + 4));
    assert_eq!(store.list_audit("t").unwrap().len(), 5);
    assert_eq!(store.list_runs().unwrap().len(), 1, "follow-ups are not queued runs");

    // Parked, then kept for a cancel it did not act on: the follow-ups wait.
    claim(store, "w1", NOW + 10);
    assert!(store.settle_run_and_release("t", "w1", &Settle::park(RunWait::Answer)).unwrap());
    assert_eq!(inputs(&store.list_runs().unwrap()), ["first"]);
    assert!(store.control_run("t", RunControl::Cancel).unwrap());
    claim(store, "w2", NOW + 20);
    assert!(store.settle_run_and_release("t", "w2", &Settle::remove()).unwrap());
    let kept = row(store, "t").unwrap();
    assert_eq!((vec![input(&kept)], kept.control), (vec!["first".to_string()], Some(RunControl::Cancel)));
    assert_eq!(store.list_follow_ups("t").unwrap().len(), 4);

    // The run ends (its cancel handled): the first follow-up takes its place.
    claim(store, "w3", NOW + 30);
    assert!(store.settle_run_and_release("t", "w3", &Settle::remove().handled(Some(RunControl::Cancel))).unwrap());
    let next = row(store, "t").expect("the first follow-up is queued");
    assert_eq!(vec![input(&next)], ["f1"]);
    assert!(next.follow_up && next.control.is_none() && next.holder.is_none() && next.heartbeat_at.is_none());
    assert_eq!((next.claims, next.wait, next.fork_from, next.webhook.as_deref()), (0, RunWait::Ready, None, None));
    assert_eq!(inputs(&store.list_follow_ups("t").unwrap()), ["f2", "b1", "b2"]);
    // One more put at the front goes after `f2`, before those at the back.
    assert_eq!(enqueue("f3", NOW + 5, FollowUpPlace::Front).unwrap(), FollowUpQueued::Behind { ahead: 1 });
    assert_eq!(enqueue("b3", NOW + 6, FollowUpPlace::Back).unwrap(), FollowUpQueued::Behind { ahead: 4 });
    assert_eq!(inputs(&store.list_follow_ups("t").unwrap()), ["f2", "f3", "b1", "b2", "b3"]);

    // A settle by another holder changes nothing.
    claim(store, "w4", NOW + 40);
    assert!(!store.settle_run("t", "w5", &Settle::remove()).unwrap());
    assert_eq!(inputs(&store.list_follow_ups("t").unwrap()).len(), 5);
    for (i, want) in ["f2", "f3", "b1", "b2", "b3"].into_iter().enumerate() {
        assert!(store.settle_run_and_release("t", &format!("w{}", 4 + i), &Settle::remove()).unwrap());
        assert_eq!(vec![input(&row(store, "t").expect("next"))], [want]);
        claim(store, &format!("w{}", 5 + i), NOW + 50 + i as u64);
    }
    assert!(store.settle_run_and_release("t", "w9", &Settle::remove()).unwrap());
    assert!(row(store, "t").is_none() && store.list_follow_ups("t").unwrap().is_empty(), "the queue is empty");
    // A thread with no run: its next follow-up is queued at once again.
    assert_eq!(enqueue("again", NOW + 90, FollowUpPlace::Front).unwrap(), FollowUpQueued::Now);
}

/// The settle that first stops a run with a webhook writes its delivery and clears the row's
/// webhook, so a later settle of the run writes none; a settle of a run without a webhook
/// writes none; a follow-up's own webhook is told by its own settle.
pub fn settle_writes_the_webhook_delivery_once(store: &dyn Store) {
    let run = NewRun::new("t", "g", None, "alice", NOW).with_webhook("https://example.test/t");
    store.enqueue_run(run).unwrap();
    let hooked = follow_up("t", "next", NOW + 1).with_webhook("https://example.test/next");
    store.enqueue_follow_up(hooked, submitted(NOW + 1), FollowUpPlace::Back).unwrap();
    store.enqueue_run(NewRun::new("plain", "g", None, "alice", NOW + 2)).unwrap();
    let delivery =
        |body: &str, at: u64| NewWebhookDelivery::new("https://example.test/t", body.as_bytes().to_vec()).at(at);

    let claimed = claim(store, "w1", NOW + 10);
    assert_eq!((claimed.thread.as_str(), claimed.webhook.as_deref()), ("t", Some("https://example.test/t")));
    let parked = Settle::park(RunWait::Answer).with_webhook(delivery("waiting", NOW + 11));
    assert!(store.settle_run_and_release("t", "w1", &parked).unwrap());
    assert_eq!(row(store, "t").unwrap().webhook, None, "the row's webhook is cleared once told");
    let told = store.list_webhooks("t").unwrap();
    assert_eq!(told.len(), 1);
    let d = &told[0];
    assert_eq!(
        (d.thread.as_str(), d.url.as_str(), d.payload.as_slice()),
        ("t", "https://example.test/t", &b"waiting"[..])
    );
    assert_eq!((d.created_at, d.next_at, d.attempts), (NOW + 11, NOW + 11, 0));
    assert_eq!((d.status, d.holder.as_deref(), d.last_error.as_deref()), (crate::DeliveryStatus::Pending, None, None));

    // Its second settle (the run ends) writes none; the follow-up takes its place with its own.
    assert!(store.wake_run("t", RunWait::Answer).unwrap());
    let claimed = claim(store, "w2", NOW + 20);
    assert_eq!((claimed.thread.as_str(), claimed.webhook), ("t", None));
    assert!(
        store.settle_run_and_release("t", "w2", &Settle::remove().with_webhook(delivery("ended", NOW + 21))).unwrap()
    );
    assert_eq!(store.list_webhooks("t").unwrap().len(), 1);
    assert_eq!(row(store, "t").unwrap().webhook.as_deref(), Some("https://example.test/next"));

    // A run without a webhook: a delivery given with its settle is not written.
    let claimed = claim(store, "w3", NOW + 30);
    assert_eq!(claimed.thread, "t");
    let plain = claim(store, "w4", NOW + 31);
    assert_eq!(plain.thread, "plain");
    assert!(store.settle_run("plain", "w4", &Settle::remove().with_webhook(delivery("nobody", NOW + 32))).unwrap());
    assert!(store.list_webhooks("plain").unwrap().is_empty());
    let last = Settle::remove()
        .with_webhook(NewWebhookDelivery::new("https://example.test/next", b"done".to_vec()).at(NOW + 33));
    assert!(store.settle_run("t", "w3", &last).unwrap());
    let told = store.list_webhooks("t").unwrap();
    assert_eq!(
        told.iter().map(|d| d.url.as_str()).collect::<Vec<_>>(),
        ["https://example.test/t", "https://example.test/next"]
    );
    assert!(told[0].id < told[1].id, "ids increase");
}

/// A purge removes the thread's queued run with its follow-ups and its webhook deliveries.
pub fn purge_removes_follow_ups_and_webhook_deliveries(store: &dyn Store) {
    store.commit_step(StepCommit::new(thread("t"))).unwrap();
    store.commit_step(StepCommit::new(thread("other"))).unwrap();
    for t in ["t", "other"] {
        store.enqueue_run(NewRun::new(t, "g", None, "alice", NOW).with_webhook("https://example.test/h")).unwrap();
        let hook = NewWebhookDelivery::new("https://example.test/h", b"{}".to_vec()).at(NOW);
        let holder = format!("w-{t}");
        claim(store, &holder, NOW + 1);
        assert!(store.settle_run_and_release(t, &holder, &Settle::park(RunWait::Answer).with_webhook(hook)).unwrap());
        for i in 0..2 {
            store
                .enqueue_follow_up(follow_up(t, &format!("{t}{i}"), NOW + 2), submitted(NOW + 2), FollowUpPlace::Back)
                .unwrap();
        }
    }
    let report = store.purge_thread("t", NewAuditEntry::new(NOW + 5, "dpo", PURGED_KIND, json!({}))).unwrap();
    assert_eq!((report.queued_runs, report.webhooks), (3, 1));
    assert!(row(store, "t").is_none());
    assert!(store.list_follow_ups("t").unwrap().is_empty());
    assert!(store.list_webhooks("t").unwrap().is_empty());
    assert!(store.due_webhooks(u64::MAX, 10).unwrap().items.iter().all(|d| d.thread == "other"));
    // The other thread keeps its own.
    assert_eq!(store.list_follow_ups("other").unwrap().len(), 2);
    assert_eq!(store.list_webhooks("other").unwrap().len(), 1);
    assert!(row(store, "other").is_some());
}

/// Follow-ups queued while a worker runs and settles the thread's runs are each run once, in
/// the order they were queued: none is lost to a settle that removes the run at the same
/// moment.
pub fn follow_ups_race_the_settle(store: &dyn Store) {
    const N: usize = 12;
    store.enqueue_run(NewRun::new("t", "g", Some(b"run".to_vec()), "alice", NOW)).unwrap();
    let ran: Vec<String> = std::thread::scope(|s| {
        let submitter = s.spawn(|| {
            for i in 0..N {
                let at = NOW + 1 + i as u64;
                let queued = store.enqueue_follow_up(
                    follow_up("t", &format!("f{i:02}"), at),
                    submitted(at),
                    FollowUpPlace::Back,
                );
                queued.expect("queued");
            }
        });
        let mut ran = Vec::new();
        let mut looks = 0u64;
        while ran.len() < N + 1 {
            looks += 1;
            assert!(looks < 2_000_000, "the follow-ups stopped coming: ran {ran:?}");
            match store.claim_runs("g", "w", 60_000, NOW + 100, 1) {
                Ok(mut claimed) if !claimed.is_empty() => {
                    let run = claimed.remove(0);
                    ran.push(input(&run));
                    assert!(store.settle_run_and_release("t", "w", &Settle::remove()).unwrap());
                }
                Ok(_) if submitter.is_finished() && row(store, "t").is_none() => break,
                Ok(_) => std::thread::yield_now(),
                Err(e) => panic!("{e}"),
            }
        }
        submitter.join().unwrap();
        ran
    });
    let want: Vec<String> = std::iter::once("run".to_string()).chain((0..N).map(|i| format!("f{i:02}"))).collect();
    assert_eq!(ran, want);
    assert!(row(store, "t").is_none() && store.list_follow_ups("t").unwrap().is_empty());
}
