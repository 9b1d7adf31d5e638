//! An OTLP/HTTP trace receiver on `127.0.0.1`: what a collector (Jaeger, the OpenTelemetry
//! Collector) does with the spans a process exports, reduced to keeping them for assertions.
//! [`OtlpReceiver::start_grpc`] serves OTLP over gRPC instead.
//!
//! It serves `POST /v1/traces` with `application/x-protobuf` bodies, decodes each
//! `ExportTraceServiceRequest` with the protocol's own generated types (`opentelemetry-proto`),
//! answers `200` with an empty `ExportTraceServiceResponse` (a full success), and keeps every span
//! with its resource's attributes. [`OtlpReceiver::discarding`] answers the same without decoding
//! or keeping anything (for the benchmark); both count the spans they are sent, off the wire
//! format ([`count_spans`]). The server runs on a thread of its own with its own
//! runtime, so sync tests, async tests and benchmarks use it alike; it stops when dropped.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{TraceService, TraceServiceServer};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use prost::Message;

/// One span as the receiver got it: ids in lowercase hex, as W3C `traceparent` writes them.
#[derive(Debug, Clone)]
pub struct ReceivedSpan {
    pub name: String,
    pub trace_id: String,
    pub span_id: String,
    /// `None` for a root span.
    pub parent_span_id: Option<String>,
    /// OTLP's `SpanKind` number (1 internal, 2 server, 3 client, ...).
    pub kind: i32,
    /// OTLP's status code (0 unset, 1 ok, 2 error) and message.
    pub status: (i32, String),
    pub attributes: Vec<(String, AnyValue)>,
    /// The attributes of the resource (the process) that exported the span.
    pub resource: Vec<(String, AnyValue)>,
    /// The span's events: name and attributes.
    pub events: Vec<(String, Vec<(String, AnyValue)>)>,
    /// The spans it links to: (trace id, span id).
    pub links: Vec<(String, String)>,
    /// The instrumentation scope's name.
    pub scope: String,
}

impl ReceivedSpan {
    /// The attribute `key`'s value; the last one when the key repeats (a value recorded on a
    /// span after it started is exported beside the first, later).
    pub fn attr(&self, key: &str) -> Option<&AnyValue> {
        self.attributes.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// The attribute `key` when it is a string.
    pub fn str_attr(&self, key: &str) -> Option<&str> {
        as_str(self.attr(key)?)
    }

    /// The attribute `key` when it is an integer.
    pub fn int_attr(&self, key: &str) -> Option<i64> {
        match self.attr(key)?.value.as_ref()? {
            any_value::Value::IntValue(i) => Some(*i),
            _ => None,
        }
    }

    /// The attribute `key` when it is a boolean.
    pub fn bool_attr(&self, key: &str) -> Option<bool> {
        match self.attr(key)?.value.as_ref()? {
            any_value::Value::BoolValue(b) => Some(*b),
            _ => None,
        }
    }

    /// The attribute `key` when it is an array of strings (`None` for any other shape, a plain
    /// string included).
    pub fn str_array_attr(&self, key: &str) -> Option<Vec<&str>> {
        match self.attr(key)?.value.as_ref()? {
            any_value::Value::ArrayValue(array) => array.values.iter().map(as_str).collect(),
            _ => None,
        }
    }

    /// The resource attribute `key` when it is a string.
    pub fn resource_str(&self, key: &str) -> Option<&str> {
        as_str(self.resource.iter().find(|(k, _)| k == key).map(|(_, v)| v)?)
    }

    /// Every text the span carries: its name, status message, attribute keys and values
    /// (strings, and the strings inside arrays, maps and bytes, recursively), its events' names
    /// and attributes. What a canary must never be part of.
    pub fn texts(&self) -> Vec<String> {
        let mut out = vec![self.name.clone(), self.status.1.clone()];
        let attrs = |list: &[(String, AnyValue)], out: &mut Vec<String>| {
            for (k, v) in list {
                out.push(k.clone());
                texts_of(v, out);
            }
        };
        attrs(&self.attributes, &mut out);
        for (name, list) in &self.events {
            out.push(name.clone());
            attrs(list, &mut out);
        }
        out
    }
}

fn as_str(value: &AnyValue) -> Option<&str> {
    match value.value.as_ref()? {
        any_value::Value::StringValue(s) => Some(s),
        _ => None,
    }
}

/// The strings inside `value`, recursively (numbers as written, bytes read as UTF-8 lossily).
fn texts_of(value: &AnyValue, out: &mut Vec<String>) {
    match &value.value {
        Some(any_value::Value::StringValue(s)) => out.push(s.clone()),
        Some(any_value::Value::BytesValue(b)) => out.push(String::from_utf8_lossy(b).into_owned()),
        Some(any_value::Value::ArrayValue(a)) => a.values.iter().for_each(|v| texts_of(v, out)),
        Some(any_value::Value::KvlistValue(kv)) => {
            for KeyValue { key, value, .. } in &kv.values {
                out.push(key.clone());
                if let Some(v) = value {
                    texts_of(v, out);
                }
            }
        }
        Some(any_value::Value::IntValue(i)) => out.push(i.to_string()),
        Some(any_value::Value::DoubleValue(d)) => out.push(d.to_string()),
        Some(any_value::Value::BoolValue(_)) | None => {}
        // A value kind this test's protocol version does not know: its debug form.
        #[allow(unreachable_patterns)]
        Some(other) => out.push(format!("{other:?}")),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn pairs(list: &[KeyValue]) -> Vec<(String, AnyValue)> {
    list.iter().map(|kv| (kv.key.clone(), kv.value.clone().unwrap_or_default())).collect()
}

/// The spans of one export request, each with its resource's attributes.
pub fn spans_of(request: ExportTraceServiceRequest) -> Vec<ReceivedSpan> {
    let mut out = Vec::new();
    for rs in request.resource_spans {
        let resource = rs.resource.map(|r| pairs(&r.attributes)).unwrap_or_default();
        for ss in rs.scope_spans {
            let scope = ss.scope.map(|s| s.name).unwrap_or_default();
            for span in ss.spans {
                let status = span.status.map(|s| (s.code, s.message)).unwrap_or_default();
                out.push(ReceivedSpan {
                    name: span.name,
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: (!span.parent_span_id.is_empty()).then(|| hex(&span.parent_span_id)),
                    kind: span.kind,
                    status,
                    attributes: pairs(&span.attributes),
                    resource: resource.clone(),
                    events: span.events.iter().map(|e| (e.name.clone(), pairs(&e.attributes))).collect(),
                    links: span.links.iter().map(|l| (hex(&l.trace_id), hex(&l.span_id))).collect(),
                    scope: scope.clone(),
                });
            }
        }
    }
    out
}

/// What the server shares with its handler.
#[derive(Default)]
struct Received {
    /// `None` when discarding.
    spans: Option<Mutex<Vec<ReceivedSpan>>>,
    requests: AtomicU64,
    bytes: AtomicU64,
    /// Spans in those requests.
    spans_sent: AtomicU64,
    /// Requests refused (wrong content type, undecodable body).
    refused: AtomicU64,
}

/// A running receiver; stops when dropped.
pub struct OtlpReceiver {
    addr: SocketAddr,
    received: Arc<Received>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl OtlpReceiver {
    /// A receiver that decodes and keeps every span.
    pub fn start() -> OtlpReceiver {
        OtlpReceiver::serve(Received { spans: Some(Mutex::new(Vec::new())), ..Received::default() })
    }

    /// A receiver that answers every export with success and keeps nothing (counts requests and
    /// bytes only): the cheapest collector, for measuring the exporting side.
    pub fn discarding() -> OtlpReceiver {
        OtlpReceiver::serve(Received::default())
    }

    /// [`discarding`](Self::discarding), on a listener bound already (so a caller can set the
    /// exporter's variables to its address before any thread is started).
    pub fn discarding_on(listener: std::net::TcpListener) -> OtlpReceiver {
        OtlpReceiver::serve_on(listener, Received::default(), Protocol::Http)
    }

    /// A receiver of OTLP over gRPC (the collector's `TraceService`, served by tonic from the
    /// protocol's generated code) that decodes and keeps every span.
    pub fn start_grpc() -> OtlpReceiver {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let received = Received { spans: Some(Mutex::new(Vec::new())), ..Received::default() };
        OtlpReceiver::serve_on(listener, received, Protocol::Grpc)
    }

    fn serve(received: Received) -> OtlpReceiver {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        OtlpReceiver::serve_on(listener, received, Protocol::Http)
    }

    fn serve_on(listener: std::net::TcpListener, received: Received, protocol: Protocol) -> OtlpReceiver {
        let received = Arc::new(received);
        listener.set_nonblocking(true).expect("a non-blocking listener");
        let addr = listener.local_addr().expect("the receiver's address");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let shared = Arc::clone(&received);
        let thread = std::thread::Builder::new()
            .name("otlp-receiver".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
                rt.block_on(async move {
                    let listener = tokio::net::TcpListener::from_std(listener).expect("a tokio listener");
                    let stopped = async move {
                        let _ = stopped.await;
                    };
                    match protocol {
                        Protocol::Http => {
                            let app = Router::new().route("/v1/traces", post(export)).with_state(shared);
                            axum::serve(listener, app)
                                .with_graceful_shutdown(stopped)
                                .await
                                .expect("the receiver serves");
                        }
                        Protocol::Grpc => tonic::transport::Server::builder()
                            .serve_with_incoming_shutdown(
                                TraceServiceServer::new(GrpcExport(shared)),
                                tonic::transport::server::TcpIncoming::from(listener),
                                stopped,
                            )
                            .await
                            .expect("the gRPC receiver serves"),
                    }
                });
            })
            .expect("start the receiver's thread");
        OtlpReceiver { addr, received, stop: Some(stop), thread: Some(thread) }
    }

    /// The base URL to give an exporter as `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The spans received so far, in the order they arrived.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        let spans = self.received.spans.as_ref().expect("a discarding receiver keeps no spans");
        spans.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Export requests answered with success so far.
    pub fn requests(&self) -> u64 {
        self.received.requests.load(Ordering::Relaxed)
    }

    /// Bytes of the bodies of those requests.
    pub fn bytes(&self) -> u64 {
        self.received.bytes.load(Ordering::Relaxed)
    }

    /// Spans in the requests answered with success so far (counted, decoded or not).
    pub fn span_count(&self) -> u64 {
        self.received.spans_sent.load(Ordering::Relaxed)
    }

    /// Export requests refused (not protobuf, or not an `ExportTraceServiceRequest`).
    pub fn refused(&self) -> u64 {
        self.received.refused.load(Ordering::Relaxed)
    }

    /// The spans received once `done` holds for them, polled until `limit` (then the test fails,
    /// showing the span names it has).
    pub fn wait_for(&self, limit: Duration, done: impl Fn(&[ReceivedSpan]) -> bool) -> Vec<ReceivedSpan> {
        let began = Instant::now();
        loop {
            let spans = self.spans();
            if done(&spans) {
                return spans;
            }
            if began.elapsed() > limit {
                let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
                panic!("the receiver did not get the spans awaited within {limit:?}; it has: {names:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Which OTLP transport a receiver serves.
#[derive(Clone, Copy)]
enum Protocol {
    /// `POST /v1/traces` with a protobuf body.
    Http,
    /// The `opentelemetry.proto.collector.trace.v1.TraceService/Export` gRPC method.
    Grpc,
}

/// The gRPC `TraceService`: keeps what it is sent, answers a full success.
struct GrpcExport(Arc<Received>);

#[tonic::async_trait]
impl TraceService for GrpcExport {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let request = request.into_inner();
        let bytes = request.encoded_len() as u64;
        let spans = spans_of(request);
        self.0.spans_sent.fetch_add(spans.len() as u64, Ordering::Relaxed);
        if let Some(kept) = &self.0.spans {
            kept.lock().unwrap_or_else(|e| e.into_inner()).extend(spans);
        }
        self.0.requests.fetch_add(1, Ordering::Relaxed);
        self.0.bytes.fetch_add(bytes, Ordering::Relaxed);
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// `POST /v1/traces`.
async fn export(State(received): State<Arc<Received>>, headers: HeaderMap, body: Bytes) -> (StatusCode, Vec<u8>) {
    let protobuf =
        headers.get(header::CONTENT_TYPE).is_some_and(|v| v.as_bytes().starts_with(b"application/x-protobuf"));
    if !protobuf {
        received.refused.fetch_add(1, Ordering::Relaxed);
        return (StatusCode::UNSUPPORTED_MEDIA_TYPE, Vec::new());
    }
    let Some(count) = count_spans(&body) else {
        received.refused.fetch_add(1, Ordering::Relaxed);
        return (StatusCode::BAD_REQUEST, Vec::new());
    };
    if let Some(spans) = &received.spans {
        let Ok(request) = ExportTraceServiceRequest::decode(body.as_ref()) else {
            received.refused.fetch_add(1, Ordering::Relaxed);
            return (StatusCode::BAD_REQUEST, Vec::new());
        };
        spans.lock().unwrap_or_else(|e| e.into_inner()).extend(spans_of(request));
    }
    received.spans_sent.fetch_add(count, Ordering::Relaxed);
    received.requests.fetch_add(1, Ordering::Relaxed);
    received.bytes.fetch_add(body.len() as u64, Ordering::Relaxed);
    (StatusCode::OK, ExportTraceServiceResponse::default().encode_to_vec())
}

/// The number of spans in an encoded `ExportTraceServiceRequest`, read off the protobuf wire
/// format without decoding the spans: its `resource_spans` (field 1), their `scope_spans`
/// (field 2), their `spans` (field 2). `None` when the bytes are not well-formed protobuf.
pub fn count_spans(body: &[u8]) -> Option<u64> {
    let mut n = 0;
    for resource in delimited(body, 1)? {
        for scope in delimited(resource, 2)? {
            n += delimited(scope, 2)?.len() as u64;
        }
    }
    Some(n)
}

/// The length-delimited fields numbered `number` of one encoded message (the others skipped).
fn delimited(mut buf: &[u8], number: u64) -> Option<Vec<&[u8]>> {
    let mut out = Vec::new();
    while !buf.is_empty() {
        let key = varint(&mut buf)?;
        match key & 7 {
            0 => {
                varint(&mut buf)?;
            }
            1 => buf = buf.get(8..)?,
            2 => {
                let len = usize::try_from(varint(&mut buf)?).ok()?;
                if key >> 3 == number {
                    out.push(buf.get(..len)?);
                }
                buf = buf.get(len..)?;
            }
            5 => buf = buf.get(4..)?,
            _ => return None,
        }
    }
    Some(out)
}

/// Reads one base-128 varint off the front of `buf`.
fn varint(buf: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = buf.split_first()?;
        *buf = rest;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

/// The spans named `name`.
pub fn named<'a>(spans: &'a [ReceivedSpan], name: &str) -> Vec<&'a ReceivedSpan> {
    spans.iter().filter(|s| s.name == name).collect()
}

/// The spans whose attribute `key` is the string `value`.
pub fn with_attr<'a>(spans: &'a [ReceivedSpan], key: &str, value: &str) -> Vec<&'a ReceivedSpan> {
    spans.iter().filter(|s| s.str_attr(key) == Some(value)).collect()
}

/// The span with id `span_id`.
pub fn by_id<'a>(spans: &'a [ReceivedSpan], span_id: &str) -> Option<&'a ReceivedSpan> {
    spans.iter().find(|s| s.span_id == span_id)
}

/// The parent of `span` among `spans`.
pub fn parent_of<'a>(spans: &'a [ReceivedSpan], span: &ReceivedSpan) -> Option<&'a ReceivedSpan> {
    by_id(spans, span.parent_span_id.as_deref()?)
}
