//! Waiting for room in a run's stream: how a slow reader slows the run down
//! (see [`crate::stream::RunStream`]).

use std::task::{Context, Poll};

/// A buffer a run waits on while it is full.
pub(crate) trait Room: Send + Sync {
    /// Ready while the buffer has room (or nobody reads it any more).
    fn poll_room(&self, cx: &mut Context<'_>) -> Poll<()>;
}

/// Completes once `room` has room.
pub(crate) async fn room(room: &dyn Room) {
    std::future::poll_fn(|cx| room.poll_room(cx)).await;
}
