//! A reader of a thread's event stream (`GET /api/threads/{thread}/stream`) as a program reads
//! server-sent events: the body's `id:` and `data:` lines, one event per blank line, comments
//! (the keep-alives) skipped, as the EventSource standard parses them.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::Value;

/// One server-sent event.
#[derive(Debug, Clone)]
pub(crate) struct SseEvent {
    /// Its `id:` line (`SEQ-IDX-K`), if it had one.
    pub(crate) id: Option<String>,
    /// Its `data:` lines, joined by line breaks.
    pub(crate) data: String,
}

impl SseEvent {
    /// The data as JSON (an AG-UI event).
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.data).unwrap_or_else(|e| panic!("an event's data is not JSON ({e}): {}", self.data))
    }

    /// The AG-UI event's `type`.
    pub(crate) fn kind(&self) -> String {
        self.json()["type"].as_str().unwrap_or_default().to_string()
    }

    /// The id as its three numbers: the log entry's commit, its place in it, the place of this
    /// event within the entry's events.
    pub(crate) fn position(&self) -> (u64, u32, u32) {
        let id = self.id.as_deref().unwrap_or_else(|| panic!("an event without an id: {}", self.data));
        let parts: Vec<&str> = id.split('-').collect();
        match parts[..] {
            [seq, idx, k] => (
                seq.parse().unwrap_or_else(|_| panic!("bad id {id}")),
                idx.parse().unwrap_or_else(|_| panic!("bad id {id}")),
                k.parse().unwrap_or_else(|_| panic!("bad id {id}")),
            ),
            _ => panic!("the id `{id}` is not SEQ-IDX-K"),
        }
    }
}

/// An open stream.
pub(crate) struct SseReader {
    response: reqwest::Response,
    /// Bytes read and not parsed yet (a line not ended yet).
    pending: Vec<u8>,
    /// The event being read.
    id: Option<String>,
    data: Vec<String>,
    ended: bool,
}

impl SseReader {
    /// Opens `url` with bearer `token`, from after `last_event_id` when given (the
    /// `Last-Event-ID` header a client coming back sends).
    pub(crate) async fn open(url: &str, token: &str, last_event_id: Option<&str>) -> SseReader {
        let mut request = reqwest::Client::new()
            .get(url)
            .header("authorization", format!("Bearer {token}"))
            .header("accept", "text/event-stream");
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id);
        }
        let response = request.send().await.unwrap_or_else(|e| panic!("GET {url}: {e}"));
        let status = response.status();
        if status != StatusCode::OK {
            panic!("GET {url}: {status} {}", response.text().await.unwrap_or_default());
        }
        let kind = response.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default();
        assert!(kind.starts_with("text/event-stream"), "GET {url}: content-type {kind}");
        SseReader { response, pending: Vec::new(), id: None, data: Vec::new(), ended: false }
    }

    /// The next event; `None` once the server ended the body.
    pub(crate) async fn next(&mut self) -> Option<SseEvent> {
        loop {
            while let Some(end) = self.pending.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.pending.drain(..=end).collect();
                let line = String::from_utf8(line).expect("the stream is UTF-8");
                if let Some(event) = self.line(line.trim_end_matches(['\n', '\r'])) {
                    return Some(event);
                }
            }
            if self.ended {
                return None;
            }
            match self.response.chunk().await {
                Ok(Some(bytes)) => self.pending.extend_from_slice(&bytes),
                Ok(None) | Err(_) => self.ended = true,
            }
        }
    }

    /// The next event within `limit`; panics when none comes or the stream ends.
    pub(crate) async fn next_within(&mut self, limit: Duration) -> SseEvent {
        let began = Instant::now();
        match tokio::time::timeout(limit, self.next()).await {
            Ok(Some(event)) => event,
            Ok(None) => panic!("the stream ended after {:?}", began.elapsed()),
            Err(_) => panic!("no event came within {limit:?}"),
        }
    }

    /// Takes one line; an event when it was the blank line ending one.
    fn line(&mut self, line: &str) -> Option<SseEvent> {
        if line.is_empty() {
            if self.data.is_empty() {
                self.id = None;
                return None;
            }
            return Some(SseEvent { id: self.id.take(), data: std::mem::take(&mut self.data).join("\n") });
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "id" => self.id = Some(value.to_string()),
            "data" => self.data.push(value.to_string()),
            _ => {}
        }
        None
    }
}
