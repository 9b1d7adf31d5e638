//! Live updates and the stuck-thread gauge.
//!
//! `GET /live` answers `{"version": .., "approvals": N, "interrupts": M}` for the logged-in
//! user (the threads of their tenants): the version is a hash of every waiting approval (id, status, last change) and every thread that waits (id,
//! last change, answers recorded): an `interrupted` one, or a `failed` one still waiting in its
//! interrupt after an answer of the wrong shape, as the inbox lists it. So it changes whenever
//! a decision is made, from this server, the CLI or an app, and whenever a thread starts or
//! stops waiting. The inbox page polls it every two seconds and reloads when it differs from
//! the version the page was drawn from (or, when the person is typing in a form, shows a
//! banner instead).

use std::sync::Arc;
use std::time::Duration;

use agentflow_store::{Store, ThreadStatus};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::checks::sees_id;
use super::state::Inbox;
use crate::access::Access;
use crate::approval::{ANSWER_KIND, ApprovalDesk, RoleAuthorizer};
use crate::core::clock::now_ms;
use crate::server::inspect::InspectError;
use crate::server::inspect::stuck::{KINDS, find};

/// Gauge: stuck threads by `kind` (`waiting_on_human`, `lease_expired`, `timer_overdue`,
/// `step_overdue`, `parked`),
/// as `agentflow stuck` lists them with the server's thresholds.
pub const STUCK_THREADS: &str = "agentflow_stuck_threads";

/// What waits now for the user of `access` (the threads of their tenants), as the `/live` JSON.
pub(super) fn snapshot(shared: &Arc<dyn Store>, access: &Access) -> Result<Value, InspectError> {
    let store = shared.as_ref();
    let desk = ApprovalDesk::for_store(Arc::clone(shared), RoleAuthorizer::new());
    let mut approvals: Vec<(String, String, u64)> = store
        .scan_pending_approvals()
        .map_err(InspectError::store)?
        .items
        .into_iter()
        .filter(|a| sees_id(store, access, &a.thread))
        .map(|a| (a.id, a.status.as_str().to_string(), a.updated_at))
        .collect();
    approvals.sort();
    let mut interrupted: Vec<(String, u64)> = store
        .scan_threads()
        .map_err(InspectError::store)?
        .items
        .into_iter()
        // A thread whose resume failed with a spent answer (one of the wrong shape) still waits
        // in its interrupt, and the inbox lists it: an answer to it changes the version too.
        .filter(|t| access.sees(t))
        .filter(|t| {
            t.status == ThreadStatus::Interrupted
                || (t.status == ThreadStatus::Failed && desk.waiting_interrupt(&t.id).is_ok())
        })
        .map(|t| (t.id, t.updated_at))
        .collect();
    interrupted.sort();
    let mut h = Sha256::new();
    for (id, status, at) in &approvals {
        h.update(format!("a\u{0}{id}\u{0}{status}\u{0}{at}\n").as_bytes());
    }
    for (id, at) in &interrupted {
        // An answer recorded elsewhere changes no thread record, only its audit log.
        let answers =
            store.list_audit(id).map_err(InspectError::store)?.iter().filter(|e| e.kind == ANSWER_KIND).count();
        h.update(format!("t\u{0}{id}\u{0}{at}\u{0}{answers}\n").as_bytes());
    }
    let version: String = h.finalize().iter().take(12).map(|b| format!("{b:02x}")).collect();
    Ok(json!({
        "version": version,
        "approvals": approvals.len(),
        "interrupts": interrupted.len(),
    }))
}

/// Names and describes the gauge for the exporter.
pub(super) fn describe_metrics() {
    ::metrics::describe_gauge!(
        STUCK_THREADS,
        "threads no one moves forward, by kind: waiting_on_human, lease_expired, timer_overdue, step_overdue, parked"
    );
}

/// Counts the stuck threads by kind and sets the gauge (every kind, zero included). A store
/// that cannot be read leaves the gauge as it was.
pub(super) async fn refresh_stuck(inbox: &Inbox) -> Result<(), InspectError> {
    let (waiting, overdue) = inbox.stuck;
    let counts = inbox
        .with(move |store| {
            find(store, waiting, overdue, now_ms()).map(|v| KINDS.map(|k| v.iter().filter(|s| s.reason == k).count()))
        })
        .await;
    inbox.metrics.run_upkeep();
    for (kind, n) in KINDS.iter().zip(counts?) {
        ::metrics::gauge!(STUCK_THREADS, "kind" => *kind).set(n as f64);
    }
    Ok(())
}

/// Refreshes the gauge every `every`, the first time one period after the start, until the
/// inbox is gone (its router dropped); a refresh that fails is logged as a warning (`tracing`).
pub(super) async fn refresh_every(inbox: std::sync::Weak<Inbox>, every: Duration) {
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(inbox) = inbox.upgrade() else { return };
        if let Err(e) = refresh_stuck(&inbox).await {
            tracing::warn!("the stuck-thread gauge was not refreshed: {e}");
        }
    }
}
