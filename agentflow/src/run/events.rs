//! The run's event sink and stream; emitting costs nothing when there is none.

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::access::Access;
use crate::access::personal::{credential_names, mask_fields, personal_names, sees_personal_data};
use crate::core::state::{State, Update};
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
    /// Whether any field is masked (see [`hidden_fields`]); `false` costs nothing.
    masks: bool,
    /// Whether the personal fields are among them (the app's actor may not see personal data).
    /// Two flags rather than the list, which [`Events::hidden`] makes again when it is needed:
    /// they fit beside the other flags, so a run without marked fields is no larger.
    hide_personal: bool,
}

/// The fields of `S` to mask for `access`'s actor: its credential fields always (no
/// permission unmasks them), and its personal fields unless the actor may see personal data.
/// Checked once per run; `None` at once for a state without any.
pub(crate) fn hidden_fields<S: State>(access: &Access) -> Option<Vec<&'static str>> {
    let mut hidden = credential_names(S::FIELDS);
    if S::FIELDS.iter().any(|f| f.personal) && !sees_personal_data(access, None) {
        let personal: Vec<&'static str> =
            personal_names(S::FIELDS).into_iter().filter(|n| !hidden.contains(n)).collect();
        hidden.extend(personal);
    }
    (!hidden.is_empty()).then_some(hidden)
}

impl<'g, S: State> Events<'g, S> {
    pub(crate) fn new(
        sink: Option<Sink<'g, S>>,
        stream: Option<Arc<Channel<S>>>,
        parent: Option<Arc<dyn Outlet>>,
        hidden: Option<Vec<&'static str>>,
    ) -> Self {
        let stream_events = stream.as_ref().is_some_and(|c| c.has(StreamMode::Events));
        // A run with its own stream sends nothing up; a child without one does.
        let parent = parent.filter(|_| stream.is_none());
        let parent_events = parent.as_ref().is_some_and(|p| p.wants(StreamMode::Events));
        let hide_personal =
            hidden.as_ref().is_some_and(|h| S::FIELDS.iter().any(|f| f.personal && h.contains(&f.name)));
        Events {
            enabled: sink.is_some() || stream_events || parent_events,
            sink: Mutex::new(sink),
            stream,
            stream_events,
            parent,
            masks: hidden.is_some(),
            hide_personal,
        }
    }

    /// The fields to mask, as [`hidden_fields`] gave them; `None` when none.
    fn hidden(&self) -> Option<Vec<&'static str>> {
        self.masks.then(|| {
            S::FIELDS.iter().filter(|f| f.credential || (self.hide_personal && f.personal)).map(|f| f.name).collect()
        })
    }

    pub(crate) fn emit(&self, event: impl FnOnce() -> Event<S>) {
        if !self.enabled {
            return;
        }
        let mut event = event();
        if let Some(hidden) = self.hidden()
            && let Event::NodeFinished { update, .. } = &mut event
        {
            update.__clear_fields(&hidden);
        }
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
    /// An actor who may not see personal data gets values and updates as JSON, masked.
    pub(crate) fn push(&self, mode: StreamMode, part: impl FnOnce() -> StreamPart<S>) {
        if let Some(stream) = self.stream.as_ref().filter(|c| c.has(mode)) {
            match self.hidden() {
                None => stream.push(part()),
                Some(hidden) => {
                    if let Some(value) = masked_json(part(), &hidden) {
                        stream.push(StreamPart::Masked { mode, value });
                    }
                }
            }
        } else if let Some(parent) = self.parent.as_ref().filter(|p| p.wants(mode)) {
            let hidden = self.hidden().unwrap_or_default();
            if let Some(value) = masked_json(part(), &hidden) {
                parent.child_at(Vec::new(), mode, value);
            }
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

/// A value or an update as JSON (see [`StreamPart::Child`]), the `hidden` fields masked;
/// `None` for other parts.
fn masked_json<S: State>(part: StreamPart<S>, hidden: &[&str]) -> Option<Value> {
    Some(match part {
        StreamPart::Values { step, state } => {
            let mut state = to_json(&state);
            mask_fields(&mut state, hidden);
            json!({ "step": step, "state": state })
        }
        StreamPart::Update { step, node, instance, update } => {
            let mut update = to_json(&update);
            mask_fields(&mut update, hidden);
            json!({ "step": step, "node": node, "instance": instance, "update": update })
        }
        _ => return None,
    })
}

/// A value as JSON (a state or update that does not serialise, which a
/// checkpoint would have refused already, shows its error instead).
fn to_json<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or_else(|e| Value::String(format!("(not serialisable: {e})")))
}
