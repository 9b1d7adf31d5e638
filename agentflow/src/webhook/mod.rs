//! Completion webhooks: a URL told when a queued run first stops (it ends, or waits for a person
//! or its timer).
//!
//! A run submitted with a webhook ([`NewRun::with_webhook`](agentflow_store::NewRun::with_webhook),
//! the server's `webhook` field of `POST /api/threads`,
//! [`App::submit_follow_up_with_webhook`](crate::App::submit_follow_up_with_webhook)) carries
//! the URL in its queue row. The worker that first ends or parks the run writes the delivery in
//! the same transaction as that settle ([`Settle::webhook`](agentflow_store::Settle::webhook)),
//! with the body
//!
//! ```json
//! {"thread_id": "t-1", "graph": "support", "status": "completed", "detail": "completed",
//!  "finished_at": 1700000000000, "values": {"...": "the thread's state"}}
//! ```
//!
//! (`finished_at` in unix milliseconds; `values` the state at the thread's latest checkpoint,
//! fields marked `#[state(credential)]` left out and fields marked `#[state(pii)]` masked as
//! `•••`). A [`WebhookDispatcher`] (a server runs one, feature `server`) sends it:
//!
//! - `POST` with `content-type: application/json`, `x-agentflow-delivery: <id>`,
//!   `x-agentflow-timestamp: <unix seconds>` and `x-agentflow-signature: sha256=<hex>`, the
//!   HMAC-SHA256 of `<timestamp>.<body>` under the operator's secret ([`sign`]; a receiver checks
//!   it with [`verify`]);
//! - a 2xx answer delivers it; any other answer, an error or no answer within 10 s tries it
//!   again after a backoff (1 s, doubling, at most 60 s), and the sixth failure gives it up,
//!   with a `webhook.failed` entry in the thread's audit log ([`WebhookConfig`] sets these);
//! - redirects are not followed, and only URLs under the operator's allowed prefixes are
//!   accepted ([`WebhookConfig::check`]) and sent to. HTTPS needs the crate's `tls` feature.
//!
//! A delivery is sent at least once: a dispatcher that dies mid-attempt leaves it to another
//! once its hold lapses, so a receiver deduplicates by `x-agentflow-delivery`.
//!
//! A URL may carry a token (in its query or user name): audit entries, logs and the errors
//! that name one show it through [`mask_url`](crate::secret::mask_url) (scheme, host and path kept, the rest `***`).

#[cfg(feature = "server")]
mod config;
#[cfg(feature = "server")]
mod dispatch;
mod payload;
mod sign;

#[cfg(feature = "server")]
pub use config::{
    DEFAULT_WEBHOOK_ATTEMPTS, DEFAULT_WEBHOOK_BACKOFF, DEFAULT_WEBHOOK_BACKOFF_CAP, WebhookConfig, WebhookError,
};
#[cfg(feature = "server")]
pub use dispatch::{WEBHOOK_FAILED_KIND, WebhookDispatcher};
pub(crate) use payload::{bare, delivery, not_run};
pub use sign::{sign, verify};
