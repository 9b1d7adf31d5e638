//! Streaming a run: [`Runner::stream`](crate::Runner::stream) and its items.
//!
//! A [`RunStream`] is the run itself, driven by whoever reads the stream:
//! reading the next item polls the run, and the run only moves on while its
//! buffer has room. So nothing is ever dropped, and a slow consumer slows the
//! run down instead of losing items or growing a queue without bound.
//!
//! What the stream carries is chosen with
//! [`Runner::stream_modes`](crate::Runner::stream_modes), one or more
//! [`StreamMode`]s; whatever the modes, the last item is
//! [`StreamPart::Done`] with the run's result (or error).

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

use futures_util::Stream;

use crate::back_pressure::Room;
use crate::core::state::State;
use crate::event::Event;
use crate::model::ChatChunk;
use crate::outcome::{Run, RunError};

/// What a [`RunStream`] carries. Select several with
/// [`Runner::stream_modes`](crate::Runner::stream_modes); the items of all
/// selected modes come in one stream, in the order they happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StreamMode {
    /// The whole state after each super-step ([`StreamPart::Values`]): one
    /// item per super-step the run completes, the state its checkpoint holds.
    Values,
    /// Each node's partial update, when its step's updates are merged
    /// ([`StreamPart::Update`]); a map worker's instances each have theirs.
    Updates,
    /// The run's [`Event`]s, the same ones, in the same order, that
    /// [`Runner::on_event`](crate::Runner::on_event) receives ([`StreamPart::Event`]).
    Events,
    /// Model output as it arrives ([`StreamPart::Message`]): the chunks of
    /// every model call made through [`Ctx::chat`](crate::Ctx::chat) (and the
    /// helpers built on it), asked for with
    /// [`ChatModel::chat_stream`](crate::model::ChatModel::chat_stream).
    Messages,
    /// Values a node hands out with [`Ctx::emit`](crate::Ctx::emit)
    /// ([`StreamPart::Custom`]).
    Custom,
}

impl StreamMode {
    /// Every mode.
    pub const ALL: [StreamMode; 5] =
        [StreamMode::Values, StreamMode::Updates, StreamMode::Events, StreamMode::Messages, StreamMode::Custom];

    fn bit(self) -> u8 {
        match self {
            StreamMode::Values => 1,
            StreamMode::Updates => 2,
            StreamMode::Events => 4,
            StreamMode::Messages => 8,
            StreamMode::Custom => 16,
        }
    }
}

/// A set of [`StreamMode`]s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Modes(u8);

impl Modes {
    pub(crate) fn of(modes: impl IntoIterator<Item = StreamMode>) -> Self {
        Modes(modes.into_iter().fold(0, |m, mode| m | mode.bit()))
    }

    pub(crate) fn has(self, mode: StreamMode) -> bool {
        self.0 & mode.bit() != 0
    }
}

/// One item of a [`RunStream`].
#[derive(Debug)]
#[non_exhaustive]
pub struct StreamItem<S: State> {
    /// The path of the graph that produced the item, from the run's root
    /// graph: empty for the root graph itself. An item from a
    /// [subgraph](crate::subgraph) carries one entry per level, each the
    /// child's call under its parent node (`["delegate.0.2.writer"]`, and
    /// `["write.0.0.research", "gather.0.0.review"]` one level further
    /// down), so a consumer can tell a child's items from its parent's: its
    /// model chunks and custom values as [`StreamPart::Message`] and
    /// [`StreamPart::Custom`], its values, updates and events as
    /// [`StreamPart::Child`] (JSON, since its state type is its own).
    pub namespace: Vec<String>,
    /// What happened.
    pub part: StreamPart<S>,
}

impl<S: State> StreamItem<S> {
    fn root(part: StreamPart<S>) -> Self {
        StreamItem { namespace: Vec::new(), part }
    }
}

/// What a [`StreamItem`] says, by [`StreamMode`].
#[derive(Debug)]
#[non_exhaustive]
pub enum StreamPart<S: State> {
    /// [`StreamMode::Values`]: the state once super-step `step - 1` was
    /// merged, i.e. after `step` super-steps (with a thread, the state of its
    /// checkpoint for that step).
    Values {
        /// How many super-steps the thread has completed.
        step: u32,
        /// The whole state.
        state: S,
    },
    /// [`StreamMode::Updates`]: the update one node (or one instance of a map
    /// worker) returned in super-step `step`.
    Update {
        /// The super-step, from 0.
        step: u32,
        /// The node.
        node: &'static str,
        /// For an instance of a map worker, the index of its payload.
        instance: Option<u32>,
        /// The partial update.
        update: S::Update,
    },
    /// [`StreamMode::Events`]: one event of the run.
    Event(Event<S>),
    /// [`StreamMode::Messages`]: a piece of a model's reply, as it arrived.
    ///
    /// The chunks of one call come in order. A call that fails half-way
    /// (and is retried with its node) is not retracted: the
    /// [`Event::NodeRetrying`] of [`StreamMode::Events`] says so, and the
    /// retry's chunks follow.
    Message {
        /// The super-step, from 0.
        step: u32,
        /// The node that called the model.
        node: &'static str,
        /// For an instance of a map worker, the index of its payload.
        instance: Option<u32>,
        /// The chunk.
        chunk: ChatChunk,
    },
    /// [`StreamMode::Custom`]: a value a node handed out with
    /// [`Ctx::emit`](crate::Ctx::emit).
    Custom {
        /// The super-step, from 0.
        step: u32,
        /// The node.
        node: &'static str,
        /// For an instance of a map worker, the index of its payload.
        instance: Option<u32>,
        /// The value, serialised.
        value: serde_json::Value,
    },
    /// A [subgraph](crate::subgraph)'s value, update or event, in its
    /// parent's stream (the item's `namespace` says which child). Its state
    /// type is not the parent's, so it comes as JSON: for
    /// [`StreamMode::Values`] `{"step": n, "state": ..}`, for
    /// [`StreamMode::Updates`] `{"step": n, "node": "..", "instance": i | null,
    /// "update": ..}`, for [`StreamMode::Events`] `{"event": "<the event's
    /// one-line display>"}`. A child's model chunks and custom values come as
    /// [`StreamPart::Message`] and [`StreamPart::Custom`].
    Child {
        /// Which mode the item is of.
        mode: StreamMode,
        /// The item, as above.
        value: serde_json::Value,
    },
    /// A value or an update of this graph, for an app whose actor may not see personal data
    /// ([`Operation::SeePersonalData`](crate::access::Operation::SeePersonalData)) when the
    /// state has personal fields (`#[state(pii)]`): in place of [`StreamPart::Values`] and
    /// [`StreamPart::Update`], as JSON of the shapes [`StreamPart::Child`] uses, each personal
    /// field's value replaced by `"•••"` (a typed value cannot hold it).
    Masked {
        /// [`StreamMode::Values`] or [`StreamMode::Updates`].
        mode: StreamMode,
        /// The item, personal fields masked.
        value: serde_json::Value,
    },
    /// The run ended: what `Runner::run` (or the resume) would have
    /// returned. Always the last item, whatever the modes.
    Done(Result<Run<S>, RunError>),
}

/// Where in the run a message chunk or a custom value came from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Origin {
    pub(crate) step: u32,
    pub(crate) node: &'static str,
    pub(crate) instance: Option<u32>,
}

/// What a node's context reaches of the stream, whatever the state type.
pub(crate) trait Outlet: Room + Send + Sync {
    fn wants(&self, mode: StreamMode) -> bool;
    /// A chunk from the graph at `namespace` (empty: the root graph).
    fn message_at(&self, namespace: Vec<String>, origin: Origin, chunk: ChatChunk);
    /// A custom value from the graph at `namespace` (empty: the root graph).
    fn custom_at(&self, namespace: Vec<String>, origin: Origin, value: serde_json::Value);
    /// A child graph's value, update or event (see [`StreamPart::Child`]).
    fn child_at(&self, namespace: Vec<String>, mode: StreamMode, value: serde_json::Value);

    fn message(&self, origin: Origin, chunk: ChatChunk) {
        self.message_at(Vec::new(), origin, chunk);
    }

    fn custom(&self, origin: Origin, value: serde_json::Value) {
        self.custom_at(Vec::new(), origin, value);
    }
}

/// A child graph's view of its parent's stream: what the child sends goes
/// to the parent's stream under the child's place (`level`).
pub(crate) struct Nested {
    pub(crate) parent: Arc<dyn Outlet>,
    pub(crate) level: String,
}

impl Nested {
    fn path(&self, mut below: Vec<String>) -> Vec<String> {
        below.insert(0, self.level.clone());
        below
    }
}

impl Room for Nested {
    fn poll_room(&self, cx: &mut Context<'_>) -> Poll<()> {
        self.parent.poll_room(cx)
    }
}

impl Outlet for Nested {
    fn wants(&self, mode: StreamMode) -> bool {
        self.parent.wants(mode)
    }

    fn message_at(&self, namespace: Vec<String>, origin: Origin, chunk: ChatChunk) {
        self.parent.message_at(self.path(namespace), origin, chunk);
    }

    fn custom_at(&self, namespace: Vec<String>, origin: Origin, value: serde_json::Value) {
        self.parent.custom_at(self.path(namespace), origin, value);
    }

    fn child_at(&self, namespace: Vec<String>, mode: StreamMode, value: serde_json::Value) {
        self.parent.child_at(self.path(namespace), mode, value);
    }
}

/// The buffer between a run and its [`RunStream`].
pub(crate) struct Channel<S: State> {
    modes: Modes,
    capacity: usize,
    inner: Mutex<Buffer<S>>,
}

struct Buffer<S: State> {
    items: VecDeque<StreamItem<S>>,
    /// Tasks of the run waiting for room.
    waiting: Vec<Waker>,
    /// Nobody reads the items any more ([`RunStream::finish`]): drop them.
    discard: bool,
}

impl<S: State> Channel<S> {
    pub(crate) fn new(modes: Modes, capacity: usize) -> Self {
        let buffer = Buffer { items: VecDeque::new(), waiting: Vec::new(), discard: false };
        Channel { modes, capacity: capacity.max(1), inner: Mutex::new(buffer) }
    }

    fn lock(&self) -> MutexGuard<'_, Buffer<S>> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn has(&self, mode: StreamMode) -> bool {
        self.modes.has(mode)
    }

    pub(crate) fn push(&self, part: StreamPart<S>) {
        self.push_at(Vec::new(), part);
    }

    fn push_at(&self, namespace: Vec<String>, part: StreamPart<S>) {
        let mut buffer = self.lock();
        if !buffer.discard {
            buffer.items.push_back(StreamItem { namespace, part });
        }
    }

    fn pop(&self) -> Option<StreamItem<S>> {
        let mut buffer = self.lock();
        let item = buffer.items.pop_front()?;
        if buffer.items.len() < self.capacity {
            for waker in buffer.waiting.drain(..) {
                waker.wake();
            }
        }
        Some(item)
    }

    fn discard(&self) {
        let mut buffer = self.lock();
        buffer.discard = true;
        buffer.items.clear();
        for waker in buffer.waiting.drain(..) {
            waker.wake();
        }
    }
}

impl<S: State> Room for Channel<S> {
    fn poll_room(&self, cx: &mut Context<'_>) -> Poll<()> {
        let mut buffer = self.lock();
        if buffer.discard || buffer.items.len() < self.capacity {
            return Poll::Ready(());
        }
        if !buffer.waiting.iter().any(|w| w.will_wake(cx.waker())) {
            buffer.waiting.push(cx.waker().clone());
        }
        Poll::Pending
    }
}

impl<S: State> Outlet for Channel<S> {
    fn wants(&self, mode: StreamMode) -> bool {
        self.has(mode)
    }

    fn message_at(&self, namespace: Vec<String>, origin: Origin, chunk: ChatChunk) {
        let Origin { step, node, instance } = origin;
        self.push_at(namespace, StreamPart::Message { step, node, instance, chunk });
    }

    fn custom_at(&self, namespace: Vec<String>, origin: Origin, value: serde_json::Value) {
        let Origin { step, node, instance } = origin;
        self.push_at(namespace, StreamPart::Custom { step, node, instance, value });
    }

    fn child_at(&self, namespace: Vec<String>, mode: StreamMode, value: serde_json::Value) {
        self.push_at(namespace, StreamPart::Child { mode, value });
    }
}

/// The future of a run, as a stream keeps it.
pub(crate) type RunFuture<'g, S> = Pin<Box<dyn Future<Output = Result<Run<S>, RunError>> + Send + 'g>>;

/// A run as a [`Stream`] of [`StreamItem`]s, from
/// [`Runner::stream`](crate::Runner::stream),
/// [`Runner::stream_resume`](crate::Runner::stream_resume) or
/// [`Runner::stream_resume_with`](crate::Runner::stream_resume_with).
///
/// - **The stream is the run.** Nothing runs in the background: reading the
///   stream (with [`RunStream::next`], `StreamExt::next`, or
///   [`RunStream::finish`]) drives the run, in the reader's task. The stream
///   is `Send` (the run shares its deps by reference, so they are `Sync`):
///   it can be read in a spawned task.
/// - **Nothing is dropped; a slow reader slows the run.** The run moves on
///   only while fewer than [`Runner::stream_buffer`](crate::Runner::stream_buffer)
///   items wait to be read: it waits for room before each super-step, each
///   node attempt, each node's update, each state, each model chunk and each
///   [`Ctx::emit`](crate::Ctx::emit). Items produced between two of those
///   waits (a node's failure, a tool or model activity event) go in without
///   waiting, so the buffer can briefly hold a few more.
/// - **A reader that stops reading stops the run**, which is not polled
///   while it waits: its deadline ([`Runner::timeout`](crate::Runner::timeout))
///   keeps counting, and a durable run whose reader pauses for longer than
///   the thread's lease ([`Runner::lease_ttl`](crate::Runner::lease_ttl),
///   30 s by default) may lose the lease, ending with
///   [`RunError::LeaseLost`] and committing nothing more (the thread then
///   resumes from its last step). A node's `timeout` likewise counts the
///   time its model chunks and [`Ctx::emit`](crate::Ctx::emit) values wait
///   for the reader. Read steadily, or call [`RunStream::finish`].
/// - **The result is never lost.** The last item is [`StreamPart::Done`]
///   with what `Runner::run` would have returned, an error included; then
///   the stream ends. [`RunStream::finish`] drives the run to that end
///   without reading the rest.
/// - **Dropping the stream drops the run**, exactly as dropping the future of
///   `Runner::run` does: it stops where it stands, at once, and releases its
///   thread's lease. A thread keeps its last committed super-step and can be
///   resumed ([`Runner::resume`](crate::Runner::resume)); the nodes of the
///   step that was cut off run again then, with the journal of
///   [`Ctx::effect`](crate::Ctx::effect) guarding their side effects. To stop
///   reading but let the run finish, call [`RunStream::finish`].
#[must_use = "a stream does nothing unless read: the run advances as its items are read"]
pub struct RunStream<'g, S: State> {
    channel: Arc<Channel<S>>,
    run: Option<RunFuture<'g, S>>,
    result: Option<Result<Run<S>, RunError>>,
}

impl<S: State> fmt::Debug for RunStream<'_, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunStream")
            .field("modes", &self.channel.modes)
            .field("buffered", &self.channel.lock().items.len())
            .field("running", &self.run.is_some())
            .finish()
    }
}

impl<'g, S: State> RunStream<'g, S> {
    pub(crate) fn new(channel: Arc<Channel<S>>, run: RunFuture<'g, S>) -> Self {
        RunStream { channel, run: Some(run), result: None }
    }

    /// The next item; `None` once [`StreamPart::Done`] was read. The same as
    /// `StreamExt::next`, without importing a trait.
    pub async fn next(&mut self) -> Option<StreamItem<S>> {
        std::future::poll_fn(|cx| Pin::new(&mut *self).poll_next(cx)).await
    }

    /// Drives the run to its end without reading the items left (they are
    /// dropped, and the run no longer waits for a reader) and returns its
    /// result; `None` if [`StreamPart::Done`] was already read.
    pub async fn finish(mut self) -> Option<Result<Run<S>, RunError>> {
        self.channel.discard();
        if let Some(run) = self.run.take() {
            return Some(run.await);
        }
        self.result.take()
    }
}

// Nothing in it is pinned in place: the run's future is boxed.
impl<S: State> Unpin for RunStream<'_, S> {}

impl<S: State> Stream for RunStream<'_, S> {
    type Item = StreamItem<S>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<StreamItem<S>>> {
        let this = self.get_mut();
        loop {
            // Read what is buffered first: the run waits while it is full.
            if let Some(item) = this.channel.pop() {
                return Poll::Ready(Some(item));
            }
            let Some(run) = this.run.as_mut() else {
                return Poll::Ready(this.result.take().map(|r| StreamItem::root(StreamPart::Done(r))));
            };
            match run.as_mut().poll(cx) {
                Poll::Ready(result) => {
                    this.run = None;
                    this.result = Some(result);
                }
                // It produced items and then waited (for room, or for I/O).
                Poll::Pending if this.channel.lock().items.is_empty() => return Poll::Pending,
                Poll::Pending => {}
            }
        }
    }
}
