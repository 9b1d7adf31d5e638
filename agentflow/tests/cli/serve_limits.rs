//! `agentflow::serve_limits::serve` under abuse: half-sent requests, more connections than
//! allowed, a `Host` it does not answer to. A small router on a loopback port, raw TCP.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use agentflow::serve_limits::{ServeLimits, serve};
use axum::Router;
use axum::extract::ConnectInfo;
use axum::routing::get;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Serves a router answering `GET /` with the client's address, under `limits`.
async fn start(limits: ServeLimits) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app =
        Router::new().route("/", get(|ConnectInfo(peer): ConnectInfo<SocketAddr>| async move { peer.to_string() }));
    tokio::spawn(serve(listener, app, limits, std::future::pending()));
    addr
}

/// Sends `GET /` naming `host` on a new connection; the status line of the answer.
async fn status_for(addr: SocketAddr, host: &str) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes()).await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_string(&mut answer)).await.unwrap().unwrap();
    answer.lines().next().unwrap_or_default().to_string()
}

#[tokio::test]
async fn a_half_sent_request_is_closed_once_the_header_timeout_passes() {
    let addr = start(ServeLimits::default().header_read_timeout(Duration::from_millis(300))).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    // The request line and one header, never the blank line that ends the head.
    s.write_all(format!("GET / HTTP/1.1\r\nHost: {addr}\r\n").as_bytes()).await.unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 256];
    let read = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await;
    let elapsed = started.elapsed();
    // Closed (EOF, or a reset) rather than left open.
    assert!(
        matches!(read, Ok(Ok(0)) | Ok(Err(_)))
            || matches!(read, Ok(Ok(n)) if String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 408")),
        "the half-sent request's connection is still open after {elapsed:?}: {read:?}"
    );
    assert!(elapsed < Duration::from_secs(3), "closed only after {elapsed:?}");
    // A whole request on a fresh connection is still served.
    assert_eq!(status_for(addr, &addr.to_string()).await, "HTTP/1.1 200 OK");
}

#[tokio::test]
async fn connections_past_the_limit_wait_until_one_closes() {
    let addr = start(ServeLimits::default().max_connections(2).header_read_timeout(Duration::from_secs(30))).await;
    let idle1 = TcpStream::connect(addr).await.unwrap();
    let _idle2 = TcpStream::connect(addr).await.unwrap();
    // Give the server time to take both.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let third = tokio::spawn(async move {
        let started = Instant::now();
        let status = status_for(addr, &addr.to_string()).await;
        (status, started.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(!third.is_finished(), "a third connection was served while two were open");
    drop(idle1);
    let (status, waited) = tokio::time::timeout(Duration::from_secs(5), third).await.unwrap().unwrap();
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(waited >= Duration::from_millis(600), "served after {waited:?}");
}

#[tokio::test]
async fn a_request_for_another_host_is_refused_and_the_bound_names_are_served() {
    let addr = start(ServeLimits::default().allow_host("inbox.example.com")).await;
    let port = addr.port();
    // A DNS-rebinding page's request names its own host.
    assert_eq!(status_for(addr, &format!("attacker.example:{port}")).await, "HTTP/1.1 421 Misdirected Request");
    assert_eq!(status_for(addr, "localhost:1").await, "HTTP/1.1 421 Misdirected Request");
    for ok in [format!("127.0.0.1:{port}"), format!("localhost:{port}"), "inbox.example.com".to_string()] {
        assert_eq!(status_for(addr, &ok).await, "HTTP/1.1 200 OK", "{ok}");
    }
    // No Host at all (HTTP/1.0 may omit it).
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET / HTTP/1.0\r\n\r\n").await.unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.0 400") || answer.starts_with("HTTP/1.1 400"), "{answer}");
}

#[tokio::test]
async fn handlers_see_the_clients_address() {
    let addr = start(ServeLimits::default()).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    let local = s.local_addr().unwrap();
    s.write_all(format!("GET / HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes()).await.unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).await.unwrap();
    assert!(answer.ends_with(&local.to_string()), "{answer}");
}
