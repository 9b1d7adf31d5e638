//! Store calls off the async worker threads, and the clock stamped on records.

use std::time::{SystemTime, UNIX_EPOCH};

use agentflow_store::Store;

use crate::persist::error::PersistError;

pub(crate) fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// Runs a blocking store call off the async worker threads.
pub(crate) async fn blocking<T: Send + 'static>(
    store: &std::sync::Arc<dyn Store>,
    f: impl FnOnce(&dyn Store) -> T + Send + 'static,
) -> Result<T, PersistError> {
    let store = std::sync::Arc::clone(store);
    tokio::task::spawn_blocking(move || f(&*store)).await.map_err(PersistError::Task)
}
