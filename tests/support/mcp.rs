//! The reference MCP server the tests run: `@modelcontextprotocol/server-everything`, installed
//! into `mcp/node_modules` by `npm ci --prefix mcp` (the lockfile pins it), and its committed
//! snapshot `mcp/everything.json`.
// Each area binary includes this module and uses a part of it.
#![allow(dead_code)]

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Once;
use std::time::{Duration, Instant};

use agentflow::mcp::McpTransport;

/// The repository's `mcp/` folder.
pub fn mcp_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("mcp")
}

/// The committed snapshot of the reference server.
pub fn everything_snapshot() -> Vec<u8> {
    std::fs::read(mcp_dir().join("everything.json")).expect("mcp/everything.json is committed")
}

/// The reference server's program, or `None` after printing once why the MCP tests are
/// skipped; under CI (`CI=true`) a missing install fails.
pub fn everything_bin() -> Option<PathBuf> {
    static SKIP: Once = Once::new();
    let bin = mcp_dir().join("node_modules/.bin/mcp-server-everything");
    let node = Command::new("node").arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status();
    let why = match (bin.exists(), node.is_ok_and(|s| s.success())) {
        (true, true) => return Some(bin),
        (false, _) => "mcp/node_modules is not installed",
        (true, false) => "node is not on PATH",
    };
    assert!(
        std::env::var("CI").map_or(true, |v| v != "true"),
        "{why} under CI: run `npm ci --prefix mcp` (with Node.js installed) before cargo test"
    );
    SKIP.call_once(|| {
        let _ = writeln!(std::io::stderr(), "SKIPPED MCP tests: {why} (run `npm ci --prefix mcp`)");
    });
    None
}

/// The reference server as a child process over stdio, or `None` (skipped: see
/// [`everything_bin`]).
pub fn everything_stdio() -> Option<McpTransport> {
    everything_bin().map(|bin| McpTransport::stdio(bin.display().to_string()).arg("stdio"))
}

/// The reference server serving streamable HTTP on a free local port; killed when dropped.
pub struct HttpServer {
    child: Child,
    /// Its MCP endpoint, `http://127.0.0.1:<port>/mcp`.
    pub url: String,
    /// Its port.
    pub port: u16,
}

impl HttpServer {
    /// Starts the server and waits (at most 20 s) until it accepts connections; `None` when
    /// the MCP tests are skipped.
    pub fn start() -> Option<HttpServer> {
        let port = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port();
        HttpServer::start_on(port)
    }

    /// Starts the server on `port` (e.g. again, after stopping one there); `None` when the MCP
    /// tests are skipped.
    pub fn start_on(port: u16) -> Option<HttpServer> {
        let bin = everything_bin()?;
        let child = Command::new(bin)
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the reference MCP server over HTTP");
        let mut server = HttpServer { child, url: format!("http://127.0.0.1:{port}/mcp"), port };
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = server.child.try_wait() {
                panic!("the reference MCP server exited before listening on port {port}: {status}");
            }
            assert!(Instant::now() < deadline, "the reference MCP server did not listen on port {port} within 20 s");
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(server)
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Kills the process `pid` at once (`SIGKILL`).
pub fn kill(pid: u32) {
    let status = Command::new("kill").args(["-KILL", &pid.to_string()]).status().expect("run kill");
    assert!(status.success(), "kill -KILL {pid} failed");
}

/// Whether the process `pid` still exists (a zombie counts as gone).
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| stat.rsplit(')').next().is_some_and(|rest| !rest.trim_start().starts_with('Z')))
        .unwrap_or(false)
}
