//! Why a thread's stream cannot be read from where its reader asked.

use crate::server::inspect::InspectError;

/// Why a thread's stream cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StreamError {
    /// The reader's position is past the newest entry of the thread's log. The log's ids never
    /// start again (not after trimming either), so the position was never an id of this
    /// thread's stream: waiting for it would wait forever.
    #[error(
        "`{position}` is past the newest event of thread `{thread}`'s log ({}): it is no id of this thread's \
         stream (ids never start again); send the id of the last event received from this thread's stream, or none \
         to read it from its start",
        newest.as_deref().map_or_else(|| "the log is empty".to_string(), |n| format!("its newest entry is {n}"))
    )]
    PastNewest {
        /// The thread.
        thread: String,
        /// The position asked for.
        position: String,
        /// The log's newest entry (`SEQ-IDX`), if it has one.
        newest: Option<String>,
    },
    /// The thread or its log could not be read.
    #[error(transparent)]
    Read(#[from] InspectError),
}
