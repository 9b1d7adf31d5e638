//! The effect journal: a side effect runs once per (thread, checkpoint, node,
//! key), however often its node is re-run by a retry, a crash or a resume.

use std::future::Future;
use std::sync::Arc;

use agentflow_store::{EffectKey, EffectOutcome, Store};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{PersistError, blocking};
use crate::error::NodeError;

/// Where a node's effects are journaled: the thread and the checkpoint its
/// step started from.
#[derive(Clone)]
pub struct Journal {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) thread: String,
    pub(crate) seq: u64,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal").field("thread", &self.thread).field("seq", &self.seq).finish_non_exhaustive()
    }
}

impl Journal {
    /// The idempotency key of an effect, stable across re-runs: pass it to
    /// external systems that deduplicate requests.
    pub fn idempotency_key(&self, node: &str, key: &str) -> String {
        format!("{}/{}/{}/{}", self.thread, self.seq, node, key)
    }

    pub(crate) async fn run<T, F, Fut>(&self, node: &str, key: &str, effect: F) -> Result<T, NodeError>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce(String) -> Fut,
        Fut: Future<Output = Result<T, NodeError>>,
    {
        let ekey =
            EffectKey { thread: self.thread.clone(), seq: self.seq, node: node.to_string(), key: key.to_string() };
        let k = ekey.clone();
        let recorded = blocking(&self.store, move |s| s.effect(&k)).await.and_then(|r| Ok(r?)).map_err(unavailable)?;
        if let Some(bytes) = recorded {
            return decode(&bytes, key);
        }
        let value = effect(self.idempotency_key(node, key)).await?;
        // A result that would not read back (a NaN, nesting too deep) is not
        // stored changed; the effect did run, so a marker is journaled in its
        // place and the effect is never run again.
        let (bytes, refused) = match super::encode::to_bytes(&value, "result") {
            Ok(bytes) => (bytes, None),
            Err(e) => {
                let message = format!(
                    "effect `{key}` ran, but its result cannot be journaled ({e}); it will not run again: \
                     return a value that JSON holds exactly"
                );
                (serde_json::to_vec(&serde_json::json!({ UNJOURNALED: message })).unwrap_or_default(), Some(message))
            }
        };
        let k = ekey;
        let outcome = blocking(&self.store, move |s| s.record_effect(&k, &bytes))
            .await
            .and_then(|r| Ok(r?))
            .map_err(unavailable)?;
        match outcome {
            EffectOutcome::Recorded if refused.is_some() => Err(NodeError::fatal(refused.unwrap_or_default())),
            EffectOutcome::Recorded => Ok(value),
            // Another attempt journaled first: its result is the one that counts.
            EffectOutcome::AlreadyRecorded(existing) => decode(&existing, key),
        }
    }
}

/// The key of the marker journaled for an effect whose result could not be.
const UNJOURNALED: &str = "__agentflow_unjournaled_result__";

fn decode<T: DeserializeOwned>(bytes: &[u8], key: &str) -> Result<T, NodeError> {
    // Checked first: a marker would decode as a `serde_json::Value` result.
    if bytes.starts_with(format!("{{\"{UNJOURNALED}\":").as_bytes()) {
        let marker: Option<serde_json::Value> = serde_json::from_slice(bytes).ok();
        if let Some(message) = marker.as_ref().and_then(|m| m.get(UNJOURNALED)).and_then(serde_json::Value::as_str) {
            return Err(NodeError::fatal(message.to_string()));
        }
    }
    serde_json::from_slice(bytes).map_err(|e| {
        NodeError::fatal(format!("the journaled result of effect `{key}` does not decode as the expected type: {e}"))
    })
}

fn unavailable(e: PersistError) -> NodeError {
    NodeError::transient(format!("effect journal unavailable: {e}"))
}
