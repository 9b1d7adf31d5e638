//! Promise (`Durability` docs, agentflow/src/durable/durability.rs): with
//! `Durability::Exit` "only the end of the run (completion, failure, pause)
//! is made durable before the run returns"; with `Async` each step reaches
//! the disk in the background, and the run's end is made durable before the
//! run returns as well (agentflow-store docs: `exit` -> `Eventual` on each
//! step and `Immediate` on the end); and with `Async`, a crash loses at most the
//! store's flush interval; and with `Sync`, each step is on disk before the next starts.
//!
//! A child process (this test binary, started on its ignored `durability_child`
//! test, as tests/crash.rs does) opens a redb file with the background flush
//! switched off (`flush_interval(None)`), so nothing but the run itself makes
//! a commit durable; runs the graph; writes what the run returned to a file;
//! then keeps the store open and sleeps. The parent SIGKILLs it as soon as that
//! file appears (no close, no drop, no flush), reopens the store and reads the
//! thread back.
//!
//! If the promise were false (the end committed like the steps, without a
//! sync) the reopened file would not hold the end: the thread would be missing
//! or still `running` at an earlier checkpoint. The control case shows this
//! harness sees exactly that for a run killed before its end.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::process::own_test;
use crate::support::stores::open_redb;
use agentflow::persist::ThreadStatus;
use agentflow::prelude::*;
use agentflow::{Durability, RedbStore, Store};
use serde::{Deserialize, Serialize};

const STEPS: u32 = 6;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Tally {
    #[reduce(add)]
    count: u32,
    #[reduce(append)]
    trail: Vec<u32>,
    done: bool,
}

/// How `finish` behaves in the child.
pub struct Cfg {
    fail: bool,
    /// Writes this file and blocks forever (the control: killed before the end).
    hang_marker: Option<PathBuf>,
}

#[graph(state = Tally, deps = Cfg, start = tick, max_steps = 50)]
pub mod tally {
    use super::*;

    #[node(goto = [tick, finish])]
    async fn tick(s: &Tally) -> Step<Tally> {
        let u = Tally::update().count(1).trail(vec![s.count]);
        if s.count + 1 >= STEPS { goto!(finish, u) } else { goto!(tick, u) }
    }

    #[node(goto = [END])]
    async fn finish(_s: &Tally, cfg: &Cfg) -> Result<Step<Tally>, NodeError> {
        if let Some(marker) = &cfg.hang_marker {
            std::fs::write(marker, b"").unwrap();
            std::future::pending::<()>().await;
        }
        if cfg.fail {
            return Err(NodeError::fatal("the end failed"));
        }
        Ok(goto!(END, Tally::update().done(true)))
    }
}

/// The child process body. Not a test on its own: it only runs when a test
/// below starts this binary with `PROMISES_DURABILITY_CHILD` set.
#[tokio::test]
#[ignore = "child process of the durability tests"]
async fn durability_child() {
    let Ok(dir) = std::env::var("PROMISES_DURABILITY_CHILD") else { return };
    let dir = PathBuf::from(dir);
    let mode = std::env::var("PROMISES_DURABILITY_MODE").unwrap();
    let end = std::env::var("PROMISES_DURABILITY_END").unwrap();
    let durability = match mode.as_str() {
        "exit" => Durability::Exit,
        "async" => Durability::Async,
        "sync" => Durability::Sync,
        other => panic!("mode {other}"),
    };
    // No background flush (only the run's own durable commits reach the disk), unless the test
    // asks for the store's default one.
    let builder = match std::env::var("PROMISES_DURABILITY_FLUSH").as_deref() {
        Ok("default") => RedbStore::builder(),
        _ => RedbStore::builder().flush_interval(None),
    };
    let store: Arc<dyn Store> = Arc::new(builder.open(dir.join("store.redb")).expect("open store"));
    let app = tally::graph().app().store(Arc::clone(&store));
    let cfg = Cfg { fail: end == "fail", hang_marker: (end == "hang").then(|| dir.join("hanging")) };
    let mut runner = app.runner(&cfg).thread("t").durability(durability);
    if end == "pause" {
        runner = runner.interrupt_before(["finish"]);
    }
    let run = runner.run(Tally::default()).await.expect("the run");
    // What the run returned, written and synced before the parent may kill us.
    let returned = serde_json::json!({ "outcome": run.outcome.to_string(), "state": run.state });
    let tmp = dir.join("returned.tmp");
    std::fs::write(&tmp, returned.to_string()).unwrap();
    std::fs::File::open(&tmp).unwrap().sync_all().unwrap();
    std::fs::rename(&tmp, dir.join("returned.json")).unwrap();
    // Keep the store open (no close, no drop, no flush) until the SIGKILL.
    std::thread::sleep(Duration::from_secs(120));
    drop((app, store));
}

use crate::support::temp::temp_dir as tempdir;

/// Starts the child, waits for `marker` in `dir` (at most a minute), SIGKILLs it.
fn run_child_until(dir: &Path, mode: &str, end: &str, marker: &str) {
    run_child(dir, mode, end, marker, None);
}

/// [`run_child_until`], with the store's default background flush when `flush_for` is set,
/// and that long between the marker and the kill.
fn run_child(dir: &Path, mode: &str, end: &str, marker: &str, flush_for: Option<Duration>) {
    let mut child = own_test(module_path!(), "durability_child")
        .env("PROMISES_DURABILITY_CHILD", dir)
        .env("PROMISES_DURABILITY_MODE", mode)
        .env("PROMISES_DURABILITY_END", end)
        .env("PROMISES_DURABILITY_FLUSH", if flush_for.is_some() { "default" } else { "none" })
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !dir.join(marker).exists() {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
            panic!("the child ended before `{marker}` ({status}): {err}");
        }
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("the child never wrote `{marker}`");
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    if let Some(wait) = flush_for {
        std::thread::sleep(wait);
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
}

/// What the child's run returned, and the thread as the reopened file holds it.
fn killed_after_return(name: &str, mode: &str, end: &str) -> (serde_json::Value, ThreadStatus, Tally) {
    let dir = tempdir(name);
    run_child_until(&dir, mode, end, "returned.json");
    let returned: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("returned.json")).unwrap()).unwrap();
    let store: Arc<dyn Store> = Arc::new(open_redb(dir.join("store.redb")).unwrap());
    let thread = store.thread("t").unwrap().expect("the thread is not in the reopened file");
    let app = tally::graph().app().store(Arc::clone(&store));
    let state = app.state("t").unwrap().expect("no state in the reopened file").state;
    drop((app, store));
    let _ = std::fs::remove_dir_all(&dir);
    (returned, thread.status, state)
}

fn full_tally(done: bool) -> Tally {
    Tally { count: STEPS, trail: (0..STEPS).collect(), done }
}

#[test]
fn exit_a_completed_run_is_durable_when_the_run_returns() {
    let (returned, status, state) = killed_after_return("exit-complete", "exit", "complete");
    assert_eq!(returned["outcome"], "Completed");
    assert_eq!(status, ThreadStatus::Completed);
    assert_eq!(state, full_tally(true));
    assert_eq!(serde_json::to_value(&state).unwrap(), returned["state"]);
}

#[test]
fn exit_a_paused_run_is_durable_when_the_run_returns() {
    let (returned, status, state) = killed_after_return("exit-pause", "exit", "pause");
    assert!(returned["outcome"].as_str().unwrap().starts_with("Interrupted"), "{returned}");
    assert_eq!(status, ThreadStatus::Interrupted);
    assert_eq!(state, full_tally(false));
}

#[test]
fn exit_a_failed_run_is_durable_when_the_run_returns() {
    let (returned, status, state) = killed_after_return("exit-fail", "exit", "fail");
    assert!(returned["outcome"].as_str().unwrap().starts_with("Failed"), "{returned}");
    assert_eq!(status, ThreadStatus::Failed);
    assert_eq!(state, full_tally(false));
}

#[test]
fn async_a_completed_run_is_durable_when_the_run_returns() {
    let (returned, status, state) = killed_after_return("async-complete", "async", "complete");
    assert_eq!(returned["outcome"], "Completed");
    assert_eq!(status, ThreadStatus::Completed);
    assert_eq!(state, full_tally(true));
}

/// `Async`: "a crash loses at most the store's flush interval (200 ms for `RedbStore` by
/// default)". The child runs every `tick` in `Async` mode with the store's default background
/// flush and hangs in `finish`; killed a second (five intervals) after that, the reopened file
/// holds every tick. Without the background flush it holds none of them (the control below,
/// with `Exit`, and `async_without_the_background_flush_the_steps_are_lost`).
#[test]
fn async_steps_reach_the_disk_within_the_flush_interval() {
    let dir = tempdir("async-flush");
    run_child(&dir, "async", "hang", "hanging", Some(Duration::from_secs(1)));
    let store: Arc<dyn Store> = Arc::new(open_redb(dir.join("store.redb")).unwrap());
    let thread = store.thread("t").unwrap().expect("the thread is not in the reopened file");
    assert_eq!(thread.status, ThreadStatus::Running);
    let app = tally::graph().app().store(Arc::clone(&store));
    let state = app.state("t").unwrap().expect("no state in the reopened file").state;
    assert_eq!(state, full_tally(false), "steps committed a second before the crash were lost");
    drop((app, store));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `Sync`: "each step is on disk before the next one starts". The child runs every `tick` with
/// no background flush and hangs in `finish`; killed then, the reopened file holds every tick
/// (the control below shows this harness loses steps that were not made durable).
#[test]
fn sync_each_step_is_on_disk_before_the_next_starts() {
    let dir = tempdir("sync-steps");
    run_child_until(&dir, "sync", "hang", "hanging");
    let store: Arc<dyn Store> = Arc::new(open_redb(dir.join("store.redb")).unwrap());
    assert_eq!(store.thread("t").unwrap().expect("the thread").status, ThreadStatus::Running);
    let app = tally::graph().app().store(Arc::clone(&store));
    let state = app.state("t").unwrap().expect("no state in the reopened file").state;
    assert_eq!(state, full_tally(false), "a Sync step was lost in the crash");
    drop((app, store));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The harness of the test above, without the background flush: the ticks are lost, so that
/// test sees the flush.
#[test]
fn async_without_the_background_flush_the_steps_are_lost() {
    let dir = tempdir("async-control");
    run_child_until(&dir, "async", "hang", "hanging");
    let store: Arc<dyn Store> = Arc::new(open_redb(dir.join("store.redb")).unwrap());
    let app = tally::graph().app().store(Arc::clone(&store));
    let kept = app.state("t").ok().flatten().map(|s| s.state);
    assert!(kept.as_ref().is_none_or(|t| t.count < STEPS), "the steps reached the disk anyway ({kept:?})");
    drop((app, store));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The control: the same harness, killed before the run's end. With `Exit`
/// and no background flush none of the steps is durable, so the reopened
/// file does not hold them: what the tests above would see if the end were
/// not made durable.
#[test]
fn control_exit_steps_killed_before_the_end_are_not_on_disk() {
    let dir = tempdir("exit-control");
    run_child_until(&dir, "exit", "hang", "hanging");
    let store: Arc<dyn Store> = Arc::new(open_redb(dir.join("store.redb")).unwrap());
    let app = tally::graph().app().store(Arc::clone(&store));
    let kept = app.state("t").ok().flatten().map(|s| s.state);
    println!("control: the reopened file holds {kept:?}");
    assert!(
        kept.as_ref().is_none_or(|t| t.count < STEPS),
        "the steps reached the disk anyway ({kept:?}): the kill tests would prove nothing"
    );
    drop((app, store));
    let _ = std::fs::remove_dir_all(&dir);
}
