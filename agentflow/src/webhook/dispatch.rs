//! The dispatcher: sends the webhook deliveries that are due, signed, and records how each
//! attempt ended (delivered, tried again later, given up).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentflow_store::{NewAuditEntry, Store, WebhookDelivery, WebhookSettle};
use tokio_util::sync::CancellationToken;

use super::config::{WebhookConfig, WebhookError};
use super::sign::sign;
use crate::core::clock::now_ms;
use crate::durable::{blocking, holder_id};
use crate::secret::mask_url;

/// How long a dispatcher holds a delivery for one attempt: no other dispatcher tries it then.
const HOLD: Duration = Duration::from_secs(30);

/// How long one attempt waits for the receiver's answer.
const REQUEST_TIME_LIMIT: Duration = Duration::from_secs(10);

/// How many due deliveries one look takes at most.
const PER_LOOK: usize = 32;

/// The audit entry kind of a delivery given up after its last attempt.
pub const WEBHOOK_FAILED_KIND: &str = "webhook.failed";

/// Sends the due webhook deliveries of a store (see [`webhook`](crate::webhook)): every
/// [`WebhookDispatcher::poll_interval`] (500 ms by default) it takes the due deliveries, holds
/// each for 30 s ([`Store::claim_webhook`]: two dispatchers sharing a store never send one
/// delivery at once), and POSTs it, signed, with a 10 s time limit and no redirect followed. A
/// 2xx answer delivers it; another answer or an error tries it again after the configured
/// backoff, and the last attempt gives it up, with a `webhook.failed` entry in its thread's
/// audit log. A server runs one (`Server::webhooks`); a
/// process of workers without a server may run its own.
///
/// A dispatcher that dies while it holds a delivery leaves it to another once the hold lapses:
/// a delivery is sent at least once, and may be sent twice (a receiver deduplicates by the
/// `x-agentflow-delivery` header).
pub struct WebhookDispatcher {
    store: Arc<dyn Store>,
    config: WebhookConfig,
    client: reqwest::Client,
    holder: String,
    every: Duration,
    /// The unreadable deliveries logged already, by their error: each is logged once.
    skipped: Mutex<BTreeSet<String>>,
}

impl std::fmt::Debug for WebhookDispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookDispatcher")
            .field("holder", &self.holder)
            .field("config", &self.config)
            .field("every", &self.every)
            .finish_non_exhaustive()
    }
}

/// How one attempt ended.
enum Attempt {
    /// The receiver answered 2xx.
    Delivered,
    /// It failed; `last`: no attempt follows (the URL is no longer allowed).
    Failed { error: String, last: bool },
}

impl WebhookDispatcher {
    /// A dispatcher of `store`'s deliveries under `config`.
    ///
    /// # Errors
    /// [`WebhookError::Client`] if the HTTP client cannot be built.
    pub fn new(store: Arc<dyn Store>, config: WebhookConfig) -> Result<Self, WebhookError> {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(REQUEST_TIME_LIMIT)
            .build()
            .map_err(|e| WebhookError::Client(e.to_string()))?;
        Ok(WebhookDispatcher {
            store,
            config,
            client,
            // Its own holder: a claim is re-taken by the holder that made it, so two dispatchers
            // of one process must not share one (they would send a delivery twice at once).
            holder: format!("webhooks-{}", holder_id()),
            every: Duration::from_millis(500),
            skipped: Mutex::default(),
        })
    }

    /// How often it looks for due deliveries (default 500 ms).
    #[must_use]
    pub fn poll_interval(mut self, every: Duration) -> Self {
        self.every = every.max(Duration::from_millis(1));
        self
    }

    /// Sends due deliveries until `stop` is cancelled (an attempt under way is let finish). A
    /// store failure is logged and the look made again at the next interval.
    pub async fn run(self, stop: CancellationToken) {
        loop {
            if let Err(e) = self.dispatch_due().await {
                tracing::warn!(error = %e, "webhook deliveries could not be read");
            }
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(self.every) => {}
            }
        }
    }

    /// One look: takes the deliveries due now (at most 32), sends them at once and records how
    /// each ended. Answers how many it attempted (a delivery another dispatcher took first is
    /// not counted). A delivery whose stored row cannot be read is left out and logged (once per
    /// dispatcher); the others are sent.
    ///
    /// # Errors
    /// [`WebhookError::Store`] (or [`WebhookError::Persist`]) reading the due deliveries; one that fails to hold or settle a delivery is
    /// logged (the delivery is tried again once its hold lapses).
    pub async fn dispatch_due(&self) -> Result<usize, WebhookError> {
        let now = now_ms();
        let due = blocking(&self.store, move |s| s.due_webhooks(now, PER_LOOK)).await??;
        for e in due.skipped.iter().map(ToString::to_string) {
            if self.first_skip(&e) {
                tracing::warn!(error = %e, "a webhook delivery cannot be read; the others are sent");
            }
        }
        let mut attempts = Vec::with_capacity(due.items.len());
        for delivery in due.items {
            let (id, holder) = (delivery.id, self.holder.clone());
            let until = now.saturating_add(u64::try_from(HOLD.as_millis()).unwrap_or(u64::MAX));
            match blocking(&self.store, move |s| s.claim_webhook(id, &holder, now, until)).await {
                Ok(Ok(true)) => attempts.push(self.attempt(delivery)),
                Ok(Ok(false)) => {}
                Ok(Err(e)) => tracing::warn!(delivery = id, error = %e, "a webhook delivery could not be held"),
                Err(e) => tracing::warn!(delivery = id, error = %e, "a webhook delivery could not be held"),
            }
        }
        let made = attempts.len();
        futures_util::future::join_all(attempts).await;
        Ok(made)
    }

    /// Whether unreadable-delivery error `error` is new (then noted).
    fn first_skip(&self, error: &str) -> bool {
        self.skipped.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(error.to_string())
    }

    /// Sends `delivery` once and records how it ended.
    async fn attempt(&self, delivery: WebhookDelivery) {
        let attempt = delivery.attempts.saturating_add(1);
        let ended = match self.config.check(&delivery.url) {
            Ok(()) => self.post(&delivery).await,
            Err(e) => Attempt::Failed { error: e.to_string(), last: true },
        };
        let settle = match ended {
            Attempt::Delivered => WebhookSettle::Delivered { at: now_ms() },
            Attempt::Failed { error, last } if last || attempt >= self.config.attempts => {
                WebhookSettle::GiveUp { error }
            }
            Attempt::Failed { error, .. } => {
                let wait = u64::try_from(self.config.backoff_after(attempt).as_millis()).unwrap_or(u64::MAX);
                WebhookSettle::Retry { next_at: now_ms().saturating_add(wait), error }
            }
        };
        let failed = match &settle {
            WebhookSettle::GiveUp { error } => Some(error.clone()),
            _ => None,
        };
        let (id, holder) = (delivery.id, self.holder.clone());
        let settled = blocking(&self.store, move |s| s.settle_webhook(id, &holder, settle)).await;
        match (settled, failed) {
            (Ok(Ok(true)), Some(error)) => self.audit_failure(&delivery, attempt, error).await,
            (Ok(Ok(_)), _) => {}
            (Ok(Err(e)), _) => tracing::warn!(delivery = id, error = %e, "a webhook attempt could not be recorded"),
            (Err(e), _) => tracing::warn!(delivery = id, error = %e, "a webhook attempt could not be recorded"),
        }
    }

    /// POSTs `delivery`, signed.
    async fn post(&self, delivery: &WebhookDelivery) -> Attempt {
        let timestamp = now_ms() / 1000;
        let signature = sign(self.config.secret(), timestamp, &delivery.payload);
        let sent = self
            .client
            .post(&delivery.url)
            .header("content-type", "application/json")
            .header("x-agentflow-delivery", delivery.id.to_string())
            .header("x-agentflow-timestamp", timestamp.to_string())
            .header("x-agentflow-signature", signature)
            .body(delivery.payload.clone())
            .send()
            .await;
        match sent {
            Ok(answer) if answer.status().is_success() => Attempt::Delivered,
            Ok(answer) => Attempt::Failed { error: format!("the receiver answered {}", answer.status()), last: false },
            Err(e) => Attempt::Failed { error: describe(&e), last: false },
        }
    }

    /// The `webhook.failed` entry of a delivery given up.
    async fn audit_failure(&self, delivery: &WebhookDelivery, attempts: u32, error: String) {
        let detail = serde_json::json!({
            "delivery": delivery.id,
            "url": mask_url(&delivery.url),
            "attempts": attempts,
            "error": error,
        });
        let entry = NewAuditEntry::new(now_ms(), &self.holder, WEBHOOK_FAILED_KIND, detail);
        let thread = delivery.thread.clone();
        match blocking(&self.store, move |s| s.append_audit(&thread, entry)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::warn!(delivery = delivery.id, error = %e, "a failed webhook could not be audited"),
            Err(e) => tracing::warn!(delivery = delivery.id, error = %e, "a failed webhook could not be audited"),
        }
        tracing::warn!(delivery = delivery.id, thread = %delivery.thread, attempts, "a webhook delivery was given up");
    }
}

/// What a failed request saw, without its URL (which the delivery names already).
fn describe(e: &reqwest::Error) -> String {
    let what = if e.is_timeout() {
        "the receiver did not answer in time"
    } else if e.is_connect() {
        "the receiver could not be reached"
    } else {
        "the request failed"
    };
    let mut detail = what.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        detail.push_str(": ");
        detail.push_str(&s.to_string());
        source = s.source();
    }
    detail
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_dispatcher_claims_as_its_own_holder() {
        let store: Arc<dyn Store> = Arc::new(agentflow_store::RedbStore::in_memory().unwrap());
        let config = || WebhookConfig::new(b"secret".to_vec()).allow("https://hooks.example/");
        let one = WebhookDispatcher::new(Arc::clone(&store), config()).unwrap();
        let two = WebhookDispatcher::new(store, config()).unwrap();
        assert_ne!(one.holder, two.holder);
        assert!(one.holder.starts_with("webhooks-"), "{}", one.holder);
    }
}
