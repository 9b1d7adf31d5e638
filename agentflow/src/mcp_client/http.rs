//! The streamable HTTP side of the MCP client: rmcp's reqwest client with the transport's
//! headers, no silent session recovery, and requests the server refuses (an HTTP 4xx, a stale
//! or expired session) reported as refused rather than left waiting for an answer.

use std::collections::HashMap;
use std::sync::Arc;

use futures_util::stream::BoxStream;
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, JsonRpcMessage};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpClientTransportConfig, StreamableHttpError,
    StreamableHttpPostResponse, StreamableHttpResponseLimits,
};
use sse_stream::Sse;

/// What the client puts before the server's message when it turns a refusal the server
/// answered without the request's id into an error (recognised by [`refused`]).
const REFUSED: &str = "the server refused the request: ";

/// The HTTP transport to `url`, sending `headers` with every request. Session recovery is
/// off: a server whose session expired is reconnected by the client, with the drift check.
pub(crate) fn transport(
    url: &str,
    headers: &[(String, String)],
) -> Result<StreamableHttpClientTransport<RefusalAware>, String> {
    let mut custom = HashMap::new();
    let mut auth = None;
    for (name, value) in headers {
        if name.eq_ignore_ascii_case("authorization")
            && let Some(token) = value.strip_prefix("Bearer ")
        {
            // rmcp sends its own `Authorization: Bearer ..` from this field.
            auth = Some(token.to_string());
            continue;
        }
        let header =
            HeaderName::from_bytes(name.as_bytes()).map_err(|_| format!("`{name}` is not a valid HTTP header name"))?;
        let value = HeaderValue::from_str(value)
            .map_err(|_| format!("the value of the header `{name}` is not a valid HTTP header value"))?;
        custom.insert(header, value);
    }
    let mut config =
        StreamableHttpClientTransportConfig::with_uri(url).reinit_on_expired_session(false).custom_headers(custom);
    if let Some(token) = auth {
        config = config.auth_header(token);
    }
    Ok(StreamableHttpClientTransport::with_client(RefusalAware(reqwest::Client::new()), config))
}

/// rmcp's reqwest client, except that a JSON-RPC error the server answers a request with but
/// without that request's id (what a server sends with an HTTP 400 for a session it does not
/// know) fails the POST instead of being dropped as an answer to nothing.
#[derive(Clone)]
pub(crate) struct RefusalAware(reqwest::Client);

type Posted = Result<StreamableHttpPostResponse, StreamableHttpError<reqwest::Error>>;

impl StreamableHttpClient for RefusalAware {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Posted {
        let id = request_id(&message);
        let posted = self.0.post_message(uri, message, session_id, auth_header, custom_headers).await;
        check(id, posted)
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Posted {
        let id = request_id(&message);
        let posted = self
            .0
            .post_message_with_max_sse_event_size(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await;
        check(id, posted)
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Posted {
        let id = request_id(&message);
        let posted = self
            .0
            .post_message_with_response_limits(uri, message, session_id, auth_header, custom_headers, limits)
            .await;
        check(id, posted)
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<reqwest::Error>> {
        self.0.delete_session(uri, session_id, auth_header, custom_headers).await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, StreamableHttpError<reqwest::Error>> {
        self.0.get_stream(uri, session_id, last_event_id, auth_header, custom_headers).await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, StreamableHttpError<reqwest::Error>> {
        self.0
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
    }
}

/// The id of a request (a notification or response has none).
fn request_id(message: &ClientJsonRpcMessage) -> Option<rmcp::model::RequestId> {
    match message {
        JsonRpcMessage::Request(request) => Some(request.id.clone()),
        _ => None,
    }
}

/// A JSON-RPC error answering request `id` under another id (or none): the server refused
/// the request without reading it, so the POST fails.
fn check(id: Option<rmcp::model::RequestId>, posted: Posted) -> Posted {
    match (&id, &posted) {
        (Some(id), Ok(StreamableHttpPostResponse::Json(JsonRpcMessage::Error(error), _)))
            if error.id.as_ref() != Some(id) =>
        {
            Err(StreamableHttpError::UnexpectedServerResponse(
                format!("{REFUSED}{} (JSON-RPC error {})", error.error.message, error.error.code.0).into(),
            ))
        }
        _ => posted,
    }
}

/// The server's reason when it refused a request without running it: an HTTP 4xx answer
/// (a session it does not know or that expired, a missing or wrong credential, too many
/// requests). `None` for anything else.
pub(crate) fn refused(e: &rmcp::transport::DynamicTransportError) -> Option<String> {
    let error = e.error.downcast_ref::<StreamableHttpError<reqwest::Error>>()?;
    match error {
        StreamableHttpError::UnexpectedServerResponse(text) => {
            let text = text.as_ref();
            let refused = text.strip_prefix(REFUSED).map(str::to_string);
            refused.or_else(|| text.starts_with("HTTP 4").then(|| text.to_string()))
        }
        StreamableHttpError::SessionExpired => Some("HTTP 404: the session expired".to_string()),
        StreamableHttpError::HttpStatus(status) if (400..500).contains(&status.status) => {
            Some(format!("HTTP {}", status.status))
        }
        StreamableHttpError::AuthRequired(_) => Some("HTTP 401: authorization required".to_string()),
        StreamableHttpError::InsufficientScope(_) => Some("HTTP 403: insufficient scope".to_string()),
        _ => None,
    }
}

/// What the server answered a request with when it could not be read (not JSON-RPC, a body
/// over rmcp's 16 MiB bound): the request was sent and the server acted on it or not.
pub(crate) fn unreadable(e: &rmcp::transport::DynamicTransportError) -> Option<String> {
    match e.error.downcast_ref::<StreamableHttpError<reqwest::Error>>()? {
        StreamableHttpError::UnexpectedServerResponse(text) => Some(text.to_string()),
        error @ (StreamableHttpError::ResponseBodyTooLarge { .. }
        | StreamableHttpError::Deserialize(_)
        | StreamableHttpError::UnexpectedContentType(_)) => Some(error.to_string()),
        _ => None,
    }
}

/// Whether a send failed before anything reached the server: the HTTP connection could not
/// be made (refused, no route, a connect timeout). A pipe to a child that broke mid-write is
/// not this: part of the call may have been read.
pub(crate) fn never_reached(e: &rmcp::transport::DynamicTransportError) -> bool {
    matches!(
        e.error.downcast_ref::<StreamableHttpError<reqwest::Error>>(),
        Some(StreamableHttpError::Client(client)) if client.is_connect()
    )
}

/// An error's cause for people: the HTTP client's error with its own causes (e.g. `error
/// sending request for url (..): client error (Connect): tcp connect error: Connection refused`)
/// when there is one, else the transport's error; never the transport's type names.
pub(crate) fn cause(e: &(dyn std::error::Error + 'static)) -> String {
    use rmcp::service::ClientInitializeError;
    if let Some(ClientInitializeError::TransportError { error, .. }) = e.downcast_ref::<ClientInitializeError>() {
        return transport_cause(error);
    }
    if let Some(rmcp::ServiceError::TransportSend(error)) = e.downcast_ref::<rmcp::ServiceError>() {
        return transport_cause(error);
    }
    e.to_string()
}

/// A transport's error without its type name: the HTTP client's error and its causes.
fn transport_cause(e: &rmcp::transport::DynamicTransportError) -> String {
    let Some(StreamableHttpError::Client(client)) = e.error.downcast_ref::<StreamableHttpError<reqwest::Error>>()
    else {
        return e.error.to_string();
    };
    let mut text = client.to_string();
    let mut next = std::error::Error::source(client);
    while let Some(err) = next {
        text.push_str(": ");
        text.push_str(&err.to_string());
        next = err.source();
    }
    text
}
