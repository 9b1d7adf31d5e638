//! Completion webhooks: a delivery written in the same transaction as the settle that ends (or
//! parks) its run ([`Settle::webhook`](crate::Settle::webhook)), then claimed and sent by any
//! server, retried until it is delivered or given up.

use serde::{Deserialize, Serialize};

/// A delivery to write with a settle: where, and what (JSON; sealed by a sealing store).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct NewWebhookDelivery {
    /// The URL to POST to.
    pub url: String,
    /// The body.
    pub payload: Vec<u8>,
    /// When it is written (unix millis): its `created_at`, and when its first attempt is due.
    /// [`NewWebhookDelivery::new`] reads the clock; [`NewWebhookDelivery::at`] sets it. (Appended
    /// last.)
    #[serde(default)]
    pub at: u64,
}

impl NewWebhookDelivery {
    /// A delivery of `payload` to `url`, made now (the system clock).
    pub fn new(url: impl Into<String>, payload: Vec<u8>) -> Self {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis());
        NewWebhookDelivery { url: url.into(), payload, at: u64::try_from(now).unwrap_or(u64::MAX) }
    }

    /// The same delivery, made at `at` (unix millis) instead of now.
    #[must_use]
    pub fn at(mut self, at: u64) -> Self {
        self.at = at;
        self
    }
}

/// Where a delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum DeliveryStatus {
    /// Not delivered yet: due at `next_at`.
    Pending,
    /// The receiver answered 2xx.
    Delivered,
    /// Given up after its last attempt.
    Failed,
}

impl DeliveryStatus {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryStatus::Pending => "PENDING",
            DeliveryStatus::Delivered => "DELIVERED",
            DeliveryStatus::Failed => "FAILED",
        }
    }

    /// The value stored as `name`, if it is one.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "PENDING" => Some(DeliveryStatus::Pending),
            "DELIVERED" => Some(DeliveryStatus::Delivered),
            "FAILED" => Some(DeliveryStatus::Failed),
            _ => None,
        }
    }
}

/// A delivery as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct WebhookDelivery {
    /// Its id, given by the store (increasing; never given twice).
    pub id: u64,
    /// The thread whose run it tells of.
    pub thread: String,
    /// The URL.
    pub url: String,
    /// The body.
    pub payload: Vec<u8>,
    /// When it was written (the settle's time, unix millis).
    pub created_at: u64,
    /// How many attempts were made.
    pub attempts: u32,
    /// When the next attempt is due (unix millis); once delivered, when it was; once given up,
    /// when its last attempt was due.
    pub next_at: u64,
    /// Where it stands.
    pub status: DeliveryStatus,
    /// What the last failed attempt saw.
    pub last_error: Option<String>,
    /// Who holds it for an attempt, and until when (unix millis).
    pub holder: Option<String>,
    /// Until when `holder` holds it.
    pub held_until: u64,
}

/// How an attempt ended ([`Store::settle_webhook`](crate::Store::settle_webhook)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum WebhookSettle {
    /// Delivered at this time.
    Delivered {
        /// When (unix millis).
        at: u64,
    },
    /// Failed; try again at `next_at`.
    Retry {
        /// When the next attempt is due (unix millis).
        next_at: u64,
        /// What was seen.
        error: String,
    },
    /// Failed for good.
    GiveUp {
        /// What was seen.
        error: String,
    },
}
