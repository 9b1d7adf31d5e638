//! Circuit breakers: every transition, and a race of callers on one tool.

use std::sync::Barrier;

use serde_json::json;

use crate::conformance::fixtures::NOW;
use crate::{BreakerOp, BreakerRule, BreakerState, BreakerUpdate, Store};

pub(crate) fn breaker_update(op: BreakerOp, holder: &str, now: u64, thread: &str) -> BreakerUpdate {
    BreakerUpdate::new("flaky", op, holder, BreakerRule::new(3, 1_000, 500), now, thread, "executor:n")
}

/// Circuit breakers: a streak of failures opens the breaker (and a success breaks the streak);
/// it refuses calls during the cool-down, admits one probe after it, closes on the probe's
/// success and opens again on its failure; each change of state is audited in the thread whose
/// call caused it, and the breaker is per tool.
pub fn breaker_transitions(store: &dyn Store) {
    let up =
        |op, holder: &str, now, thread: &str| store.update_breaker(breaker_update(op, holder, now, thread)).unwrap();
    assert_eq!(store.breaker("flaky").unwrap(), None, "no record: closed");
    assert!(up(BreakerOp::Admit, "c1", NOW, "a").admitted);
    up(BreakerOp::Failed, "c1", NOW, "a");
    up(BreakerOp::Failed, "c2", NOW, "a");
    assert_eq!(up(BreakerOp::Succeeded, "c3", NOW, "a").record.failures, 0, "a success breaks the streak");
    up(BreakerOp::Failed, "c4", NOW, "a");
    up(BreakerOp::Failed, "c5", NOW, "b");
    let opened = up(BreakerOp::Failed, "c6", NOW + 1, "b");
    assert_eq!((opened.from, opened.record.state), (BreakerState::Closed, BreakerState::Open));
    assert_eq!(opened.record.open_until, NOW + 1 + 1_000);
    let stored = store.breaker("flaky").unwrap().unwrap();
    assert_eq!((stored.state, stored.failures), (BreakerState::Open, 3));
    assert_eq!(store.breaker("other").unwrap(), None, "breakers are per tool");
    // Refused during the cool-down, by any caller.
    let refused = up(BreakerOp::Admit, "c7", NOW + 1_000, "a");
    assert!(!refused.admitted && refused.record.state == BreakerState::Open);
    // One probe after it; the others are refused while it runs.
    let probe = up(BreakerOp::Admit, "p1", NOW + 1_001, "a");
    assert!(probe.admitted && probe.probe);
    assert_eq!(probe.record.state, BreakerState::HalfOpen);
    assert!(!up(BreakerOp::Admit, "p2", NOW + 1_002, "b").admitted);
    // The probe fails: open again for a whole cool-down.
    let reopened = up(BreakerOp::Failed, "p1", NOW + 1_100, "a");
    assert_eq!((reopened.from, reopened.record.state), (BreakerState::HalfOpen, BreakerState::Open));
    assert_eq!(reopened.record.open_until, NOW + 2_100);
    assert!(!up(BreakerOp::Admit, "p2", NOW + 2_099, "b").admitted);
    let probe = up(BreakerOp::Admit, "p2", NOW + 2_100, "b");
    assert!(probe.admitted && probe.probe);
    let closed = up(BreakerOp::Succeeded, "p2", NOW + 2_200, "b");
    assert_eq!(
        (closed.from, closed.record.state, closed.record.failures),
        (BreakerState::HalfOpen, BreakerState::Closed, 0)
    );
    assert!(up(BreakerOp::Admit, "c8", NOW + 2_201, "a").admitted);
    // The audit: each change, in the log of the thread whose call made it.
    let kinds = |thread: &str| -> Vec<String> {
        store
            .list_audit(thread)
            .unwrap()
            .into_iter()
            .filter(|e| e.kind.starts_with("breaker."))
            .map(|e| e.kind)
            .collect()
    };
    assert_eq!(kinds("a"), ["breaker.half_open", "breaker.open"]);
    assert_eq!(kinds("b"), ["breaker.open", "breaker.half_open", "breaker.closed"]);
    let entry = store.list_audit("b").unwrap().into_iter().find(|e| e.kind == "breaker.open").unwrap();
    assert_eq!(entry.actor, "executor:n");
    assert_eq!(entry.detail["tool"], json!("flaky"));
    assert_eq!(entry.detail["from"], json!("CLOSED"));
    assert_eq!(entry.detail["failures"], json!(3));
}

/// Circuit breakers under concurrency: failures reported at once all count, and of callers
/// asking at once after the cool-down exactly one gets the probe.
pub fn breaker_race(store: &dyn Store) {
    let rule = BreakerRule::new(1_000, 1_000, 60_000);
    let barrier = Barrier::new(16);
    std::thread::scope(|s| {
        for i in 0..16 {
            let barrier = &barrier;
            s.spawn(move || {
                barrier.wait();
                for j in 0..5 {
                    let holder = format!("c{i}-{j}");
                    let u = BreakerUpdate::new("flaky", BreakerOp::Failed, &holder, rule, NOW, "t", "executor:n");
                    store.update_breaker(u).unwrap();
                }
            });
        }
    });
    assert_eq!(store.breaker("flaky").unwrap().unwrap().failures, 80, "every failure counts");
    // Open it (the threshold is 80 now), then race 16 callers for the probe.
    let rule = BreakerRule::new(80, 1_000, 60_000);
    let u = BreakerUpdate::new("flaky", BreakerOp::Failed, "last", rule, NOW, "t", "executor:n");
    assert_eq!(store.update_breaker(u).unwrap().record.state, BreakerState::Open);
    let barrier = Barrier::new(16);
    let answers: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..16)
            .map(|i| {
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    let holder = format!("p{i}");
                    let u =
                        BreakerUpdate::new("flaky", BreakerOp::Admit, &holder, rule, NOW + 1_000, "t", "executor:n");
                    store.update_breaker(u).unwrap()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let probes: Vec<_> = answers.iter().filter(|a| a.admitted).collect();
    assert_eq!(probes.len(), 1, "exactly one caller probes");
    assert!(probes[0].probe);
    let stored = store.breaker("flaky").unwrap().unwrap();
    assert_eq!(stored.state, BreakerState::HalfOpen);
    assert_eq!(stored.probe, probes[0].record.probe);
    let half_opens = store.list_audit("t").unwrap().iter().filter(|e| e.kind == "breaker.half_open").count();
    assert_eq!(half_opens, 1);
}
