//! The `follow_up` and `flaky_service` examples, run as users run them: their `main`, with
//! command-line arguments, in processes of their own. The examples' sources are compiled into this
//! test binary, which runs each example in a child process of itself ([`example`]), so no cargo
//! build happens while the tests run.
//!
//! `follow_up`: one process starts a thread and exits while it sleeps on a durable timer; the
//! store says `sleeping` and the reminder has not been sent. A second process, after the due
//! time, fires the reminder once (one line in the outbox file the example appends to); a third
//! fires nothing; a sleeping thread of another graph in the same file does not stop it.
//! `flaky_service`: the test runs the flaky HTTP service itself and records every
//! request it receives, so what reached the service while the breaker was open is counted where
//! the example cannot hide it.

#[path = "../../examples/flaky_service.rs"]
#[allow(dead_code, reason = "this test calls only the example's `main`")]
mod flaky_service;
#[path = "../../examples/follow_up.rs"]
#[allow(dead_code, reason = "this test calls only the example's `main`")]
mod follow_up;
#[path = "../../examples/governance.rs"]
#[allow(dead_code, reason = "this test calls only the example's `main`")]
mod governance;
#[path = "../../examples/mcp_tools.rs"]
#[allow(dead_code, reason = "this test calls only the example's `main`")]
mod mcp_tools;
#[path = "../../examples/two_tenants.rs"]
#[allow(dead_code, reason = "this test calls only the example's `main`")]
mod two_tenants;
#[path = "../../examples/upgrade.rs"]
#[allow(dead_code, reason = "this test calls only the example's `main`")]
mod upgrade;

use std::path::Path;
use std::process::{Command, ExitCode, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::process::own_test;
use crate::support::stores::open_redb;
use crate::support::temp::temp_dir;
use agentflow::Store;
use agentflow::persist::ThreadStatus;
use agentflow::prelude::*;
use agentflow::timer::now_ms;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Set in a child process: the example it runs.
const CHILD_EXAMPLE: &str = "AGENTFLOW_EXAMPLE_CHILD";
/// Set in a child process: the example's command-line arguments, as a JSON array of strings.
const CHILD_ARGS: &str = "AGENTFLOW_EXAMPLE_ARGS";

/// A process that runs example `name`'s `main` with `args`: this test binary, running
/// [`example_child`].
fn example(name: &str, args: &[&str]) -> Command {
    let mut cmd = own_test(module_path!(), "example_child");
    cmd.env(CHILD_EXAMPLE, name).env(CHILD_ARGS, serde_json::to_string(args).unwrap());
    cmd
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "child process of the tests in this file: runs an example's `main`"]
async fn example_child() {
    let Ok(name) = std::env::var(CHILD_EXAMPLE) else { return };
    let args: Vec<String> = serde_json::from_str(&std::env::var(CHILD_ARGS).unwrap()).unwrap();
    // The harness printed `test example_child ... ` without a line break.
    println!();
    let code = match name.as_str() {
        "follow_up" => follow_up::run_with_args(args.clone()).await,
        "flaky_service" => flaky_service::run_with_args(args.clone()).await,
        "two_tenants" => two_tenants::run_with_args(args.clone()).await,
        "governance" => governance::run_with_args(args.clone()).await,
        "mcp_tools" => mcp_tools::run_with_args(args.clone()).await,
        "upgrade" => upgrade::run_with_args(args.clone()).await,
        other => panic!("no example `{other}` in this file"),
    };
    assert_eq!(code, ExitCode::SUCCESS, "example `{name}` {args:?} failed");
}

/// Runs `cmd` to its end (at most `limit`, then it is killed and the test fails) and asserts
/// that it succeeded; its stdout.
fn run(cmd: &mut Command, limit: Duration) -> String {
    let child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start the example");
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let Ok(output) = rx.recv_timeout(limit) else {
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        panic!("the example did not finish within {limit:?}: {cmd:?}");
    };
    let Output { status, stdout, stderr } = output.expect("the example's output");
    let (stdout, stderr) = (String::from_utf8_lossy(&stdout), String::from_utf8_lossy(&stderr));
    assert!(status.success(), "{cmd:?} failed ({status})\nstdout:\n{stdout}\nstderr:\n{stderr}");
    stdout.into_owned()
}

// ---------------------------------------------------------------- follow_up

/// One line of the example's outbox: `KIND<TAB>THREAD<TAB>UNIX_MS<TAB>pid=PID<TAB>KEY<TAB>TEXT`.
#[derive(Debug, Clone, PartialEq)]
struct Sent {
    kind: String,
    thread: String,
    at: u64,
    pid: String,
}

fn outbox(path: &Path) -> Vec<Sent> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .map(|line| {
            let f: Vec<&str> = line.splitn(6, '\t').collect();
            assert_eq!(f.len(), 6, "an outbox line with six fields: {line:?}");
            Sent { kind: f[0].into(), thread: f[1].into(), at: f[2].parse().unwrap(), pid: f[3].into() }
        })
        .collect()
}

fn kinds(sent: &[Sent]) -> Vec<(&str, &str)> {
    sent.iter().map(|s| (s.kind.as_str(), s.thread.as_str())).collect()
}

/// The `follow_up` example with `args`, on the store and outbox files in `dir`.
fn follow_up_in(dir: &Path, args: &[&str]) -> Command {
    let (db, outbox) = (dir.join("follow_up.redb"), dir.join("outbox.txt"));
    let (db, outbox) = (db.to_str().expect("a UTF-8 path"), outbox.to_str().expect("a UTF-8 path"));
    example("follow_up", &[&["--db", db, "--outbox", outbox], args].concat())
}

/// The thread's status and timer, read from the store file the processes left.
fn stored(db: &Path, thread: &str) -> (ThreadStatus, Option<u64>) {
    let store = open_redb(db).expect("open the store file");
    let status = store.thread(thread).unwrap().expect("the thread is stored").status;
    (status, store.thread_timer(thread).unwrap())
}

#[test]
fn follow_up_sleeps_across_processes_and_a_later_process_fires_the_reminder_once() {
    let dir = temp_dir("follow-up-example");
    let (db, sent) = (dir.join("follow_up.redb"), dir.join("outbox.txt"));

    // Process 1: sends the message, sleeps on a durable timer, exits.
    let out = run(&mut follow_up_in(&dir, &["--after", "2", "--exit-while-sleeping"]), Duration::from_secs(60));
    assert!(out.contains("follow-up-1 is sleeping"), "{out}");
    let (status, timer) = stored(&db, "follow-up-1");
    assert_eq!(status, ThreadStatus::Sleeping, "{out}");
    let due = timer.expect("a sleeping thread has a timer in the store");
    let first = outbox(&sent);
    assert_eq!(kinds(&first), [("message", "follow-up-1")], "the message is sent, the reminder is not yet");
    assert!(due >= first[0].at + 1_500, "due 2 s after the message: due {due}, sent {}", first[0].at);

    // Process 2, once the timer is due: finds it and fires the reminder, once.
    std::thread::sleep(Duration::from_millis(due.saturating_sub(now_ms()) + 50));
    let out = run(&mut follow_up_in(&dir, &["--wake"]), Duration::from_secs(60));
    assert!(out.contains("woke follow-up-1: Completed"), "{out}");
    let second = outbox(&sent);
    assert_eq!(kinds(&second), [("message", "follow-up-1"), ("reminder", "follow-up-1")], "{out}");
    assert_eq!(second[0], first[0], "the message is not sent again");
    assert_ne!(second[1].pid, first[0].pid, "the reminder is sent by the second process");
    assert!(second[1].at >= due, "the reminder fired before it was due: {} < {due}", second[1].at);
    assert_eq!(stored(&db, "follow-up-1"), (ThreadStatus::Completed, None), "no timer is left");

    // Process 3: nothing is due any more, nothing is sent.
    let out = run(&mut follow_up_in(&dir, &["--wake"]), Duration::from_secs(60));
    assert!(out.contains("no thread is sleeping"), "{out}");
    assert_eq!(outbox(&sent), second, "a finished follow-up fires nothing again");
    assert_eq!(stored(&db, "follow-up-1"), (ThreadStatus::Completed, None));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn follow_up_in_one_process_sleeps_wakes_and_reminds_once() {
    let dir = temp_dir("follow-up-example-one-process");
    let out = run(&mut follow_up_in(&dir, &["--after", "0.5"]), Duration::from_secs(60));
    assert!(out.contains("follow-up-1 is sleeping"), "the run ended sleeping first:\n{out}");
    assert!(out.contains("woke follow-up-1: Completed"), "{out}");
    let sent = outbox(&dir.join("outbox.txt"));
    assert_eq!(kinds(&sent), [("message", "follow-up-1"), ("reminder", "follow-up-1")], "{out}");
    assert!(sent[1].at >= sent[0].at + 500, "the reminder waited for its timer: {sent:?}");
    assert_eq!(sent[0].pid, sent[1].pid, "one process");
    assert_eq!(stored(&dir.join("follow_up.redb"), "follow-up-1"), (ThreadStatus::Completed, None));
    let _ = std::fs::remove_dir_all(&dir);
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Nap {
    done: bool,
}

/// Another graph that sleeps, for a store file the `follow_up` example shares with it.
#[graph(state = Nap, deps = (), start = nap)]
mod napping {
    use super::*;

    #[node(goto = [END], sleep)]
    async fn nap(_s: &Nap, cx: &Ctx<()>) -> Result<Step<Nap>, NodeError> {
        cx.sleep(Duration::from_millis(100)).await?;
        Ok(goto!(END, Nap::update().done(true)))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follow_up_wakes_its_own_threads_and_leaves_another_graphs_sleeping_one() {
    let dir = temp_dir("follow-up-example-another-graph");
    let db = dir.join("follow_up.redb");
    {
        let store = Arc::new(open_redb(&db).expect("create the store file"));
        let run = napping::graph().app().store(store).runner(&()).thread("nap-1").run(Nap::default()).await.unwrap();
        assert!(matches!(run.outcome, Outcome::Sleeping { .. }), "{}", run.outcome);
    }
    // Due before the follow-up, and not the example's to wake: it reports the thread and goes on.
    let mut cmd = follow_up_in(&dir, &["--after", "0.5"]);
    let out = tokio::task::spawn_blocking(move || run(&mut cmd, Duration::from_secs(60))).await.unwrap();
    assert!(out.contains("nap-1 not woken"), "{out}");
    assert!(out.contains("woke follow-up-1: Completed"), "{out}");
    let sent = outbox(&dir.join("outbox.txt"));
    assert_eq!(kinds(&sent), [("message", "follow-up-1"), ("reminder", "follow-up-1")], "{out}");
    assert_eq!(stored(&db, "follow-up-1"), (ThreadStatus::Completed, None));
    let (status, timer) = stored(&db, "nap-1");
    assert_eq!(status, ThreadStatus::Sleeping, "{out}");
    assert!(timer.is_some(), "the other graph's thread keeps its timer");
    let _ = std::fs::remove_dir_all(&dir);
}

// ---------------------------------------------------------------- flaky_service

/// The flaky service, run by the test: `503` for the first `fail_first` requests, then a number;
/// every request's path is recorded, in order.
async fn test_service(fail_first: usize) -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let paths = Arc::new(Mutex::new(Vec::new()));
    let seen = paths.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf).await {
                        Ok(n) if n > 0 => head.extend_from_slice(&buf[..n]),
                        _ => return,
                    }
                }
                let head = String::from_utf8_lossy(&head).into_owned();
                let path = head.split_whitespace().nth(1).unwrap_or_default().to_string();
                let n = {
                    let mut seen = seen.lock().unwrap();
                    seen.push(path);
                    seen.len()
                };
                let (status, body) =
                    if n <= fail_first { ("503 Service Unavailable", "busy") } else { ("200 OK", "7") };
                let response =
                    format!("HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len());
                let _ = socket.write_all(response.as_bytes()).await;
            });
        }
    });
    (url, paths)
}

/// The breaker's cool-down, in seconds: lookups 4 to 6 must all be refused within it, on a loaded
/// machine too, or lookup 6 would be the probe. The example waits only for what is left of it
/// after lookup 6, so the test takes about this long.
const COOL_DOWN: &str = "8";

/// The result of each `lookup N SKU-N: RESULT ...` line, in order.
fn lookups(out: &str) -> Vec<(u32, String)> {
    out.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("lookup ")?;
            let (n, rest) = rest.split_once(' ')?;
            let (_, result) = rest.split_once(": ")?;
            let word = result.split([' ', ',']).next()?.trim_end_matches(':');
            Some((n.parse().ok()?, word.to_string()))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flaky_service_no_request_reaches_the_service_while_the_breaker_is_open() {
    let (url, paths) = test_service(3).await;
    let mut cmd = example("flaky_service", &["--url", &url, "--cool-down", COOL_DOWN]);
    let out = tokio::task::spawn_blocking(move || run(&mut cmd, Duration::from_secs(60))).await.unwrap();

    // What the service itself received: lookups 4 to 6 were refused by the open breaker and never
    // reached it; lookup 7 was the probe after the cool-down.
    let received = paths.lock().unwrap().clone();
    assert_eq!(received, ["/stock/SKU-1", "/stock/SKU-2", "/stock/SKU-3", "/stock/SKU-7", "/stock/SKU-8"], "{out}");
    let results = lookups(&out);
    let expected = ["failed", "failed", "failed", "CIRCUIT_OPEN", "CIRCUIT_OPEN", "CIRCUIT_OPEN", "ok", "ok"];
    let expected: Vec<(u32, String)> = (1..).zip(expected.iter().map(|r| r.to_string())).collect();
    assert_eq!(results, expected, "{out}");
    for (n, from, to) in [(3, "CLOSED", "OPEN"), (7, "OPEN", "HALF_OPEN"), (7, "HALF_OPEN", "CLOSED")] {
        // The lines of lookup `n`: up to the next lookup.
        let after = out.split(&format!("lookup {n} ")).nth(1).unwrap_or_default();
        let after = after.split("\nlookup ").next().unwrap_or_default();
        let line = format!("breaker check_stock, during lookup {n}: {from} -> {to}");
        assert!(after.contains(&line), "lookup {n}: {from} -> {to}\n{out}");
    }
    assert_eq!(out.matches("breaker check_stock, during lookup").count(), 3, "three moves in all:\n{out}");
}

#[test]
fn flaky_service_with_its_own_service_counts_no_request_while_open() {
    let out = run(&mut example("flaky_service", &["--cool-down", COOL_DOWN]), Duration::from_secs(60));
    let counts: Vec<u32> =
        out.lines().filter_map(|l| l.trim().strip_prefix("service requests so far: ")?.parse().ok()).collect();
    // After the failures, after the refused calls, after the probe and one more call.
    assert_eq!(counts, [3, 3, 5], "{out}");
    assert!(out.contains("8 lookups: 3 failed, 3 refused by the open breaker, 2 succeeded"), "{out}");
    let served: Vec<&str> = out.lines().filter(|l| l.contains("[service] request")).collect();
    assert_eq!(served.len(), 5, "{out}");
    assert!(served.iter().all(|l| !["SKU-4", "SKU-5", "SKU-6"].iter().any(|sku| l.contains(sku))), "{out}");
}

/// `two_tenants`, as a user runs it: each tenant's thread is seen and decided only by its own
/// people, the refund runs once approved, and the audit logs verify; the store it leaves (with
/// `--db`) says the same.
#[test]
fn two_tenants_keeps_each_companys_threads_to_its_own_people() {
    let dir = temp_dir("two-tenants");
    let db = dir.join("tenants.redb");
    let out = run(&mut example("two_tenants", &["--db", db.to_str().unwrap()]), Duration::from_secs(60));
    // Support of acme lists acme's thread only.
    let listed = out.split("2. ").nth(1).and_then(|s| s.split("3. ").next()).unwrap_or_default();
    assert!(listed.contains("acme-refund-1 (tenant acme"), "{out}");
    assert!(!listed.contains("globex"), "acme's support saw globex's thread:\n{out}");
    // globex's approver cannot find acme's approval; acme's viewer may not decide it.
    assert!(out.contains("gina: refused: no approval `apr-"), "{out}");
    assert!(out.contains("vic: refused: `vic` may not decide approvals: only the `approver` role may"), "{out}");
    assert!(out.contains("alice: APPROVED"), "{out}");
    assert!(out.contains("acme-refund-1 resumed: Completed"), "{out}");
    assert!(
        out.contains("acme-refund-1: 4 entries, intact") && out.contains("globex-refund-1: 1 entry, intact"),
        "{out}"
    );
    // What the store holds: acme's refund completed, globex's still waits, each with its tenant.
    let store = open_redb(&db).unwrap();
    let acme = store.thread("acme-refund-1").unwrap().unwrap();
    let globex = store.thread("globex-refund-1").unwrap().unwrap();
    assert_eq!((acme.status, acme.tenant.as_deref()), (ThreadStatus::Completed, Some("acme")));
    assert_eq!((globex.status, globex.tenant.as_deref()), (ThreadStatus::Interrupted, Some("globex")));
    assert!(store.verify_audit("acme-refund-1").unwrap().is_ok());
}

/// `governance`, as a user runs it: the sealed data file holds neither the customer's address
/// nor the token; support may not read the address and the privacy officer's read is audited;
/// the careless node is refused before writing; the hold refuses the purge; after the purge the
/// copy taken before no longer opens the thread.
#[test]
fn governance_seals_masks_refuses_holds_and_erases() {
    let out = run(&mut example("governance", &[]), Duration::from_secs(60));
    assert!(out.contains("case-1: Completed"), "{out}");
    assert!(out.contains("looked up with •••(file:session-desk-7)"), "{out}");
    assert!(out.contains("the data file holds the address: false; the token: false; the thread id: true"), "{out}");
    assert!(out.contains("sam (support): refused: `sam` may not see personal data unmasked"), "{out}");
    assert!(out.contains("pia (privacy): ada.lovelace@example.com"), "{out}");
    assert!(out.contains("audit log: personal_data.read by pia"), "{out}");
    assert!(out.contains("case-2: refused: refused to store an update: `/notes/0` looks like a GitHub token"), "{out}");
    assert!(!out.contains("ghp_Q3w8"), "the token was printed:\n{out}");
    assert!(out.contains("the data file holds the token: false"), "{out}");
    assert!(out.contains("purge refused: thread `case-1` is under legal hold"), "{out}");
    assert!(out.contains("case-1 is now purged; its audit log verifies: true"), "{out}");
    assert!(out.contains("has no data key of generation 1 (it was destroyed)"), "{out}");
}

/// `mcp_tools`, as a user runs it against the MCP reference server: the read runs at once, the
/// external call waits for an approval and runs once after it.
#[test]
fn mcp_tools_calls_a_read_at_once_and_an_external_call_after_its_approval() {
    if crate::support::mcp::everything_bin().is_none() {
        return;
    }
    let out = run(&mut example("mcp_tools", &[]), Duration::from_secs(120));
    assert!(out.contains("connected to MCP server `everything`: its tools match mcp/everything.json"), "{out}");
    assert!(out.contains("node `toggle` may call: toggle-simulated-logging (external)"), "{out}");
    assert!(out.contains("run `ops-1`: Interrupted { Approval at toggle }"), "{out}");
    assert!(out.contains("get-sum answered: Some(\"The sum of 2 and 3 is 5.\")"), "{out}");
    assert!(out.contains("resumed `ops-1`: Completed"), "{out}");
    assert!(out.contains("toggle-simulated-logging answered: Some(\"Started simulated"), "{out}");
    assert!(
        out.contains("audit log: approval.requested, approval.approved, approval.executing, approval.succeeded"),
        "{out}"
    );
}

/// `upgrade`, one version per process: a process with version 1 parks two threads (a review, an
/// approval) and exits; a process with version 2 completes both through the declared migrations.
/// The store then holds both threads completed under version 2's fingerprint, each with exactly
/// one `graph.migrated` entry, and the renamed tool ran under its new name with mapped arguments.
#[test]
fn upgrade_parks_on_version_1_in_one_process_and_completes_on_version_2_in_another() {
    let dir = temp_dir("upgrade");
    let db = dir.join("upgrade.redb");
    let file = db.to_str().unwrap();
    let parked = run(&mut example("upgrade", &["park", "--store", file]), Duration::from_secs(60));
    assert!(parked.contains("ticket-1 waits for a review in `review`"), "{parked}");
    assert!(parked.contains("ticket-2 waits for an approval in `reply`"), "{parked}");
    {
        let store = open_redb(&db).unwrap();
        for thread in ["ticket-1", "ticket-2"] {
            assert_eq!(store.thread(thread).unwrap().unwrap().status, ThreadStatus::Interrupted);
        }
    }
    let done = run(&mut example("upgrade", &["finish", "--store", file]), Duration::from_secs(60));
    assert!(done.contains("sent a message to ticket-2@example.com: we are on it"), "{done}");
    assert!(!done.contains("sent an email"), "version 1's tool ran: {done}");
    let store = open_redb(&db).unwrap();
    let fingerprint = upgrade::v2::tickets::graph().fingerprint().to_string();
    for thread in ["ticket-1", "ticket-2"] {
        let record = store.thread(thread).unwrap().unwrap();
        assert_eq!(record.status, ThreadStatus::Completed, "{thread}");
        assert_eq!(record.graph_fingerprint, fingerprint, "{thread}");
        let audit = store.list_audit(thread).unwrap();
        let migrated: Vec<_> = audit.iter().filter(|e| e.kind == "graph.migrated").collect();
        assert_eq!(migrated.len(), 1, "{thread}: {audit:?}");
        assert_eq!((migrated[0].detail["from"].as_u64(), migrated[0].detail["to"].as_u64()), (Some(1), Some(2)));
    }
}
