//! How to reach an MCP server: a child process over stdio, or streamable HTTP; and opening the
//! MCP session on either (rmcp's client, the `initialize` handshake).

use std::process::Stdio;
use std::time::Duration;

use rmcp::model::{ClientCapabilities, ClientConfig, Implementation, ProtocolVersion};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{ServiceError, ServiceExt};

use super::McpError;

/// Where an MCP server is. Its `Debug` and `Display` name environment variables and HTTP
/// headers but never print their values (they often hold secrets).
#[derive(Clone)]
#[non_exhaustive]
pub enum McpTransport {
    /// A child process speaking MCP on its standard input and output.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Variables set for it (the rest of the environment is not passed).
        env: Vec<(String, String)>,
    },
    /// A server speaking MCP's streamable HTTP at this URL.
    Http {
        /// The endpoint, e.g. `http://127.0.0.1:3001/mcp`.
        url: String,
        /// Headers sent with every request (e.g. `Authorization`).
        headers: Vec<(String, String)>,
    },
}

impl McpTransport {
    /// A child process, started by `connect`. Its environment holds `PATH` and the variables
    /// given with [`env`](Self::env), nothing else; its standard error is this process's.
    pub fn stdio(command: impl Into<String>) -> Self {
        McpTransport::Stdio { command: command.into(), args: Vec::new(), env: Vec::new() }
    }

    /// A server at `url` (streamable HTTP).
    pub fn http(url: impl Into<String>) -> Self {
        McpTransport::Http { url: url.into(), headers: Vec::new() }
    }

    /// Adds a header sent with every HTTP request, e.g. `("X-Api-Key", key)` (nothing for
    /// stdio). A name or value HTTP does not allow fails at `connect`.
    #[must_use]
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        if let McpTransport::Http { headers, .. } = &mut self {
            headers.push((name.into(), value.into()));
        }
        self
    }

    /// Sends `Authorization: Bearer <token>` with every HTTP request (nothing for stdio).
    #[must_use]
    pub fn bearer(self, token: impl AsRef<str>) -> Self {
        let value = format!("Bearer {}", token.as_ref());
        self.header("Authorization", value)
    }

    /// Adds an argument to a child process's command line (nothing for HTTP).
    #[must_use]
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        if let McpTransport::Stdio { args, .. } = &mut self {
            args.push(arg.into());
        }
        self
    }

    /// Sets a variable for a child process (nothing for HTTP).
    #[must_use]
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        if let McpTransport::Stdio { env, .. } = &mut self {
            env.push((key.into(), value.into()));
        }
        self
    }
}

impl std::fmt::Display for McpTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            McpTransport::Stdio { command, args, .. } => {
                write!(f, "`{command}")?;
                for arg in args {
                    write!(f, " {arg}")?;
                }
                write!(f, "` (stdio)")
            }
            McpTransport::Http { url, .. } => write!(f, "{url} (streamable HTTP)"),
        }
    }
}

impl std::fmt::Debug for McpTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let keys = |pairs: &[(String, String)]| pairs.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>();
        match self {
            McpTransport::Stdio { command, args, env } => f
                .debug_struct("Stdio")
                .field("command", command)
                .field("args", args)
                .field("env_keys", &keys(env))
                .finish(),
            McpTransport::Http { url, headers } => {
                f.debug_struct("Http").field("url", url).field("header_names", &keys(headers)).finish()
            }
        }
    }
}

impl McpTransport {
    /// What names the server in errors when the program gives it no name: the program, or the URL.
    pub(crate) fn short_name(&self) -> &str {
        match self {
            McpTransport::Stdio { command, .. } => command,
            McpTransport::Http { url, .. } => url,
        }
    }
}

/// The bound on starting or reaching a server and on its handshake, and on listing its tools.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// An open MCP session: rmcp's running client, and the child's process id for stdio.
pub(crate) struct Session {
    pub(crate) running: RunningService<RoleClient, ClientConfig>,
    pub(crate) pid: Option<u32>,
}

/// What this client tells servers in `initialize`: its name and version, no capabilities
/// (no sampling, roots or elicitation), the newest protocol version with a handshake.
fn client_config() -> ClientConfig {
    let mut config =
        ClientConfig::new(ClientCapabilities::default(), Implementation::new("agentflow", env!("CARGO_PKG_VERSION")));
    config.protocol_version = ProtocolVersion::LATEST_WITH_INITIALIZE;
    config
}

/// Starts or reaches the server at `transport` and completes MCP's handshake, within
/// [`CONNECT_TIMEOUT`]. `server` names it in errors.
pub(crate) async fn open(server: &str, transport: &McpTransport) -> Result<Session, McpError> {
    let connect = |why: String| McpError::Connect { server: server.to_string(), why };
    let (pid, opened) = match transport {
        McpTransport::Stdio { command, args, env } => {
            let mut cmd = tokio::process::Command::new(command);
            cmd.args(args).env_clear().kill_on_drop(true);
            if let Some(path) = std::env::var_os("PATH") {
                cmd.env("PATH", path);
            }
            cmd.envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
            // The child's standard error goes to ours: no pipe that could fill and stall it.
            let (child, _) = TokioChildProcess::builder(cmd).stderr(Stdio::inherit()).spawn().map_err(|e| {
                connect(format!("{transport} could not be started: {e} (check the command and that it is installed)"))
            })?;
            let pid = child.id();
            (pid, tokio::time::timeout(CONNECT_TIMEOUT, client_config().serve(child)).await)
        }
        McpTransport::Http { url, headers } => {
            let http = super::http::transport(url, headers).map_err(|why| connect(format!("{transport}: {why}")))?;
            (None, tokio::time::timeout(CONNECT_TIMEOUT, client_config().serve(http)).await)
        }
    };
    match opened {
        Ok(Ok(running)) => Ok(Session { running, pid }),
        Ok(Err(e)) => Err(connect(format!(
            "{transport} did not complete MCP's handshake: {} (check that it is an MCP server and that it runs)",
            super::http::cause(&e)
        ))),
        Err(_) => Err(connect(format!(
            "{transport} did not complete MCP's handshake within {} s (check that it is an MCP server and that it runs)",
            CONNECT_TIMEOUT.as_secs()
        ))),
    }
}

/// The most pages of a tool list followed: a server whose cursor never ends is refused.
pub(crate) const MAX_LIST_PAGES: usize = 1000;

/// The server's tools as snapshot tools, every page of its list (at most
/// [`MAX_LIST_PAGES`]), within [`CONNECT_TIMEOUT`].
pub(crate) async fn list_tools(server: &str, session: &Session) -> Result<Vec<super::SnapshotTool>, McpError> {
    let listed = tokio::time::timeout(CONNECT_TIMEOUT, list_pages(session.running.peer())).await;
    let tools = match listed {
        Ok(Ok(Some(tools))) => tools,
        Ok(Ok(None)) => {
            return Err(McpError::Protocol {
                server: server.to_string(),
                why: format!(
                    "its tool list did not end within {MAX_LIST_PAGES} pages (it keeps answering with a next cursor); \
                     fix the server's pagination"
                ),
            });
        }
        Ok(Err(ServiceError::McpError(e))) => {
            return Err(McpError::Protocol {
                server: server.to_string(),
                why: format!("it refused to list its tools: {} ({})", e.message, e.code.0),
            });
        }
        Ok(Err(e)) => {
            return Err(McpError::Connect {
                server: server.to_string(),
                why: format!("listing its tools failed: {}", super::http::cause(&e)),
            });
        }
        Err(_) => {
            return Err(McpError::Connect {
                server: server.to_string(),
                why: format!("it did not list its tools within {} s", CONNECT_TIMEOUT.as_secs()),
            });
        }
    };
    tools
        .into_iter()
        .map(|tool| {
            let name = tool.name.to_string();
            serde_json::to_value(&tool).and_then(serde_json::from_value).map_err(|e| McpError::Protocol {
                server: server.to_string(),
                why: format!("its tool `{name}` does not decode: {e}"),
            })
        })
        .collect()
}

/// The server's `serverInfo` as JSON (null when it gave none).
pub(crate) fn server_info(session: &Session) -> serde_json::Value {
    session
        .running
        .peer()
        .peer_info()
        .and_then(|info| info.server_info.as_ref().and_then(|i| serde_json::to_value(i).ok()))
        .unwrap_or(serde_json::Value::Null)
}

/// Every page of the tool list; `None` past [`MAX_LIST_PAGES`].
async fn list_pages(peer: &rmcp::Peer<RoleClient>) -> Result<Option<Vec<rmcp::model::Tool>>, ServiceError> {
    let mut tools = Vec::new();
    let mut cursor = None;
    for _ in 0..MAX_LIST_PAGES {
        let params = rmcp::model::PaginatedRequestParams::default().with_cursor(cursor);
        let page = peer.list_tools(Some(params)).await?;
        tools.extend(page.tools);
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return Ok(Some(tools)),
        }
    }
    Ok(None)
}
