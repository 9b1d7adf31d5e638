//! `GET /api/threads/{thread}/stream`: a thread's event log as server-sent events in the AG-UI
//! vocabulary ([`server::stream`](crate::server::stream)), from the reader's `Last-Event-ID` (or
//! `?after=`) on, then each new entry as it is committed, until the client goes away or the
//! server shuts down (`?follow=false`: until the reader caught up).
//!
//! The log is read, never pushed: a slow client slows only its own stream. A reader waits on the
//! server's registry, which the store wakes after each commit that added events, and reads again
//! every 500 ms besides. A comment keeps a silent stream alive every 15 s. Each user holds at
//! most [`ServeLimits::streams_per_user`](crate::serve_limits::ServeLimits::streams_per_user)
//! streams open (429 `too_many_streams` past it). A position past the log's newest entry is
//! refused (400 `bad_request`). Before each read the caller is checked again
//! ([`authority`]): a stream whose caller may no longer read the thread ends.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;

use agentflow_store::{Store, ThreadRecord};
use axum::Extension;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use futures_util::stream;
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::Notify;

use super::caller::{Caller, PeerUser};
use super::path::Path;
use super::problem::{Problem, blocking};
use super::state::ApiState;
use crate::access::Operation;
use crate::server::hosted::Hosted;
use crate::server::inspect::description::description;
use crate::server::stream::cursor::Cursor;
use crate::server::stream::error::StreamError;
use crate::server::stream::limit::StreamSlot;
use crate::server::stream::reader::{Item, LogReader, Page};
use crate::server::stream::snapshot::SnapshotFn;
use crate::server::stream::{KEEP_ALIVE, PAGE, Streams};

pub(crate) mod authority;

use authority::{Authority, bears_token};

/// The header a reader coming back sends the id of the last event it got in.
const LAST_EVENT_ID: &str = "last-event-id";
/// The surface a stream's reads of personal data are audited under.
const SURFACE: &str = "stream";

/// The stream route's query.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct StreamQuery {
    /// Where to start, as `Last-Event-ID` says it (the header wins when both are sent).
    after: Option<String>,
    /// `false`: end the stream once the reader caught up (default `true`: wait for more).
    follow: Option<bool>,
}

/// `GET /api/threads/{thread}/stream`.
pub(crate) async fn stream(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    peer: Option<Extension<PeerUser>>,
    Path(thread): Path<String>,
    headers: HeaderMap,
    query: Result<Query<StreamQuery>, QueryRejection>,
) -> Result<Response, Problem> {
    let Query(query) = query.map_err(|e| {
        Problem::bad_request(format!(
            "the query is not understood ({e}); it takes `after=SEQ-IDX-K` and `follow=false`"
        ))
    })?;
    let from = match headers.get(LAST_EVENT_ID) {
        Some(value) => Some(value.to_str().map_err(|_| bad_position("the Last-Event-ID header"))?.to_string()),
        None => query.after,
    };
    let from = from
        .filter(|text| !text.trim().is_empty())
        .map(|text| text.parse::<Cursor>().map_err(|e| Problem::bad_request(e.to_string())))
        .transpose()?;
    let record = caller.thread(&state, Operation::ReadState, &thread).await?;
    let streams = Arc::clone(&state.streams);
    let slot = streams.open.open(&caller.actor().id).ok_or_else(|| {
        Problem::new(
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_streams",
            format!(
                "you hold {} streams open on this server, as many as one user may: close one (a page, an \
                 `agentflow tail --follow`) and open this one again",
                streams.open.per_user()
            ),
        )
    })?;
    let by_file = peer.is_some() || bears_token(&headers);
    let authority =
        Arc::new(Authority::new(Arc::clone(&state), caller.actor().clone(), &headers, by_file, record.clone()));
    let (shared, access) = (Arc::clone(&state), caller.access().clone());
    let (reader, first) = blocking(move || {
        let mut reader = reader_of(&shared, &access, &record, from)?;
        let page = reader.next_page(PAGE).map_err(problem_of)?;
        Ok((reader, page))
    })
    .await?;
    let live = Live {
        notify: streams.wakes.watch(&thread),
        streams,
        reader: Some(reader),
        batch: first.items,
        caught_up: first.caught_up,
        follow: query.follow.unwrap_or(true),
        thread,
        authority,
        checked: Instant::now(),
        _slot: slot,
    };
    let events =
        stream::unfold(live, next_batch).flat_map(|batch| stream::iter(batch.into_iter().map(Ok::<Event, Infallible>)));
    let mut response = Sse::new(events).keep_alive(KeepAlive::new().interval(KEEP_ALIVE)).into_response();
    // A proxy in front (nginx) passes the events on as they come.
    response.headers_mut().insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(response)
}

/// 400 for a position that is not text.
fn bad_position(what: &str) -> Problem {
    Problem::bad_request(format!(
        "{what} is not text; send the `id:` of the last event received, `SEQ-IDX-K`, as it came"
    ))
}

/// A stream's failure as the route answers it: a position past the log's end is the caller's
/// (400).
fn problem_of(e: StreamError) -> Problem {
    match e {
        StreamError::Read(e) => e.into(),
        other => Problem::bad_request(other.to_string()),
    }
}

/// The reader of thread `record`'s log for `access`'s actor: the states it shows are read with
/// the graph's own types when this server hosts it.
fn reader_of(
    state: &ApiState,
    access: &crate::access::Access,
    record: &ThreadRecord,
    from: Option<Cursor>,
) -> Result<LogReader, Problem> {
    let store = Arc::clone(&state.store);
    let hosted = state.graph_of(&record.graph_fingerprint).cloned();
    let described = match description(store.as_ref(), record)? {
        Some(d) => Some(d),
        None => hosted.as_ref().map(|g| g.description()),
    };
    match hosted {
        Some(graph) => {
            let snapshot: SnapshotFn =
                Box::new(move |_: &dyn Store, thread: &str, seq: u64| hosted_state(&graph, thread, seq));
            Ok(LogReader::with_description(store, access, record, from, SURFACE, described.as_ref(), snapshot))
        }
        None => Ok(LogReader::new(store, access, record, from, SURFACE)?),
    }
}

/// Thread `thread`'s state at checkpoint `seq` as hosted graph `graph` folds it; `None` when
/// there is none or it cannot be read.
fn hosted_state(graph: &Arc<dyn Hosted>, thread: &str, seq: u64) -> Option<Value> {
    graph.state_json(thread, seq).unwrap_or_else(|e| {
        tracing::warn!(thread, seq, error = %e, "a stream's state snapshot could not be read");
        None
    })
}

/// An open stream.
struct Live {
    streams: Arc<Streams>,
    notify: Arc<Notify>,
    /// The reader (taken while it reads on a blocking thread).
    reader: Option<LogReader>,
    /// Events read and not sent yet.
    batch: Vec<Item>,
    caught_up: bool,
    follow: bool,
    thread: String,
    /// The caller, checked again before each read.
    authority: Arc<Authority>,
    /// When the thread was last looked up again for the caller.
    checked: Instant,
    /// Freed when the stream ends.
    _slot: StreamSlot,
}

/// Why a stream's read gave no page.
enum Stop {
    /// The caller may no longer read the thread.
    Refused,
    /// The read failed.
    Failed(StreamError),
}

/// The next events to send, once there are some; `None`: the stream ends.
async fn next_batch(mut live: Live) -> Option<(Vec<Event>, Live)> {
    loop {
        if live.streams.stop.is_cancelled() {
            return None;
        }
        if !live.batch.is_empty() {
            let events = std::mem::take(&mut live.batch).into_iter().map(sse_event).collect();
            return Some((events, live));
        }
        if live.caught_up && !live.follow {
            return None;
        }
        // Registered before the read: a commit after the read wakes the wait below.
        let notify = Arc::clone(&live.notify);
        let notified = notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let mut reader = live.reader.take()?;
        let look_up = live.checked.elapsed() >= live.streams.recheck;
        let authority = Arc::clone(&live.authority);
        let read = tokio::task::spawn_blocking(move || {
            let access = if look_up { authority.now_and_thread() } else { authority.now() };
            let page = match access {
                Some(access) => {
                    reader.set_access(&access);
                    reader.next_page(PAGE).map_err(Stop::Failed)
                }
                None => Err(Stop::Refused),
            };
            (reader, page)
        })
        .await;
        if look_up {
            live.checked = Instant::now();
        }
        let page: Result<Page, Stop> = match read {
            Ok((reader, page)) => {
                live.reader = Some(reader);
                page
            }
            Err(e) => {
                tracing::warn!(thread = %live.thread, error = %e, "a stream's read failed; the stream ends");
                return None;
            }
        };
        match page {
            Ok(page) => {
                live.caught_up = page.caught_up;
                live.batch = page.items;
            }
            Err(Stop::Refused) => {
                tracing::debug!(thread = %live.thread, "a stream's caller may no longer read the thread; the stream ends");
                return None;
            }
            Err(Stop::Failed(e)) => {
                // The client comes back (EventSource does by itself) and reads from where it is.
                tracing::warn!(thread = %live.thread, error = %e, "a stream's read failed; the stream ends");
                return None;
            }
        }
        if !live.batch.is_empty() || !live.caught_up {
            continue;
        }
        if !live.follow {
            return None;
        }
        tokio::select! {
            () = &mut notified => {}
            () = tokio::time::sleep(live.streams.poll) => {}
            () = live.streams.stop.cancelled() => return None,
        }
    }
}

/// `item` as a server-sent event: its AG-UI event as the `data:` line, its id as `id:`.
fn sse_event(item: Item) -> Event {
    let event = Event::default().data(item.event.to_string());
    match item.id {
        Some(id) => event.id(id),
        None => event,
    }
}
