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
        let bytes = serde_json::to_vec(&value)
            .map_err(|e| NodeError::fatal(format!("effect `{key}` returned a value that does not serialise: {e}")))?;
        let k = ekey;
        let outcome = blocking(&self.store, move |s| s.record_effect(&k, &bytes))
            .await
            .and_then(|r| Ok(r?))
            .map_err(unavailable)?;
        match outcome {
            EffectOutcome::Recorded => Ok(value),
            // Another attempt journaled first: its result is the one that counts.
            EffectOutcome::AlreadyRecorded(existing) => decode(&existing, key),
        }
    }
}

fn decode<T: DeserializeOwned>(bytes: &[u8], key: &str) -> Result<T, NodeError> {
    serde_json::from_slice(bytes).map_err(|e| {
        NodeError::fatal(format!("the journaled result of effect `{key}` does not decode as the expected type: {e}"))
    })
}

fn unavailable(e: PersistError) -> NodeError {
    NodeError::transient(format!("effect journal unavailable: {e}"))
}
