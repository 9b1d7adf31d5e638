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

use agentflow::Store;
use agentflow::access::Access;
use agentflow::approval::{ANSWER_KIND, ApprovalDesk, RoleAuthorizer};
use agentflow_store::ThreadStatus;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::Server;
use crate::Failure;
use crate::out::now_ms;

/// Gauge: stuck threads by `kind` (`waiting_on_human`, `lease_expired`, `timer_overdue`),
/// as `agentflow stuck` lists them with the server's thresholds.
pub const STUCK_THREADS: &str = "agentflow_stuck_threads";

/// What waits now for the user of `access` (the threads of their tenants), as the `/live` JSON.
pub fn snapshot(shared: &Arc<dyn Store>, access: &Access) -> Result<Value, Failure> {
    let store = shared.as_ref();
    let desk = ApprovalDesk::for_store(Arc::clone(shared), RoleAuthorizer::new());
    let mut approvals: Vec<(String, String, u64)> = store
        .scan_pending_approvals()
        .map_err(Failure::store)?
        .items
        .into_iter()
        .filter(|a| super::checks::sees_id(store, access, &a.thread))
        .map(|a| (a.id, a.status.as_str().to_string(), a.updated_at))
        .collect();
    approvals.sort();
    let mut interrupted: Vec<(String, u64)> = store
        .scan_threads()
        .map_err(Failure::store)?
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
        let answers = store.list_audit(id).map_err(Failure::store)?.iter().filter(|e| e.kind == ANSWER_KIND).count();
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
pub fn describe_metrics() {
    metrics::describe_gauge!(
        STUCK_THREADS,
        "threads no one moves forward, by kind: waiting_on_human, lease_expired, timer_overdue"
    );
}

/// Counts the stuck threads by kind and sets the gauge (every kind, zero included). A store
/// that cannot be read leaves the gauge as it was and says so on stderr.
pub async fn refresh_stuck(server: &Arc<Server>) {
    let (waiting, overdue) = server.stuck;
    let found = server
        .store
        .with(move |store| {
            crate::stuck::find(store, waiting, overdue, now_ms())
                .map(|v| crate::stuck::KINDS.map(|k| v.iter().filter(|s| s.reason == k).count()))
        })
        .await;
    match found {
        Ok(counts) => {
            for (kind, n) in crate::stuck::KINDS.iter().zip(counts) {
                metrics::gauge!(STUCK_THREADS, "kind" => *kind).set(n as f64);
            }
        }
        Err(f) => eprintln!("agentflow serve: the stuck-thread gauge was not refreshed: {}", f.message),
    }
    server.metrics.run_upkeep();
}

/// Refreshes the gauge every `every`, the first time one period after the start.
pub async fn refresh_every(server: Arc<Server>, every: Duration) {
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        refresh_stuck(&server).await;
    }
}
