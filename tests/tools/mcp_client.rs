//! MCP tools called on the reference server (`@modelcontextprotocol/server-everything`, see
//! `tests/support/mcp.rs`) over stdio and streamable HTTP: results as the gateway keeps them
//! (structured content, text, other content referenced), arguments the server refuses, a
//! server that dies mid-call (outcome unknown, the next call starts it again) or is gone before
//! a call (not sent), a restarted HTTP server refusing a stale session (not run, at once),
//! headers sent, and transports that never print secret values.

use std::time::{Duration, Instant};

use agentflow::mcp::{McpClient, McpError};
use agentflow::tool::ToolError;
use serde_json::{Value, json};

use crate::support::mcp::{HttpServer, alive, everything_snapshot, everything_stdio, kill};

/// The calls both transports must answer alike.
async fn check_calls(client: &McpClient) {
    let sum = client.call_tool("get-sum", json!({"a": 1, "b": 2})).await.expect("get-sum");
    assert_eq!(sum, json!("The sum of 1 and 2 is 3."));

    let weather = client.call_tool("get-structured-content", json!({"location": "Chicago"})).await.expect("weather");
    let schema = &client.snapshot().tool("get-structured-content").expect("in the snapshot").output_schema;
    let required = schema.as_ref().and_then(|s| s["required"].as_array()).expect("an output schema with required keys");
    assert!(!required.is_empty());
    for key in required {
        let key = key.as_str().expect("a key");
        assert!(weather.get(key).is_some(), "the structured content has `{key}`: {weather}");
    }

    let image = client.call_tool("get-tiny-image", json!({})).await.expect("get-tiny-image");
    let refs = image["content"].as_array().unwrap_or_else(|| panic!("content referenced: {image}"));
    let png = refs.iter().find(|r| r["type"] == "image").unwrap_or_else(|| panic!("an image reference: {image}"));
    assert_eq!(png["mimeType"], "image/png");
    assert!(png["bytes"].as_u64().is_some_and(|n| n > 0), "{png}");
    assert_eq!(png.as_object().map(|o| o.len()), Some(3), "type, mimeType and bytes only: {png}");
    let text = image.to_string();
    assert!(text.len() < 1024 && !text.contains("iVBOR"), "no base64 PNG inlined: {text}");
    assert!(image["text"].as_str().is_some_and(|t| !t.is_empty()), "{image}");

    match client.call_tool("echo", json!({})).await {
        Err(ToolError::Correctable(message)) => assert!(message.contains("message"), "names the field: {message}"),
        other => panic!("a missing required field is correctable, got {other:?}"),
    }
    let echoed = client.call_tool("echo", json!({"message": "hi"})).await.expect("echo");
    assert_eq!(echoed, json!("Echo: hi"));
}

#[tokio::test]
async fn calls_over_stdio_reach_the_reference_server() {
    let Some(transport) = everything_stdio() else { return };
    let client = McpClient::connect("everything", &everything_snapshot(), transport).await.expect("connect");
    assert_eq!(client.server(), "everything");
    assert_eq!(client.new_tools(), ["simulate-research-query"], "left out of the snapshot, reported");
    check_calls(&client).await;
    let pid = client.child_pid().expect("a child process");
    client.close().await;
    assert!(!alive(pid), "close ends the child process");
}

#[tokio::test]
async fn calls_over_streamable_http_reach_the_reference_server() {
    let Some(server) = HttpServer::start() else { return };
    let transport = agentflow::mcp::McpTransport::http(server.url.clone());
    let client = McpClient::connect("everything", &everything_snapshot(), transport).await.expect("connect");
    assert_eq!(client.new_tools(), ["simulate-research-query"]);
    assert_eq!(client.child_pid(), None);
    check_calls(&client).await;
    client.close().await;
}

#[tokio::test]
async fn a_server_that_dies_mid_call_leaves_the_outcome_unknown_and_the_next_call_reconnects() {
    let Some(transport) = everything_stdio() else { return };
    let client = McpClient::connect("everything", &everything_snapshot(), transport).await.expect("connect");
    let pid = client.child_pid().expect("a child process");
    let call = {
        let client = client.clone();
        tokio::spawn(async move {
            client.call_tool("trigger-long-running-operation", json!({"duration": 5, "steps": 5})).await
        })
    };
    // Let the call reach the server, then kill it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!call.is_finished(), "the operation runs for 5 s");
    let killed = Instant::now();
    kill(pid);
    let answer = tokio::time::timeout(Duration::from_secs(10), call).await.expect("the call ends").expect("joined");
    assert!(killed.elapsed() < Duration::from_secs(4), "ended by the death, not by the operation's end");
    match answer {
        Err(ToolError::OutcomeUnknown(message)) => {
            assert!(message.contains("everything") && message.contains("trigger-long-running-operation"), "{message}")
        }
        other => panic!("a call the server died during is outcome-unknown, got {other:?}"),
    }
    let sum =
        client.call_tool("get-sum", json!({"a": 1, "b": 2})).await.expect("the next call starts the server again");
    assert_eq!(sum, json!("The sum of 1 and 2 is 3."));
    let again = client.child_pid().expect("a new child process");
    assert_ne!(again, pid);
    assert!(alive(again));
    client.close().await;
    assert!(!alive(again), "close ends the new child process");
}

#[tokio::test]
async fn a_reconnect_that_fails_is_transient_and_not_retried_within_the_backoff() {
    let Some(bin) = crate::support::mcp::everything_bin() else { return };
    let flag = std::env::temp_dir().join(format!("agentflow-mcp-reconnect-{}", std::process::id()));
    std::fs::write(&flag, b"").expect("write the flag file");
    // Starts the server while the flag file exists, fails (exit 1) once it is gone.
    let script = format!("test -e '{}' && exec '{}' stdio", flag.display(), bin.display());
    let transport = agentflow::mcp::McpTransport::stdio("sh").arg("-c").arg(script);
    let client = McpClient::connect("everything", &everything_snapshot(), transport).await.expect("connect");
    std::fs::remove_file(&flag).expect("remove the flag file");
    kill(client.child_pid().expect("a child process"));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    match client.call_tool("get-sum", json!({"a": 1, "b": 2})).await {
        Err(ToolError::Transient(message)) => {
            assert!(message.contains("connecting again failed") && message.contains("not sent"), "{message}")
        }
        other => panic!("a failed reconnect is transient, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(10), "bounded by the handshake's failure");
    match client.call_tool("get-sum", json!({"a": 1, "b": 2})).await {
        Err(ToolError::Transient(message)) => assert!(message.contains("less than 1 s ago"), "{message}"),
        other => panic!("a second call within the backoff does not reconnect, got {other:?}"),
    }
}

#[tokio::test]
async fn a_restarted_http_server_refuses_the_stale_session_at_once_and_the_next_call_reconnects() {
    let Some(server) = HttpServer::start() else { return };
    let port = server.port;
    let transport = agentflow::mcp::McpTransport::http(server.url.clone());
    let client = McpClient::connect("everything", &everything_snapshot(), transport).await.expect("connect");
    assert_eq!(client.call_tool("echo", json!({"message": "one"})).await.expect("echo"), json!("Echo: one"));
    drop(server);
    let _restarted = HttpServer::start_on(port).expect("the server starts again on its port");
    // `start_on` blocked this runtime: let the HTTP client see its old connection closed (a
    // request on a pooled connection that breaks is outcome-unknown, rightly).
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    match client.call_tool("echo", json!({"message": "two"})).await {
        Err(ToolError::Transient(message)) => {
            assert!(message.contains("refused") && message.contains("did not run"), "{message}")
        }
        other => panic!("a call on a session the server does not know is refused (transient), got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(5), "refused at once, not at the call timeout");
    let echoed = client.call_tool("echo", json!({"message": "three"})).await.expect("a new session");
    assert_eq!(echoed, json!("Echo: three"));
    client.close().await;
}

#[tokio::test]
async fn a_server_that_cannot_start_is_a_connect_error() {
    let Some(_) = everything_stdio() else { return };
    let transport = agentflow::mcp::McpTransport::stdio("/nonexistent/mcp-server");
    match McpClient::connect("ghost", &everything_snapshot(), transport).await {
        Err(e @ McpError::Connect { .. }) => {
            let text = e.to_string();
            assert!(text.contains("ghost") && text.contains("could not be started"), "{text}");
        }
        other => panic!("expected a connect error, got {other:?}"),
    }
}

#[tokio::test]
async fn arguments_that_are_not_an_object_are_refused_before_sending() {
    let Some(transport) = everything_stdio() else { return };
    let client = McpClient::connect("everything", &everything_snapshot(), transport).await.expect("connect");
    match client.call_tool("get-sum", json!([1, 2])).await {
        Err(ToolError::Correctable(message)) => assert!(message.contains("JSON object"), "{message}"),
        other => panic!("expected correctable, got {other:?}"),
    }
    let v: Value = client.call_tool("get-sum", json!({"a": 2, "b": 2})).await.expect("still connected");
    assert_eq!(v, json!("The sum of 2 and 2 is 4."));
    client.close().await;
}

#[tokio::test]
async fn dropping_the_last_clone_ends_the_child_process() {
    let Some(transport) = everything_stdio() else { return };
    let client = McpClient::connect("everything", &everything_snapshot(), transport).await.expect("connect");
    let pid = client.child_pid().expect("a child process");
    let clone = client.clone();
    drop(client);
    assert_eq!(
        clone.call_tool("get-sum", json!({"a": 1, "b": 1})).await.expect("a clone keeps it"),
        json!("The sum of 1 and 1 is 2.")
    );
    drop(clone);
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(pid) {
        assert!(Instant::now() < deadline, "the child process {pid} outlived its last client by 10 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_call_with_no_answer_within_the_call_timeout_is_outcome_unknown() {
    let Some(transport) = everything_stdio() else { return };
    let client = McpClient::connect("everything", &everything_snapshot(), transport)
        .await
        .expect("connect")
        .with_call_timeout(Duration::from_secs(1));
    let started = Instant::now();
    match client.call_tool("trigger-long-running-operation", json!({"duration": 5, "steps": 5})).await {
        Err(ToolError::OutcomeUnknown(message)) => assert!(message.contains("within 1 s"), "{message}"),
        other => panic!("no answer in time is outcome-unknown, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(4), "the timeout ended it: {:?}", started.elapsed());
    // The connection stays usable.
    assert_eq!(
        client.call_tool("get-sum", json!({"a": 1, "b": 2})).await.expect("get-sum"),
        json!("The sum of 1 and 2 is 3.")
    );
    client.close().await;
}

#[tokio::test]
async fn a_call_to_an_http_server_that_is_gone_is_not_sent() {
    let Some(server) = HttpServer::start() else { return };
    let transport = agentflow::mcp::McpTransport::http(server.url.clone());
    let client = McpClient::connect("everything", &everything_snapshot(), transport).await.expect("connect");
    drop(server);
    // Dropping the server blocked this runtime: let the HTTP client see its connection closed.
    tokio::time::sleep(Duration::from_millis(200)).await;
    match client.call_tool("get-sum", json!({"a": 1, "b": 2})).await {
        Err(ToolError::Transient(message)) => assert!(message.contains("not sent"), "{message}"),
        other => panic!("a refused connection sends nothing (transient), got {other:?}"),
    }
}

#[test]
fn a_transport_never_prints_env_or_header_values() {
    let stdio = agentflow::mcp::McpTransport::stdio("server").arg("--fast").env("API_TOKEN", "s3cr3t-env");
    let http = agentflow::mcp::McpTransport::http("http://127.0.0.1:1/mcp")
        .header("X-Api-Key", "s3cr3t-key")
        .bearer("s3cr3t-token");
    for text in [format!("{stdio:?}"), format!("{stdio:#?}"), stdio.to_string(), format!("{http:?}"), http.to_string()]
    {
        assert!(!text.contains("s3cr3t"), "no value printed: {text}");
    }
    let debug = format!("{stdio:?} {http:?}");
    assert!(debug.contains("API_TOKEN") && debug.contains("--fast"), "{debug}");
    assert!(debug.contains("X-Api-Key") && debug.contains("Authorization"), "{debug}");
}

/// Accepts one HTTP request on a loopback port (at most 10 s) and sends back its head, then
/// answers 500 so the client gives up.
fn record_one_request() -> (String, std::thread::JoinHandle<String>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let url = format!("http://{}/mcp", listener.local_addr().expect("address"));
    listener.set_nonblocking(true).expect("nonblocking");
    let recorder = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut stream = loop {
            match listener.accept() {
                Ok((stream, _)) => break stream,
                Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
                Err(e) => panic!("no request within 10 s: {e}"),
            }
        };
        stream.set_nonblocking(false).expect("blocking");
        stream.set_read_timeout(Some(Duration::from_secs(5))).expect("read timeout");
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") && head.len() < 64 * 1024 {
            match stream.read(&mut byte) {
                Ok(1) => head.push(byte[0]),
                _ => break,
            }
        }
        let _ =
            stream.write_all(b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
        String::from_utf8_lossy(&head).into_owned()
    });
    (url, recorder)
}

#[tokio::test]
async fn headers_and_a_bearer_token_reach_the_http_server() {
    let (url, recorder) = record_one_request();
    let transport = agentflow::mcp::McpTransport::http(url).header("X-Team", "blue").bearer("tok-123");
    let connected = McpClient::connect("recorded", &everything_snapshot(), transport).await;
    assert!(matches!(connected, Err(McpError::Connect { .. })), "the recorder is no MCP server");
    let head = recorder.join().expect("the recorder").to_ascii_lowercase();
    assert!(head.starts_with("post /mcp"), "{head}");
    assert!(head.contains("\r\nx-team: blue\r\n"), "{head}");
    assert!(head.contains("\r\nauthorization: bearer tok-123\r\n"), "{head}");
}
