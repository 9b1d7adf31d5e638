//! The run's event sink and stream; emitting costs nothing when there is none.

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::core::state::State;
use crate::event::Event;
use crate::stream::{Channel, Outlet, StreamMode, StreamPart};

pub(crate) type Sink<'g, S> = Box<dyn FnMut(Event<S>) + Send + 'g>;

pub(crate) struct Events<'g, S: State> {
    /// Whether events are wanted at all (by a sink or the stream).
    pub(crate) enabled: bool,
    sink: Mutex<Option<Sink<'g, S>>>,
    /// The run's stream, when it is read as one.
    stream: Option<Arc<Channel<S>>>,
    /// Whether the stream wants events.
    stream_events: bool,
    /// For a subgraph's run: its parent's stream (under the child's place),
    /// which gets the child's values, updates and events as JSON.
    parent: Option<Arc<dyn Outlet>>,
}

impl<'g, S: State> Events<'g, S> {
    pub(crate) fn new(
        sink: Option<Sink<'g, S>>,
        stream: Option<Arc<Channel<S>>>,
        parent: Option<Arc<dyn Outlet>>,
    ) -> Self {
        let stream_events = stream.as_ref().is_some_and(|c| c.has(StreamMode::Events));
        // A run with its own stream sends nothing up; a child without one does.
        let parent = parent.filter(|_| stream.is_none());
        let parent_events = parent.as_ref().is_some_and(|p| p.wants(StreamMode::Events));
        Events {
            enabled: sink.is_some() || stream_events || parent_events,
            sink: Mutex::new(sink),
            stream,
            stream_events,
            parent,
        }
    }

    pub(crate) fn emit(&self, event: impl FnOnce() -> Event<S>) {
        if !self.enabled {
            return;
        }
        let event = event();
        if let Some(parent) = self.parent.as_ref().filter(|p| p.wants(StreamMode::Events)) {
            parent.child_at(Vec::new(), StreamMode::Events, json!({ "event": event.to_string() }));
        }
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

    /// Whether the run's stream (or, for a subgraph, its parent's) carries `mode`.
    pub(crate) fn streams(&self, mode: StreamMode) -> bool {
        self.stream.as_ref().is_some_and(|c| c.has(mode)) || self.parent.as_ref().is_some_and(|p| p.wants(mode))
    }

    /// Puts an item of a mode the stream carries into it; a subgraph's goes
    /// to its parent's stream as JSON.
    pub(crate) fn push(&self, mode: StreamMode, part: impl FnOnce() -> StreamPart<S>) {
        if let Some(stream) = self.stream.as_ref().filter(|c| c.has(mode)) {
            stream.push(part());
        } else if let Some(parent) = self.parent.as_ref().filter(|p| p.wants(mode)) {
            let value = match part() {
                StreamPart::Values { step, state } => json!({ "step": step, "state": to_json(&state) }),
                StreamPart::Update { step, node, instance, update } => {
                    json!({ "step": step, "node": node, "instance": instance, "update": to_json(&update) })
                }
                _ => return,
            };
            parent.child_at(Vec::new(), mode, value);
        }
    }

    /// Waits while the stream's buffer is full (see [`crate::stream::RunStream`]).
    pub(crate) async fn room(&self) {
        if let Some(stream) = &self.stream {
            crate::back_pressure::room(&**stream).await;
        } else if let Some(parent) = &self.parent {
            crate::back_pressure::room(&**parent).await;
        }
    }
}

/// A value as JSON (a state or update that does not serialise, which a
/// checkpoint would have refused already, shows its error instead).
fn to_json<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or_else(|e| Value::String(format!("(not serialisable: {e})")))
}
