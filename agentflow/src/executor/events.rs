//! The run's event sink; emitting costs nothing when there is none.

use std::sync::Mutex;

use crate::event::Event;
use crate::state::State;

pub(crate) type Sink<'g, S> = Box<dyn FnMut(Event<S>) + Send + 'g>;

pub(crate) struct Events<'g, S: State> {
    pub(crate) enabled: bool,
    sink: Mutex<Option<Sink<'g, S>>>,
}

impl<'g, S: State> Events<'g, S> {
    pub(crate) fn new(sink: Option<Sink<'g, S>>) -> Self {
        Events { enabled: sink.is_some(), sink: Mutex::new(sink) }
    }

    pub(crate) fn emit(&self, event: impl FnOnce() -> Event<S>) {
        if !self.enabled {
            return;
        }
        // A sink that panicked poisons the lock; later events still go through.
        let mut sink = self.sink.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(sink) = sink.as_mut() {
            sink(event());
        }
    }
}
