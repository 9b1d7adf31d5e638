//! The run's event sink and stream; emitting costs nothing when there is none.

use std::sync::{Arc, Mutex};

use crate::event::Event;
use crate::state::State;
use crate::stream::{Channel, StreamMode, StreamPart};

pub(crate) type Sink<'g, S> = Box<dyn FnMut(Event<S>) + Send + 'g>;

pub(crate) struct Events<'g, S: State> {
    /// Whether events are wanted at all (by a sink or the stream).
    pub(crate) enabled: bool,
    sink: Mutex<Option<Sink<'g, S>>>,
    /// The run's stream, when it is read as one.
    stream: Option<Arc<Channel<S>>>,
    /// Whether the stream wants events.
    stream_events: bool,
}

impl<'g, S: State> Events<'g, S> {
    pub(crate) fn new(sink: Option<Sink<'g, S>>, stream: Option<Arc<Channel<S>>>) -> Self {
        let stream_events = stream.as_ref().is_some_and(|c| c.has(StreamMode::Events));
        Events { enabled: sink.is_some() || stream_events, sink: Mutex::new(sink), stream, stream_events }
    }

    pub(crate) fn emit(&self, event: impl FnOnce() -> Event<S>) {
        if !self.enabled {
            return;
        }
        let event = event();
        {
            // A sink that panicked poisons the lock; later events still go through.
            let mut sink = self.sink.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(sink) = sink.as_mut() {
                if !self.stream_events {
                    sink(event);
                    return;
                }
                sink(event.clone());
            }
        }
        if let Some(stream) = &self.stream {
            stream.push(StreamPart::Event(event));
        }
    }

    /// Whether the run's stream carries `mode`.
    pub(crate) fn streams(&self, mode: StreamMode) -> bool {
        self.stream.as_ref().is_some_and(|c| c.has(mode))
    }

    /// Puts an item of a mode the stream carries into it.
    pub(crate) fn push(&self, mode: StreamMode, part: impl FnOnce() -> StreamPart<S>) {
        if let Some(stream) = self.stream.as_ref().filter(|c| c.has(mode)) {
            stream.push(part());
        }
    }

    /// Waits while the stream's buffer is full (see [`crate::stream::RunStream`]).
    pub(crate) async fn room(&self) {
        if let Some(stream) = &self.stream {
            crate::pace::room(&**stream).await;
        }
    }
}
