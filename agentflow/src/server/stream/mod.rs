//! A thread's runs as a stream: its durable event log (what each commit of a run did, written in
//! that commit) read as [AG-UI](https://docs.ag-ui.com) events, from where a reader stands, and
//! the waiting for more. The server's route `GET /api/threads/{thread}/stream` serves it as
//! server-sent events; `agentflow tail THREAD` prints it.
//!
//! - [`ag_ui`]: the AG-UI vocabulary of the log's entries, personal fields masked for the
//!   reader; one reader's mapping of each entry keeps what the next one needs (the run its
//!   client holds open, the messages it holds) and the state it shows;
//! - [`cursor`]: a reader's position (`Last-Event-ID`: `SEQ-IDX-K`) and the ids of the events;
//! - [`reader`]: the log read a bounded page at a time after a position, the reader's client
//!   brought in step where it starts, with the gap notice, entries that cannot be read passed
//!   over, and the audit of a personal-data read;
//! - the server's registry of waiting readers, woken by the store after each commit that added
//!   events ([`Store::on_events`](agentflow_store::Store::on_events)), and its count of open
//!   streams per user.
//!
//! Only what was committed is streamed: a model's tokens as they arrive are not (a client gets
//! each message whole, once its step is committed).

pub mod ag_ui;
pub mod cursor;
pub mod error;
pub(crate) mod limit;
pub(crate) mod mapper;
pub(crate) mod messages;
pub mod reader;
pub(crate) mod registry;
pub(crate) mod snapshot;
pub(crate) mod unreadable;

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use limit::OpenStreams;
use registry::Wakes;

/// How often a waiting reader reads the log again even when no wake came (a store that cannot
/// wake readers, a commit of another process on a redb file): 500 ms.
pub(crate) const POLL: Duration = Duration::from_millis(500);
/// How long a stream may stay silent before a keep-alive comment: 15 s.
pub(crate) const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// How many log entries one page of a stream takes at most.
pub(crate) const PAGE: usize = 256;
/// How often an open stream checks again, at the latest, that its caller may still read the
/// thread (their session still live, `read_state` still allowed): 30 s.
pub(crate) const RECHECK: Duration = Duration::from_secs(30);

/// A server's streams: the readers waiting for each thread's log, the streams open per user, and
/// the token that ends them all when the server shuts down.
#[derive(Debug)]
pub(crate) struct Streams {
    /// Who waits for which thread.
    pub(crate) wakes: Wakes,
    /// The streams open per user.
    pub(crate) open: Arc<OpenStreams>,
    /// Cancelled when the server shuts down: every stream ends.
    pub(crate) stop: CancellationToken,
    /// How often a waiting reader reads again without a wake.
    pub(crate) poll: Duration,
    /// How often, at the latest, an open stream checks its caller again.
    pub(crate) recheck: Duration,
}

impl Streams {
    /// The streams of a server that lets each user hold `per_user` open.
    pub(crate) fn new(per_user: usize) -> Self {
        Streams {
            wakes: Wakes::default(),
            open: Arc::new(OpenStreams::new(per_user)),
            stop: CancellationToken::new(),
            poll: POLL,
            recheck: RECHECK,
        }
    }
}

#[cfg(test)]
mod tests;
