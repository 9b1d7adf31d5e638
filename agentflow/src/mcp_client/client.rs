//! The connection to one MCP server (rmcp's client), checked against its snapshot.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rmcp::ServiceError;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotification, CancelledNotificationParam, ClientNotification,
    ClientRequest, ErrorCode, RequestId, ServerResult,
};
use rmcp::service::{PeerRequestOptions, RoleClient, RunningService};
use serde_json::{Map, Value};

use super::transport::{self, Session};
use super::{McpError, McpTransport, SNAPSHOT_FORMAT, Snapshot};
use crate::tool::ToolError;

/// A live connection to one MCP server whose tools matched its snapshot. Cheap to clone; hand
/// it to [`App::mcp`](crate::App::mcp). The connection (and a child process started for it)
/// closes when the last clone is dropped, or at [`close`](Self::close).
///
/// A connection that closed (the child process died, the HTTP server restarted or refused the
/// session) is opened again by the next call: the child is started again or a new HTTP session
/// opened, the handshake made and the tools compared with the snapshot again, before that call
/// is sent. At most one attempt per call, and at most one per second.
#[derive(Clone)]
pub struct McpClient {
    inner: Arc<Inner>,
    call_timeout: Duration,
}

struct Inner {
    server: String,
    snapshot: Snapshot,
    transport: McpTransport,
    new_tools: Vec<String>,
    /// The connection calls go to; replaced by a reconnect.
    conn: std::sync::Mutex<Arc<Conn>>,
    /// When a reconnect was last tried; held while one runs, so only one runs at a time.
    last_reconnect: tokio::sync::Mutex<Option<Instant>>,
    /// Set by `close`: no call is sent and no reconnect tried after it.
    shut: AtomicBool,
}

/// One opened session with the server.
struct Conn {
    peer: rmcp::Peer<RoleClient>,
    /// rmcp's running client; taken out by `close`. Dropping it ends the session (and kills
    /// the child process).
    running: std::sync::Mutex<Option<RunningService<RoleClient, rmcp::model::ClientConfig>>>,
    pid: Option<u32>,
    /// Set once the connection is known closed: later calls reconnect first.
    closed: AtomicBool,
}

impl Conn {
    fn new(session: Session) -> Arc<Conn> {
        let Session { running, pid } = session;
        let peer = running.peer().clone();
        Arc::new(Conn { peer, running: std::sync::Mutex::new(Some(running)), pid, closed: AtomicBool::new(false) })
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst) || self.peer.is_transport_closed()
    }

    fn take_running(&self) -> Option<RunningService<RoleClient, rmcp::model::ClientConfig>> {
        self.running.lock().map_or(None, |mut r| r.take())
    }
}

impl std::fmt::Debug for McpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpClient")
            .field("server", &self.inner.server)
            .field("transport", &self.inner.transport)
            .finish_non_exhaustive()
    }
}

/// How long `close` waits for the session (and a child process) to end.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);

/// The least time between two reconnect attempts.
const RECONNECT_BACKOFF: Duration = Duration::from_secs(1);

/// Opens a session, lists its tools and compares them with `snapshot`: the session and the
/// live tools the snapshot does not have, or why not (the session closed).
async fn open_checked(
    server: &str,
    snapshot: &Snapshot,
    transport: &McpTransport,
) -> Result<(Session, Vec<String>), McpError> {
    let session = transport::open(server, transport).await?;
    let live = match transport::list_tools(server, &session).await {
        Ok(live) => live,
        Err(e) => {
            end(session.running).await;
            return Err(e);
        }
    };
    let checked = super::compare::check(server, snapshot, &live);
    match checked {
        Ok(new_tools) => Ok((session, new_tools)),
        Err(e) => {
            end(session.running).await;
            Err(e)
        }
    }
}

impl McpClient {
    /// How long a call waits for its answer by default: 5 minutes. A call with no answer by
    /// then is [`ToolError::OutcomeUnknown`] (it was sent; whether it acted is unknown).
    pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(300);

    /// Starts or reaches the server, lists its tools and compares them with `snapshot` (the
    /// committed snapshot's bytes). The `connect` that `mcp_tools!` generates calls this.
    ///
    /// Starting, the handshake and the listing are bounded by 30 seconds
    /// ([`McpError::Connect`]). A tool of the snapshot the server changed or no longer offers
    /// is [`McpError::Drift`], naming each tool and the JSON pointer of each change; a live
    /// tool the snapshot does not have is ignored (see [`new_tools`](Self::new_tools)). A live
    /// list that names a tool twice, or whose pages do not end, is [`McpError::Protocol`].
    pub async fn connect(server: &str, snapshot: &[u8], transport: McpTransport) -> Result<McpClient, McpError> {
        let snapshot = Snapshot::parse(snapshot)?;
        let (session, new_tools) = open_checked(server, &snapshot, &transport).await?;
        if !new_tools.is_empty() {
            tracing::info!(
                server,
                new_tools = ?new_tools,
                "MCP server offers tools its snapshot does not have; they are ignored (take the snapshot again to use them)"
            );
        }
        Ok(McpClient {
            inner: Arc::new(Inner {
                server: server.to_string(),
                snapshot,
                transport,
                new_tools,
                conn: std::sync::Mutex::new(Conn::new(session)),
                last_reconnect: tokio::sync::Mutex::new(None),
                shut: AtomicBool::new(false),
            }),
            call_timeout: Self::DEFAULT_CALL_TIMEOUT,
        })
    }

    /// This client waiting `timeout` for each call's answer (default
    /// [`DEFAULT_CALL_TIMEOUT`](Self::DEFAULT_CALL_TIMEOUT)); a call with no answer by then is
    /// [`ToolError::OutcomeUnknown`]. Over streamable HTTP a server that dies mid-call is
    /// noticed only then (the client waits to resume the answer's stream); over stdio at once.
    #[must_use]
    pub fn with_call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }

    /// The server's name in this program.
    pub fn server(&self) -> &str {
        &self.inner.server
    }

    /// The snapshot the live tools matched.
    pub fn snapshot(&self) -> &Snapshot {
        &self.inner.snapshot
    }

    /// Live tools the snapshot does not have (at `connect`): ignored (no program was typed
    /// against them).
    pub fn new_tools(&self) -> &[String] {
        &self.inner.new_tools
    }

    /// The process id of the server's current child process (stdio). For tests that stop the
    /// server from outside.
    #[doc(hidden)]
    pub fn child_pid(&self) -> Option<u32> {
        self.current().pid
    }

    fn current(&self) -> Arc<Conn> {
        match self.inner.conn.lock() {
            Ok(conn) => conn.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Closes the connection, for this client and every clone of it, and waits (up to 10
    /// seconds) for the session to end: a child process is asked to exit (its standard input
    /// closed, then `SIGTERM`), then killed. Calls after it are [`ToolError::Transient`] and
    /// do not reconnect.
    pub async fn close(self) {
        self.inner.shut.store(true, Ordering::SeqCst);
        let conn = self.current();
        conn.closed.store(true, Ordering::SeqCst);
        if let Some(running) = conn.take_running() {
            end(running).await;
        }
    }

    /// The open connection to send a call of `tool` on: the current one, or a new one when it
    /// closed (checked against the snapshot); or why the call is not sent.
    async fn connection(&self, tool: &str) -> Result<Arc<Conn>, ToolError> {
        let server = &self.inner.server;
        let conn = self.current();
        if !conn.is_closed() {
            return Ok(conn);
        }
        if self.inner.shut.load(Ordering::SeqCst) {
            return Err(ToolError::Transient(format!(
                "MCP server `{server}` is not running: its connection was closed, so the call of `{tool}` was not sent"
            )));
        }
        let mut last = self.inner.last_reconnect.lock().await;
        let now = self.current();
        if !Arc::ptr_eq(&now, &conn) && !now.is_closed() {
            return Ok(now); // another call reconnected meanwhile
        }
        if let Some(at) = *last
            && at.elapsed() < RECONNECT_BACKOFF
        {
            return Err(ToolError::Transient(format!(
                "MCP server `{server}` is not running: its connection closed and was tried again less than {} s ago, \
                 so the call of `{tool}` was not sent",
                RECONNECT_BACKOFF.as_secs()
            )));
        }
        *last = Some(Instant::now());
        // On a task of its own, so outside the calling tool's span: the connection (rmcp's spans
        // and events for its whole life) belongs to no one call's trace. Dropping the call
        // stops the attempt.
        let inner = Arc::clone(&self.inner);
        let opening = tokio::spawn(async move { open_checked(&inner.server, &inner.snapshot, &inner.transport).await });
        let _stop = AbortOnDrop(opening.abort_handle());
        let (session, new_tools) = match opening.await {
            Ok(Ok(opened)) => opened,
            Ok(Err(e @ McpError::Drift { .. })) => {
                return Err(ToolError::Fatal(format!(
                    "{e}\n(found when connecting again; the call of `{tool}` was not sent)"
                )));
            }
            Ok(Err(e)) => {
                return Err(ToolError::Transient(format!(
                    "MCP server `{server}` is not running: its connection closed and connecting again failed, so the \
                     call of `{tool}` was not sent: {e}"
                )));
            }
            Err(e) => {
                return Err(ToolError::Transient(format!(
                    "MCP server `{server}`: connecting again stopped ({e}), so the call of `{tool}` was not sent"
                )));
            }
        };
        tracing::info!(parent: None, server, new_tools = ?new_tools, "MCP server connected again; its tools match the snapshot");
        let fresh = Conn::new(session);
        let old = match self.inner.conn.lock() {
            Ok(mut slot) => std::mem::replace(&mut *slot, fresh.clone()),
            Err(poisoned) => std::mem::replace(&mut *poisoned.into_inner(), fresh.clone()),
        };
        if let Some(running) = old.take_running() {
            tokio::spawn(end(running));
        }
        if self.inner.shut.load(Ordering::SeqCst) {
            // `close` ran while this reconnected: end the new session too.
            fresh.closed.store(true, Ordering::SeqCst);
            if let Some(running) = fresh.take_running() {
                end(running).await;
            }
            return Err(ToolError::Transient(format!(
                "MCP server `{server}`: the client was closed, so the call of `{tool}` was not sent"
            )));
        }
        Ok(fresh)
    }

    /// Calls `tool` with `args` directly, outside any run: no gateway, no journal, no approval,
    /// no policy. For tests and tools of your own; a graph's nodes call MCP tools through
    /// `cx.run_tool` like any tool.
    ///
    /// - the server's result: its shape is under *Results* below;
    /// - a result with `isError: true`, or a JSON-RPC error for bad arguments or an unknown
    ///   tool: [`ToolError::Correctable`] with the server's message;
    /// - another JSON-RPC error, or an answer that is not a tool result:
    ///   [`ToolError::Fatal`];
    /// - the connection was known closed, or (HTTP) the server refused the connection, so the
    ///   call was not sent: [`ToolError::Transient`];
    /// - the call was sent and no answer came (the server died or closed the connection, or
    ///   the call timeout passed): [`ToolError::OutcomeUnknown`];
    /// - a result nested too deep or too large to keep: [`ToolError::Unrecorded`].
    ///
    /// # Results
    ///
    /// `structuredContent` when present; else the texts of the content joined with `"\n"` as
    /// one JSON string; when there is other content (images, audio, resources, links), an object
    /// `{"text": .., "content": [..]}` whose `content` references each such block (its `type`,
    /// `mimeType`, `uri`, `name` and size in `bytes`) without its payload.
    pub async fn call_tool(&self, tool: &str, args: Value) -> Result<Value, ToolError> {
        let server = &self.inner.server;
        let arguments = match args {
            Value::Object(map) => map,
            Value::Null => Map::new(),
            other => {
                return Err(ToolError::Correctable(format!(
                    "the arguments of the MCP tool `{tool}` must be a JSON object, not `{other}`"
                )));
            }
        };
        let conn = self.connection(tool).await?;
        let peer = &conn.peer;
        let not_sent = || {
            ToolError::Transient(format!(
                "MCP server `{server}` is not running: its connection is closed, so the call of `{tool}` was not sent \
                 (the next call connects again)"
            ))
        };
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(
            CallToolRequestParams::new(tool.to_string()).with_arguments(arguments),
        ));
        let handle = match peer
            .send_request_with_option(request, PeerRequestOptions::with_timeout(self.call_timeout))
            .await
        {
            Ok(handle) => handle,
            Err(ServiceError::TransportClosed) => {
                conn.closed.store(true, Ordering::SeqCst);
                return Err(not_sent());
            }
            Err(e) => {
                return Err(ToolError::Fatal(format!("MCP server `{server}`: the call of `{tool}` was refused: {e}")));
            }
        };
        let mut guard = CancelOnDrop { peer: peer.clone(), id: Some(handle.id.clone()) };
        let answer = handle.await_response().await;
        guard.id = None;
        match answer {
            Ok(ServerResult::InputRequiredResult(_)) => Err(ToolError::Fatal(format!(
                "the MCP tool `{tool}` of `{server}` asked this client for input (elicitation or sampling), which \
                 agentflow does not give: leave the tool out of the snapshot"
            ))),
            Ok(ServerResult::CreateTaskResult(_)) => Err(ToolError::Fatal(format!(
                "the MCP tool `{tool}` of `{server}` answered with a task, which agentflow does not follow: leave the \
                 tool out of the snapshot"
            ))),
            Ok(result) => {
                let result = serde_json::to_value(&result).map_err(|e| {
                    ToolError::Fatal(format!("MCP server `{server}`: the answer of `{tool}` does not encode: {e}"))
                })?;
                super::result::to_value(tool, &result)
            }
            Err(ServiceError::McpError(e))
                if e.code == ErrorCode::INVALID_PARAMS || e.code == ErrorCode::METHOD_NOT_FOUND =>
            {
                Err(ToolError::Correctable(format!("`{tool}`: {}", e.message)))
            }
            Err(ServiceError::McpError(e)) => Err(ToolError::Fatal(format!(
                "MCP server `{server}` failed the call of `{tool}`: {} (JSON-RPC error {})",
                e.message, e.code.0
            ))),
            Err(ServiceError::UnexpectedResponse) => Err(ToolError::Fatal(format!(
                "MCP server `{server}` answered the call of `{tool}` with something other than a tool result"
            ))),
            Err(ServiceError::Timeout { timeout }) => Err(ToolError::OutcomeUnknown(format!(
                "MCP server `{server}` gave no answer to the call of `{tool}` within {} s: the call was sent, and \
                 whether it acted is unknown",
                timeout.as_secs()
            ))),
            Err(ServiceError::TransportSend(e)) if super::http::never_reached(&e) => {
                Err(ToolError::Transient(format!(
                    "MCP server `{server}` could not be reached, so the call of `{tool}` was not sent: {}",
                    super::http::cause(&e)
                )))
            }
            Err(ServiceError::TransportSend(e)) if super::http::refused(&e).is_some() => {
                let why = super::http::refused(&e).unwrap_or_default();
                // The session is gone (a restarted server, an expired session) or the request was
                // refused: the next call opens a new session, with the drift check.
                conn.closed.store(true, Ordering::SeqCst);
                Err(ToolError::Transient(format!(
                    "MCP server `{server}` refused the call of `{tool}`, so it did not run: {why} (the next call \
                     connects again)"
                )))
            }
            Err(ServiceError::TransportSend(e)) if super::http::unreadable(&e).is_some() => {
                let what = super::http::unreadable(&e).unwrap_or_default();
                Err(ToolError::OutcomeUnknown(format!(
                    "MCP server `{server}` answered the call of `{tool}` with something that could not be read \
                     ({what}): the call was sent, and whether it acted is unknown"
                )))
            }
            Err(ServiceError::TransportClosed) => {
                conn.closed.store(true, Ordering::SeqCst);
                Err(ToolError::OutcomeUnknown(format!(
                    "MCP server `{server}` closed the connection (it stopped or died) during the call of `{tool}`: the \
                     call was sent, and whether it acted is unknown"
                )))
            }
            Err(e) => Err(ToolError::OutcomeUnknown(format!(
                "MCP server `{server}`: the call of `{tool}` was sent and got no answer ({}); whether it acted is unknown",
                super::http::cause(&e)
            ))),
        }
    }
}

/// Tells the server a call's caller stopped waiting (a node timeout dropped the call), so it
/// does not keep working on a result nobody reads.
struct CancelOnDrop {
    peer: rmcp::Peer<RoleClient>,
    id: Option<RequestId>,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else { return };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let peer = self.peer.clone();
        runtime.spawn(async move {
            let param = CancelledNotificationParam::new(Some(id), Some("the caller stopped waiting".to_string()));
            let note = ClientNotification::CancelledNotification(CancelledNotification::new(param));
            let _ = peer.send_notification(note).await;
        });
    }
}

/// Ends a session and waits (bounded) until it has: the child process exits or is killed.
async fn end(running: RunningService<RoleClient, rmcp::model::ClientConfig>) {
    let _ = tokio::time::timeout(CLOSE_TIMEOUT, running.cancel()).await;
}

/// The live tool list of the server at `transport`, as a snapshot to commit (what
/// `agentflow mcp snapshot` prints). The connection is closed before it returns.
pub async fn snapshot_of(transport: McpTransport) -> Result<Snapshot, McpError> {
    let label = transport.short_name().to_string();
    let session = transport::open(&label, &transport).await?;
    let listed =
        transport::list_tools(&label, &session).await.and_then(|tools| match super::compare::duplicate(&tools) {
            Some(name) => Err(McpError::Protocol {
                server: label.clone(),
                why: format!("its tool list names the tool `{name}` more than once; fix the server"),
            }),
            None => Ok(tools),
        });
    let server = transport::server_info(&session);
    end(session.running).await;
    Ok(Snapshot { format: SNAPSHOT_FORMAT, server, tools: listed? })
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
