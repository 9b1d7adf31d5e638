//! The `server` example stopped as a user stops it, with Ctrl-C: its `main` in a process of its
//! own (this test binary, running the example's child test of `server.rs`), bound to a free
//! port, prints its address first and writes its demo users file; a refund started over HTTP is
//! approved over HTTP and completes; then SIGINT: the server says it stopped, exits 0, removes
//! its sidecar, and the store file, free for the next process, holds the completed thread with
//! each action in the audit log in its caller's name.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use agentflow::Store;
use agentflow::persist::ThreadStatus;
use serde_json::{Value, json};

use crate::support::process::own_test;
use crate::support::stores::open_redb;
use crate::support::temp::temp_dir;

/// The example's child process of `tests/processes/server.rs` (which includes the example's
/// source), and the variable that gives it the example's arguments.
const CHILD: (&str, &str) = ("processes::server", "server_example_child");
const CHILD_ARGS: &str = "AGENTFLOW_SERVER_EXAMPLE_ARGS";

/// The child, killed if the test ends while it still runs.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Sends `method path` with `token` and `body`; the status and the JSON answer.
async fn call(http: &reqwest::Client, base: &str, token: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let request = match &body {
        Some(body) => {
            http.post(format!("{base}{path}")).header("content-type", "application/json").body(body.to_string())
        }
        None if path.ends_with("/approve") => http.post(format!("{base}{path}")),
        None => http.get(format!("{base}{path}")),
    };
    let reply = request.header("authorization", format!("Bearer {token}")).send().await.expect("the server answers");
    let status = reply.status().as_u16();
    (status, serde_json::from_str(&reply.text().await.unwrap()).unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_server_example_stops_cleanly_on_ctrl_c_after_a_refund_ran_over_http() {
    let dir = temp_dir("server-example");
    let db = dir.join("server.redb");
    let mut cmd = own_test(CHILD.0, CHILD.1);
    let args = json!(["--db", db.to_str().unwrap(), "--bind", "127.0.0.1:0"]);
    cmd.env(CHILD_ARGS, args.to_string()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = Running(cmd.spawn().expect("start the example"));
    let (lines, said) = mpsc::channel::<String>();
    let stdout = child.0.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = lines.send(line);
        }
    });
    let mut stderr = child.0.stderr.take().unwrap();
    let errors = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    // The harness's own lines come first; the example's first line names its address.
    let first = loop {
        let line = said.recv_timeout(Duration::from_secs(120)).expect("the server starts and prints its address");
        if line.starts_with("agentflow server: ") {
            break line;
        }
    };
    let base = first
        .strip_prefix("agentflow server: ")
        .and_then(|rest| rest.split_whitespace().next())
        .map(|url| url.trim_end_matches('/').to_string())
        .expect("an address");
    assert!(base.starts_with("http://127.0.0.1:") && !base.ends_with(":0"), "{first}");
    assert!(dir.join("server-users.json").exists(), "the demo users file was written");
    assert!(dir.join("server.redb.owner").exists(), "the server names itself beside the file it holds");

    let http = reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(60)).build().unwrap();
    let start =
        json!({ "graph": "refunds", "input": { "order": "ORD-7", "amount": 12 }, "thread": "r-1", "wait": true });
    let (status, run) = call(&http, &base, "agent-demo-token", "/api/threads", Some(start)).await;
    assert_eq!((status, run["status"].as_str()), (200, Some("interrupted")), "{run}");
    let approval = run["approvals"][0]["id"].as_str().expect("an approval waits").to_string();
    let path = format!("/api/threads/r-1/approvals/{approval}/approve");
    let (status, decided) = call(&http, &base, "alice-demo-token", &path, None).await;
    assert_eq!(status, 200, "{decided}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (_, thread) = call(&http, &base, "bob-demo-token", "/api/threads/r-1", None).await;
        if thread["status"] == "completed" {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the refund never completed: {thread}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Ctrl-C: the server stops, says so, and lets go of its file.
    let pid = child.0.id().to_string();
    assert!(Command::new("kill").args(["-INT", &pid]).status().unwrap().success());
    let (done, ended) = mpsc::channel();
    let mut waited = child;
    std::thread::spawn(move || {
        let status = waited.0.wait();
        let _ = done.send(status.map(|s| s.success()));
        drop(waited);
    });
    let success = ended.recv_timeout(Duration::from_secs(60)).expect("the server stops on Ctrl-C").unwrap();
    let rest: Vec<String> = said.iter().collect();
    assert!(success, "the example failed; stdout:\n{}\nstderr:\n{}", rest.join("\n"), errors.join().unwrap());
    assert!(rest.iter().any(|l| l == "agentflow server: stopped"), "{rest:?}");
    assert!(!dir.join("server.redb.owner").exists(), "the sidecar is removed");
    let store = open_redb(&db).expect("the file is free once the server stopped");
    assert_eq!(store.thread("r-1").unwrap().unwrap().status, ThreadStatus::Completed);
    let audit = store.list_audit("r-1").unwrap();
    let by = |kind: &str| audit.iter().find(|e| e.kind == kind).map(|e| e.actor.clone());
    assert_eq!(by("run.submitted").as_deref(), Some("agent"));
    assert_eq!(by("approval.approved").as_deref(), Some("alice"));
    std::fs::remove_dir_all(&dir).ok();
}
