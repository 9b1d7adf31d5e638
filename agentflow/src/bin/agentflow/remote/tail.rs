//! `tail` through the socket of the server holding a redb file: the server's stream route
//! (`GET /api/threads/{thread}/stream`), read as server-sent events as they come. The events the
//! log holds are read first (`?follow=false`); with `--follow`, the stream then goes on from the
//! last one until a run whose start was printed has ended (see [`Printer`]).
//!
//! The body is read as bytes: an event is decoded once it is whole (it ends with a blank line),
//! so a character split across chunks is read whole, and each byte is looked at once.

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use futures_util::StreamExt;
use hyper_util::rt::TokioIo;
use serde_json::Value;

use super::{Answer, PERSON_HEADER, REQUEST_TIMEOUT, Server, percent_decode, segment, trust};
use crate::tail::{Printer, Shown, TailArgs};
use crate::{Failure, Outcome};

/// The largest error answer read.
const MAX_ERROR: usize = 1 << 20;

/// What to read of a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Until {
    /// The events the log holds (the server ends the stream).
    CaughtUp,
    /// Until a run whose start was printed has ended ([`Printer::followed_run_ended`]).
    RunEnd,
}

impl Server {
    /// `tail`, from the server's stream route.
    pub(super) fn tail(&self, args: &TailArgs, json: bool) -> Outcome {
        let from = args.from()?;
        let base = format!("/api/threads/{}/stream", segment(&args.thread));
        let mut printer = Printer::new(json);
        let mut last = from.map(|c| c.to_string());
        self.stream(&format!("{base}?follow=false"), &mut last, &mut printer, Until::CaughtUp)?;
        printer.flush()?;
        if !args.follow || printer.followed_run_ended() {
            return Ok(());
        }
        printer.resume();
        self.stream(&base, &mut last, &mut printer, Until::RunEnd)?;
        printer.flush()
    }

    /// Reads the stream at `path` after `last` (the id of the last event got, updated as events
    /// come), printing each event, until `until`.
    fn stream(&self, path: &str, last: &mut Option<String>, printer: &mut Printer, until: Until) -> Outcome {
        let runtime = self.client_runtime()?;
        let unanswered = |e: String| self.unanswered(&e);
        runtime.block_on(async {
            let stream =
                tokio::net::UnixStream::connect(&self.owner.socket).await.map_err(|e| unanswered(e.to_string()))?;
            trust::check_peer(&stream, &self.owner, self.uid).map_err(|why| self.untrusted(&why))?;
            let (mut sender, connection) = hyper::client::conn::http1::handshake::<_, Body>(TokioIo::new(stream))
                .await
                .map_err(|e| unanswered(e.to_string()))?;
            let driver = tokio::spawn(connection);
            let mut request = Request::builder()
                .method(Method::GET)
                .uri(path)
                .header(header::HOST, "localhost")
                .header(header::ACCEPT, "text/event-stream");
            if let Some(id) = last.as_deref() {
                request = request.header("last-event-id", id);
            }
            let request = request.body(Body::empty()).map_err(|e| unanswered(e.to_string()))?;
            let response = tokio::time::timeout(REQUEST_TIMEOUT, sender.send_request(request))
                .await
                .map_err(|_| unanswered(format!("no answer in {} s", REQUEST_TIMEOUT.as_secs())))?
                .map_err(|e| unanswered(e.to_string()))?;
            let status = response.status();
            let person = response.headers().get(PERSON_HEADER).and_then(|v| v.to_str().ok()).and_then(percent_decode);
            if status != StatusCode::OK {
                let bytes = axum::body::to_bytes(Body::new(response.into_body()), MAX_ERROR).await.unwrap_or_default();
                let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                driver.abort();
                return self.ok(Answer { status, person, body }).map(drop);
            }
            if until == Until::CaughtUp {
                self.acting_as(&Answer { status, person, body: Value::Null });
            }
            let mut body = Body::new(response.into_body()).into_data_stream();
            let mut buffer = Events::default();
            let outcome = loop {
                let Some(chunk) = body.next().await else { break Ok(()) };
                let chunk = match chunk {
                    Ok(chunk) => chunk,
                    Err(e) => break Err(unanswered(format!("the stream broke off: {e}"))),
                };
                buffer.bytes.extend_from_slice(&chunk);
                match take_events(&mut buffer, last, printer, until) {
                    Ok(true) => break Ok(()),
                    Ok(false) => {}
                    Err(e) => break Err(e),
                }
            };
            driver.abort();
            outcome
        })
    }
}

/// The bytes of a stream received and not yet taken as events.
#[derive(Debug, Default)]
struct Events {
    bytes: Vec<u8>,
    /// How many of them were looked at for an event's end.
    scanned: usize,
}

impl Events {
    /// The next whole event's text (it ends with a blank line), taken out; `Ok(None)` when none
    /// is whole yet.
    fn next_block(&mut self, taken: &mut usize) -> Result<Option<String>, Failure> {
        let from = self.scanned.max(*taken);
        let Some(end) = self.bytes[from..].windows(2).position(|w| w == b"\n\n").map(|p| from + p) else {
            self.scanned = self.bytes.len().saturating_sub(1).max(*taken);
            return Ok(None);
        };
        let block = std::str::from_utf8(&self.bytes[*taken..end])
            .map_err(|e| Failure::store(format!("the server sent an event that is not UTF-8 text: {e}")))?
            .to_string();
        *taken = end + 2;
        self.scanned = *taken;
        Ok(Some(block))
    }

    /// Drops the first `taken` bytes (the events taken).
    fn drop_taken(&mut self, taken: usize) {
        self.bytes.drain(..taken);
        self.scanned = self.scanned.saturating_sub(taken);
    }
}

/// Prints the whole events `buffer` holds (each ends with a blank line), leaving a part-received
/// one in it; `true` once `until` is reached.
fn take_events(
    buffer: &mut Events,
    last: &mut Option<String>,
    printer: &mut Printer,
    until: Until,
) -> Result<bool, Failure> {
    let mut taken = 0;
    let outcome = loop {
        let block = match buffer.next_block(&mut taken) {
            Ok(Some(block)) => block,
            Ok(None) => break Ok(false),
            Err(e) => break Err(e),
        };
        let (mut id, mut data) = (None, String::new());
        for line in block.lines() {
            if let Some(value) = line.strip_prefix("id:") {
                id = Some(value.trim_start().to_string());
            } else if let Some(value) = line.strip_prefix("data:") {
                if !data.is_empty() {
                    data.push('\n');
                }
                data.push_str(value.strip_prefix(' ').unwrap_or(value));
            }
        }
        // A keep-alive comment, or an event without data.
        if data.is_empty() {
            continue;
        }
        let event: Value = match serde_json::from_str(&data) {
            Ok(event) => event,
            Err(e) => break Err(Failure::store(format!("the server sent an event that is not JSON ({e}): {data}"))),
        };
        if id.is_some() {
            last.clone_from(&id);
        }
        if let Err(e) = printer.event(Shown { id, kind: None, event }) {
            break Err(e);
        }
        if until == Until::RunEnd && printer.followed_run_ended() {
            break Ok(true);
        }
    };
    buffer.drop_taken(taken);
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buffer(text: &[u8]) -> Events {
        Events { bytes: text.to_vec(), scanned: 0 }
    }

    #[test]
    fn events_are_taken_whole_and_comments_passed_over() {
        let mut printer = Printer::new(true);
        let mut last = None;
        let mut events =
            buffer(b":\n\nid: 1-0-1\ndata: {\"type\":\"RUN_STARTED\",\"runId\":\"r\"}\n\nid: 1-1-0\ndata: {\"ty");
        assert!(!take_events(&mut events, &mut last, &mut printer, Until::RunEnd).unwrap());
        assert_eq!(last.as_deref(), Some("1-0-1"));
        assert_eq!(events.bytes, b"id: 1-1-0\ndata: {\"ty");
        events.bytes.extend_from_slice(b"pe\":\"RUN_FINISHED\",\"runId\":\"r\"}\n\nid: 2-0-0\ndata: {}\n\n");
        assert!(take_events(&mut events, &mut last, &mut printer, Until::RunEnd).unwrap(), "the run's end ends it");
        assert_eq!(last.as_deref(), Some("1-1-0"));
        assert!(printer.followed_run_ended());
        assert_eq!(events.bytes, b"id: 2-0-0\ndata: {}\n\n", "what comes after is left");
    }

    #[test]
    fn a_character_split_across_chunks_is_read_whole_and_bytes_are_looked_at_once() {
        let mut printer = Printer::new(true);
        let mut last = None;
        let text = "id: 3-0-0\ndata: {\"type\":\"CUSTOM\",\"name\":\"n\",\"value\":\"caf\u{e9} \u{1f600}\"}\n\n";
        let bytes = text.as_bytes();
        let mut events = Events::default();
        // Fed a byte at a time: each chunk ends inside a character somewhere.
        for byte in bytes {
            events.bytes.push(*byte);
            assert!(!take_events(&mut events, &mut last, &mut printer, Until::CaughtUp).unwrap());
            assert!(events.scanned <= events.bytes.len());
        }
        assert_eq!(last.as_deref(), Some("3-0-0"));
        assert!(events.bytes.is_empty());
        // An event that is not UTF-8 is refused, not patched over.
        let mut broken = buffer(b"id: 4-0-0\ndata: \xff\n\n");
        assert!(take_events(&mut broken, &mut last, &mut printer, Until::CaughtUp).is_err());
    }

    #[test]
    fn a_run_that_started_before_the_position_does_not_end_the_follow() {
        let mut printer = Printer::new(true);
        printer.resume();
        let mut last = Some("5-0-1".to_string());
        // The end of the run the position is in, then the run that goes on after it.
        let mut events = buffer(
            b"data: {\"type\":\"RUN_STARTED\",\"runId\":\"r-1\"}\n\n\
              id: 6-0-1\ndata: {\"type\":\"RUN_FINISHED\",\"runId\":\"r-1\"}\n\n\
              id: 7-0-1\ndata: {\"type\":\"RUN_STARTED\",\"runId\":\"r-2\"}\n\n",
        );
        assert!(!take_events(&mut events, &mut last, &mut printer, Until::RunEnd).unwrap());
        events.bytes.extend_from_slice(b"id: 8-0-1\ndata: {\"type\":\"RUN_FINISHED\",\"runId\":\"r-2\"}\n\n");
        assert!(take_events(&mut events, &mut last, &mut printer, Until::RunEnd).unwrap());
        assert_eq!(last.as_deref(), Some("8-0-1"));
    }
}
