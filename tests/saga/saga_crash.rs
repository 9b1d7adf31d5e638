//! A process killed during compensation, and the compensation resumed in a new process.

use crate::saga_shop::*;
use crate::support::process::own_test;
use crate::support::stores::open_redb;
use crate::support::temp::temp_dir as tempdir;
use agentflow::persist::ThreadStatus;
use agentflow::prelude::*;
use agentflow::{Event, Store};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

// ---------------------------------------------------------------- a crash during compensation

/// The child process body: runs (or resumes) the workflow on a redb file.
/// Not a test on its own: it only runs when the crash test starts this
/// binary with `AGENTFLOW_SAGA_CHILD` set.
#[tokio::test]
#[ignore = "child process of `sigkill_during_compensation_then_resume_in_a_new_process`"]
async fn saga_child() {
    let Ok(dir) = std::env::var("AGENTFLOW_SAGA_CHILD") else { return };
    let dir = PathBuf::from(dir);
    let resume = std::env::var("AGENTFLOW_SAGA_RESUME").is_ok();
    let store: Arc<dyn Store> = Arc::new(open_redb(dir.join("store.redb")).unwrap());
    let shop = Shop { hang_in_release: !resume, ..Shop::new(&dir) };
    let app = app(store);
    let mut nodes_run = Vec::new();
    let runner = app.runner(&shop).thread("order-k").owner("agent:shop").on_event(|e| {
        if let Event::NodeStarted { node, .. } = e {
            nodes_run.push(node);
        }
    });
    let run = if resume { runner.resume().await } else { runner.run(Checkout::default()).await }.unwrap();
    std::fs::write(dir.join("outcome.json"), serde_json::to_vec(&run.outcome).unwrap()).unwrap();
    std::fs::write(dir.join("nodes_on_resume"), nodes_run.join(",")).unwrap();
}

fn child(dir: &Path, resume: bool) -> Command {
    let mut cmd = own_test(module_path!(), "saga_child");
    cmd.env("AGENTFLOW_SAGA_CHILD", dir).stdout(Stdio::null()).stderr(Stdio::piped());
    if resume {
        cmd.env("AGENTFLOW_SAGA_RESUME", "1");
    }
    cmd
}

#[tokio::test]
async fn sigkill_during_compensation_then_resume_in_a_new_process() {
    let dir = tempdir("sigkill");
    // The first process compensates until `release_inventory` is in flight, then is killed.
    let mut first = child(&dir, false).spawn().unwrap();
    let hanging = dir.join("hanging");
    let mut waited = Duration::ZERO;
    while !hanging.exists() {
        if let Some(status) = first.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(first.stderr.as_mut().unwrap(), &mut err).unwrap();
            panic!("the child ended before the compensation hung ({status}): {err}");
        }
        assert!(waited < Duration::from_secs(120), "the child never reached the compensation");
        std::thread::sleep(Duration::from_millis(20));
        waited += Duration::from_millis(20);
    }
    first.kill().unwrap(); // SIGKILL
    first.wait().unwrap();
    assert!(!dir.join("outcome.json").exists());
    {
        let store = open_redb(dir.join("store.redb")).unwrap();
        assert_eq!(store.thread("order-k").unwrap().unwrap().status, ThreadStatus::Compensating);
    }

    // A new process resumes the thread: it continues compensating.
    let out = child(&dir, true).output().unwrap();
    assert!(out.status.success(), "resume failed: {}", String::from_utf8_lossy(&out.stderr));
    let outcome: Outcome = serde_json::from_slice(&std::fs::read(dir.join("outcome.json")).unwrap()).unwrap();
    let Outcome::Compensated { undone: done, .. } = &outcome else { panic!("expected Compensated, got {outcome:?}") };
    assert_eq!(triples(done), undone(&REVERSED));
    let nodes = std::fs::read_to_string(dir.join("nodes_on_resume")).unwrap();
    assert_eq!(nodes, "", "the resume continued the compensation and ran no node");

    // Every forward call and every compensation acted exactly once. The
    // refund finished before the kill and was not run again; the release
    // was cut off before it acted and ran again with the same key.
    let calls = lines(&dir, "calls.log");
    for (tool, n) in [
        ("create_order", 1),
        ("reserve_inventory", 1),
        ("charge_payment", 1),
        ("ship", 1),
        ("refund_payment", 1),
        ("release_inventory", 2),
        ("cancel_order", 1),
    ] {
        assert_eq!(count(&calls, tool), n, "{tool}: {calls:?}");
    }
    assert_eq!(
        lines(&dir, "effects.log"),
        [
            "create ord-1 2xlamp",
            "reserve 2xlamp",
            "charge ord-1 4200",
            "refund pay-3 4200",
            "release res-9 (2)",
            "cancel ord-1"
        ]
    );
    let store = open_redb(dir.join("store.redb")).unwrap();
    assert_eq!(store.thread("order-k").unwrap().unwrap().status, ThreadStatus::Compensated);
    let audit = store.list_audit("order-k").unwrap();
    let compensated: Vec<&str> = audit
        .iter()
        .filter(|e| e.kind == "saga.compensated")
        .map(|e| e.detail["compensation"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(compensated, ["refund_payment", "release_inventory", "cancel_order"]);
    assert_eq!(audit.iter().filter(|e| e.kind == "effect.rerun").count(), 1);
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}
