//! Store calls off the async worker threads.

use std::cell::Cell;

use agentflow_store::Store;

use super::error::PersistError;

thread_local! {
    /// Store calls made on this thread run inline (see [`run_store_calls_inline`]).
    static INLINE: Cell<bool> = const { Cell::new(false) };
}

/// Makes the store calls of runs polled on this thread run inline, on this thread, instead of
/// on tokio's blocking pool (`on = false` undoes it). A crash test sets it around the
/// single-threaded runtime it drives a run on: its map instances then reach the store in one
/// order, run after run, so a cut falls on the same committed state every time.
#[cfg(feature = "testing")]
pub(crate) fn run_store_calls_inline(on: bool) {
    INLINE.with(|inline| inline.set(on));
}

/// Runs a blocking store call off the async worker threads.
pub(crate) async fn blocking<T: Send + 'static>(
    store: &std::sync::Arc<dyn Store>,
    f: impl FnOnce(&dyn Store) -> T + Send + 'static,
) -> Result<T, PersistError> {
    if INLINE.with(Cell::get) {
        return Ok(f(&**store));
    }
    let store = std::sync::Arc::clone(store);
    tokio::task::spawn_blocking(move || f(&*store)).await.map_err(PersistError::Task)
}
