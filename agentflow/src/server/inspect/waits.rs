//! What a paused thread waits for: the interrupts its latest step recorded (a person's answer,
//! an approval, a timer, a breakpoint), read back from the store.

use agentflow_store::Store;

use super::error::InspectError;
use crate::durable::INTERRUPTS;
use crate::interrupt::Pending;

/// What thread `thread`'s latest step waits for, with that checkpoint's seq: `(None, [])` for
/// a thread with no checkpoint, an empty list when the step waits for nothing.
pub fn waits(store: &dyn Store, thread: &str) -> Result<(Option<u64>, Vec<Pending>), InspectError> {
    let Some(latest) = store.latest_checkpoint(thread).map_err(InspectError::store)? else {
        return Ok((None, vec![]));
    };
    let writes = store.pending_writes(thread, latest.seq).map_err(InspectError::store)?;
    let waits = match writes.iter().find(|w| w.node == INTERRUPTS) {
        Some(w) => serde_json::from_slice(&w.value).map_err(|e| {
            InspectError::store(format!(
                "thread `{thread}`: what checkpoint {} waits for does not decode: {e}",
                latest.seq
            ))
        })?,
        None => Vec::new(),
    };
    Ok((Some(latest.seq), waits))
}
