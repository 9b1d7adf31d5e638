//! Webhook deliveries: listed when due, the longest due first; held by one dispatcher at a time
//! for an attempt; retried, given up or delivered by the attempt's holder.

use std::sync::Barrier;

use crate::conformance::fixtures::NOW;
use crate::{DeliveryStatus, NewRun, NewWebhookDelivery, Settle, Store, WebhookDelivery, WebhookSettle};

/// A delivery of thread `thread` made at `at`, written by the settle of a run with a webhook.
fn deliver(store: &dyn Store, thread: &str, at: u64) -> WebhookDelivery {
    let url = format!("https://example.test/{thread}");
    store.enqueue_run(NewRun::new(thread, "g", None, "alice", at).with_webhook(url.as_str())).unwrap();
    let claimed = store.claim_runs("g", "worker", 1000, at, 1).unwrap();
    assert_eq!(claimed.len(), 1);
    let delivery = NewWebhookDelivery::new(url, format!(r#"{{"thread_id":"{thread}"}}"#).into_bytes()).at(at);
    assert!(store.settle_run_and_release(thread, "worker", &Settle::remove().with_webhook(delivery)).unwrap());
    let mut told = store.list_webhooks(thread).unwrap();
    assert_eq!(told.len(), 1);
    told.remove(0)
}

fn ids(deliveries: &[WebhookDelivery]) -> Vec<u64> {
    deliveries.iter().map(|d| d.id).collect()
}

/// A delivery is held by one dispatcher at a time (until its hold expires); only the holder
/// settles an attempt: a retry makes it due again later, counting the attempt; giving up and
/// delivering end it.
pub fn webhook_attempts_retry_give_up_and_deliver(store: &dyn Store) {
    let d = deliver(store, "t", NOW);
    assert_eq!((d.status, d.attempts, d.next_at, d.created_at), (DeliveryStatus::Pending, 0, NOW, NOW));
    assert!(store.due_webhooks(NOW - 1, 10).unwrap().items.is_empty(), "not due before it was made");
    assert_eq!(store.due_webhooks(NOW, 10).unwrap().items, std::slice::from_ref(&d));

    assert!(store.claim_webhook(d.id, "d1", NOW, NOW + 30_000).unwrap());
    assert!(!store.claim_webhook(d.id, "d2", NOW + 1, NOW + 30_001).unwrap(), "held by d1");
    assert!(store.due_webhooks(NOW + 1, 10).unwrap().items.is_empty(), "a held delivery is not due");
    assert!(store.claim_webhook(d.id, "d1", NOW + 2, NOW + 30_002).unwrap(), "its holder holds it again");
    assert!(!store.claim_webhook(d.id + 1_000, "d1", NOW, NOW + 1).unwrap(), "no such delivery");
    let retry = || WebhookSettle::Retry { next_at: NOW + 1_000, error: "HTTP 503".to_string() };
    assert!(!store.settle_webhook(d.id, "d2", retry()).unwrap(), "only the holder settles");
    assert!(store.settle_webhook(d.id, "d1", retry()).unwrap());
    let after = &store.list_webhooks("t").unwrap()[0];
    assert_eq!((after.attempts, after.next_at, after.last_error.as_deref()), (1, NOW + 1_000, Some("HTTP 503")));
    assert_eq!((after.status, after.holder.as_deref()), (DeliveryStatus::Pending, None));
    assert!(!store.settle_webhook(d.id, "d1", retry()).unwrap(), "its hold ended with the attempt");
    assert!(store.due_webhooks(NOW + 999, 10).unwrap().items.is_empty());
    assert_eq!(ids(&store.due_webhooks(NOW + 1_000, 10).unwrap().items), [d.id]);

    // A hold that expired is taken over.
    assert!(store.claim_webhook(d.id, "d1", NOW + 1_000, NOW + 1_500).unwrap());
    assert!(!store.claim_webhook(d.id, "d2", NOW + 1_499, NOW + 2_000).unwrap());
    assert_eq!(ids(&store.due_webhooks(NOW + 1_500, 10).unwrap().items), [d.id], "due again once its hold expired");
    assert!(store.claim_webhook(d.id, "d2", NOW + 1_500, NOW + 2_000).unwrap());
    assert!(!store.settle_webhook(d.id, "d1", retry()).unwrap(), "d1's hold was taken over");
    assert!(store.settle_webhook(d.id, "d2", WebhookSettle::GiveUp { error: "HTTP 410".to_string() }).unwrap());
    let failed = &store.list_webhooks("t").unwrap()[0];
    assert_eq!(
        (failed.status, failed.attempts, failed.last_error.as_deref()),
        (DeliveryStatus::Failed, 2, Some("HTTP 410"))
    );
    assert!(store.due_webhooks(u64::MAX, 10).unwrap().items.is_empty(), "given up");
    assert!(!store.claim_webhook(d.id, "d3", NOW + 3_000, NOW + 4_000).unwrap(), "a failed delivery is not claimed");

    let e = deliver(store, "u", NOW + 10);
    assert!(e.id > d.id, "ids increase");
    assert!(store.claim_webhook(e.id, "d1", NOW + 10, NOW + 100).unwrap());
    assert!(store.settle_webhook(e.id, "d1", WebhookSettle::Delivered { at: NOW + 20 }).unwrap());
    let delivered = &store.list_webhooks("u").unwrap()[0];
    assert_eq!(
        (delivered.status, delivered.attempts, delivered.holder.as_deref()),
        (DeliveryStatus::Delivered, 1, None)
    );
    assert!(store.due_webhooks(u64::MAX, 10).unwrap().items.is_empty(), "delivered");
    assert!(!store.settle_webhook(e.id, "d1", WebhookSettle::Delivered { at: NOW + 30 }).unwrap());
}

/// Due deliveries are listed the longest due first, at most the limit asked for.
pub fn due_webhooks_longest_due_first(store: &dyn Store) {
    let late = deliver(store, "a", NOW + 2);
    let early = deliver(store, "b", NOW);
    let middle = deliver(store, "c", NOW + 1);
    assert_eq!(ids(&store.due_webhooks(NOW + 5, 10).unwrap().items), [early.id, middle.id, late.id]);
    assert_eq!(ids(&store.due_webhooks(NOW + 5, 2).unwrap().items), [early.id, middle.id]);
    assert_eq!(ids(&store.due_webhooks(NOW + 1, 10).unwrap().items), [early.id, middle.id]);
    // A retry moves a delivery behind the ones due before it.
    assert!(store.claim_webhook(early.id, "d", NOW + 5, NOW + 10).unwrap());
    let retry = WebhookSettle::Retry { next_at: NOW + 3, error: "timeout".to_string() };
    assert!(store.settle_webhook(early.id, "d", retry).unwrap());
    assert_eq!(ids(&store.due_webhooks(NOW + 5, 10).unwrap().items), [middle.id, late.id, early.id]);
}

/// Eight dispatchers claim one delivery at once: one holds it.
pub fn webhook_claim_race(store: &dyn Store) {
    let d = deliver(store, "t", NOW);
    let barrier = Barrier::new(8);
    let won: Vec<bool> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|i| {
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    store.claim_webhook(d.id, &format!("d{i}"), NOW + 1, NOW + 30_000).unwrap()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(won.iter().filter(|w| **w).count(), 1, "{won:?}");
    let holder = store.list_webhooks("t").unwrap()[0].holder.clone().expect("held");
    assert_eq!(won.iter().position(|w| *w).map(|i| format!("d{i}")), Some(holder));
}
