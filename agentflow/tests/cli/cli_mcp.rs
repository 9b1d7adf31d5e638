//! `agentflow mcp snapshot` against the reference MCP server
//! (`@modelcontextprotocol/server-everything`, installed by `npm ci --prefix mcp`): its output
//! is exactly the committed `mcp/everything.json` (which keeps that file honest), over stdio
//! and streamable HTTP; `--tool` keeps tools; a command that is no MCP server fails clearly.

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::Once;
use std::time::{Duration, Instant};

/// The repository's root (the CLI runs there, as a user regenerating the snapshot does).
fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

const SERVER: &str = "mcp/node_modules/.bin/mcp-server-everything";

/// Whether the reference server is installed; outside CI a missing one skips (printed once),
/// under CI (`CI=true`) it fails.
fn installed() -> bool {
    static SKIP: Once = Once::new();
    let node = Command::new("node").arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status();
    if repo().join(SERVER).exists() && node.is_ok_and(|s| s.success()) {
        return true;
    }
    assert!(
        std::env::var("CI").map_or(true, |v| v != "true"),
        "mcp/node_modules (or node) is missing under CI: run `npm ci --prefix mcp` before cargo test"
    );
    SKIP.call_once(|| {
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED MCP tests: mcp/node_modules is not installed (run `npm ci --prefix mcp`)"
        );
    });
    false
}

fn snapshot(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agentflow"))
        .current_dir(repo())
        .args(["mcp", "snapshot"])
        .args(args)
        .env_remove("AGENTFLOW_STORE")
        .output()
        .expect("run agentflow")
}

fn committed() -> String {
    std::fs::read_to_string(repo().join("mcp/everything.json")).expect("mcp/everything.json is committed")
}

#[test]
fn the_snapshot_over_stdio_is_the_committed_file() {
    if !installed() {
        return;
    }
    let out = snapshot(&["--stdio", &format!("{SERVER} stdio"), "--exclude", "simulate-research-query"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let printed = String::from_utf8(out.stdout).expect("UTF-8");
    assert!(
        printed == committed(),
        "mcp/everything.json is not what `agentflow mcp snapshot --stdio \"{SERVER} stdio\" --exclude \
         simulate-research-query` prints: take it again (the server or the format changed)\n{printed}"
    );
}

#[test]
fn the_snapshot_over_streamable_http_is_the_same() {
    if !installed() {
        return;
    }
    let port = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port();
    let mut server = Command::new(repo().join(SERVER))
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("start the server");
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = snapshot(&["--http", &format!("http://127.0.0.1:{port}/mcp"), "--exclude", "simulate-research-query"]);
    let _ = server.kill();
    let _ = server.wait();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8(out.stdout).expect("UTF-8"), committed());
}

#[test]
fn tool_keeps_only_the_named_tools_and_an_unknown_one_is_refused() {
    if !installed() {
        return;
    }
    let stdio = format!("{SERVER} stdio");
    let out = snapshot(&["--stdio", &stdio, "--tool", "get-sum", "--tool", "echo"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let printed: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let names: Vec<&str> = printed["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["echo", "get-sum"]);

    let out = snapshot(&["--stdio", &stdio, "--tool", "get-summ"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--tool get-summ") && err.contains("get-sum"), "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn a_command_that_is_no_mcp_server_fails_with_a_clear_message() {
    let out = snapshot(&["--stdio", "/nonexistent/mcp-server --flag"]);
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("could not be started") && err.contains("/nonexistent/mcp-server"), "{err}");
    assert!(out.stdout.is_empty());

    // A program that exits at once: no handshake.
    let out = snapshot(&["--stdio", "true"]);
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("did not complete MCP's handshake"), "{err}");

    let out = snapshot(&["--stdio", "server 'unclosed"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not closed"));

    let out = snapshot(&["--stdio", "x", "--env", "NOEQUALS"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("KEY=VALUE"));
}

#[test]
fn an_unreachable_http_server_names_the_cause_and_headers_are_checked() {
    let port = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port();
    let url = format!("http://127.0.0.1:{port}/mcp");
    let out = snapshot(&["--http", &url, "--header", "X-Team: blue", "--bearer-env", "AGENTFLOW_TEST_TOKEN"]);
    assert_eq!(out.status.code(), Some(2), "an unset --bearer-env variable is a usage error");
    assert!(String::from_utf8_lossy(&out.stderr).contains("AGENTFLOW_TEST_TOKEN"));

    let out = snapshot(&["--http", &url, "--header", "no colon"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("Name: value"));

    let out = Command::new(env!("CARGO_BIN_EXE_agentflow"))
        .args(["mcp", "snapshot", "--http", &url, "--header", "X-Team: blue", "--bearer-env", "AGENTFLOW_TEST_TOKEN"])
        .env("AGENTFLOW_TEST_TOKEN", "s3cr3t")
        .output()
        .expect("run agentflow");
    assert_eq!(out.status.code(), Some(3), "nothing listens on the port");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("error sending request") && err.contains(&url), "names the HTTP client's cause: {err}");
    assert!(!err.contains("WorkerTransport") && !err.contains("StreamableHttpClientWorker"), "{err}");
    assert!(!err.contains("s3cr3t"), "{err}");
}
