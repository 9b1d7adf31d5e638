//! Worker processes sharing one PostgreSQL store (the server at `AGENTFLOW_PG_URL`; skipped with
//! one line when it is unset, failing under `CI=true`). This test binary starts copies of
//! itself as worker processes (`worker_child`), and this process submits runs, decides
//! approvals, cancels and checks, as an operator's process would.
//!
//! - 3 workers, 200 cycle threads and 6 that need an approval; one worker is SIGKILLed
//!   mid-run: every thread completes, every step is applied once, every journaled effect ran
//!   once (outside the killed process), and no thread's history branches.
//! - A worker SIGSTOPped past its lease, whose thread another worker took, is refused when it
//!   wakes (SIGCONT) and tries to commit: it reports the lease lost and wrote nothing.
//! - A cancel request from this process stops a thread a worker process runs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::Duration;

use crate::support::pg::pg_url;
use crate::support::process::own_test;
use crate::support::worker_graph::{Job, assert_linear_history, authorizer, fresh_schema, job, wait_until};
use agentflow::Worker;
use agentflow::approval::{Approver, Settlement};
use agentflow::persist::ThreadStatus;
use agentflow::prelude::*;
use agentflow::{CancellationToken, Store};
use agentflow_store::{ApprovalStatus, PostgresStore};

const LIMIT: Duration = Duration::from_secs(90);

fn app(url: &str, schema: &str) -> App<Job, ()> {
    let store = PostgresStore::builder().schema(schema).open(url).expect("open the PostgreSQL store");
    job::graph().app().store(Arc::new(store) as Arc<dyn Store>)
}

// ---------------------------------------------------------------- the child process

/// A worker process. Not a test on its own: it only runs when the tests below start this
/// binary with `AGENTFLOW_WORKER_CHILD` set. It stops gracefully once the file named by
/// `AGENTFLOW_WORKER_STOP` exists, then writes its report to `AGENTFLOW_WORKER_REPORT`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "child process of the tests in this file"]
async fn worker_child() {
    if std::env::var("AGENTFLOW_WORKER_CHILD").is_err() {
        return;
    }
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} is set"));
    let app = app(&var("AGENTFLOW_PG_URL"), &var("AGENTFLOW_WORKER_SCHEMA"));
    let ttl = Duration::from_millis(var("AGENTFLOW_WORKER_TTL_MS").parse().unwrap());
    let stop_file = PathBuf::from(var("AGENTFLOW_WORKER_STOP"));
    let stop = CancellationToken::new();
    let watcher = {
        let stop = stop.clone();
        tokio::spawn(async move {
            while !stop_file.exists() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            stop.cancel();
        })
    };
    let worker = Worker::new(app, Arc::new(())).concurrency(8).lease_ttl(ttl).poll_interval(Duration::from_millis(20));
    let report = worker.run(stop).await.expect("the worker runs");
    watcher.abort();
    let line = format!(
        "claimed={} completed={} interrupted={} failed={} controlled={} lost={} stopped={}",
        report.claimed,
        report.completed,
        report.interrupted,
        report.failed,
        report.controlled,
        report.lost,
        report.stopped
    );
    std::fs::write(var("AGENTFLOW_WORKER_REPORT"), line).unwrap();
}

/// A worker process and the files it is driven by.
struct WorkerProcess {
    child: Child,
    stop: PathBuf,
    report: PathBuf,
}

impl WorkerProcess {
    fn start(dir: &Path, name: &str, url: &str, schema: &str, ttl_ms: u64) -> Self {
        let (stop, report) = (dir.join(format!("{name}.stop")), dir.join(format!("{name}.report")));
        let child = own_test(module_path!(), "worker_child")
            .env("AGENTFLOW_WORKER_CHILD", name)
            .env("AGENTFLOW_PG_URL", url)
            .env("AGENTFLOW_WORKER_SCHEMA", schema)
            .env("AGENTFLOW_WORKER_TTL_MS", ttl_ms.to_string())
            .env("AGENTFLOW_WORKER_STOP", &stop)
            .env("AGENTFLOW_WORKER_REPORT", &report)
            .env("AGENTFLOW_WORKER_LEDGER", dir.join("ledger.txt"))
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("start a worker process");
        WorkerProcess { child, stop, report }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether `holder` (a lease holder id) is this process's.
    fn holds(&self, holder: &str) -> bool {
        holder.contains(&format!("-pid{}-", self.pid()))
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill").args([signal, &self.pid().to_string()]).status().unwrap();
        assert!(status.success(), "kill {signal} {}", self.pid());
    }

    /// Stops it gracefully and answers its report: `name -> count`.
    fn stop(mut self) -> BTreeMap<String, u64> {
        std::fs::write(&self.stop, "").unwrap();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "worker process {} failed", self.pid());
        let report = std::fs::read_to_string(&self.report).unwrap();
        report
            .split_whitespace()
            .map(|kv| {
                let (k, v) = kv.split_once('=').unwrap();
                (k.to_string(), v.parse().unwrap())
            })
            .collect()
    }
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        // A test that failed midway leaves no process behind.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

use crate::support::temp::temp_dir;

/// The ledger: for each `(thread, key)`, the pids that ran the effect.
fn ledger(dir: &Path) -> BTreeMap<(String, String), Vec<u32>> {
    let text = std::fs::read_to_string(dir.join("ledger.txt")).unwrap_or_default();
    let mut runs: BTreeMap<(String, String), Vec<u32>> = BTreeMap::new();
    for line in text.lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(parts.len(), 3, "ledger line {line:?}");
        runs.entry((parts[0].to_string(), parts[1].to_string())).or_default().push(parts[2].parse().unwrap());
    }
    runs
}

/// The process that ran each step of a finished job (from its trail).
fn step_pids(app: &App<Job, ()>, thread: &str) -> Vec<u32> {
    let trail = app.state(thread).unwrap().unwrap().state.trail;
    trail.iter().map(|t| t.split(':').nth(1).unwrap().parse().unwrap()).collect()
}

// ---------------------------------------------------------------- the tests

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_worker_processes_finish_every_thread_once_when_one_is_killed() {
    let Some(url) = pg_url() else { return };
    let (schema, dir) = (fresh_schema("kill"), temp_dir("kill"));
    let ops = app(&url, &schema);
    const STEPS: u64 = 6;
    for i in 0..200 {
        ops.submit_as(&format!("c{i:03}"), &Job::new(STEPS, false, 20), "agent:jobs").unwrap();
    }
    for i in 0..6 {
        ops.submit_as(&format!("pay{i}"), &Job::new(2, true, 0), "agent:refund-bot").unwrap();
    }
    let victim = WorkerProcess::start(&dir, "w0", &url, &schema, 1000);
    let others: Vec<_> = (1..3).map(|i| WorkerProcess::start(&dir, &format!("w{i}"), &url, &schema, 1000)).collect();

    // Kill w0 while it holds threads, after some have completed. It is stopped (SIGSTOP)
    // first and only then looked at: what it had not finished then, it never finishes, however
    // slowly this process goes. A look that finds it holding nothing (it was idle, or this
    // process was so slow that its leases, 1 s, expired and were taken over) lets it go on
    // (SIGCONT) until the next look.
    let store = ops.backing_store().unwrap();
    let mut held = BTreeSet::new();
    let w0_runs = |ops: &App<Job, ()>| -> BTreeSet<String> {
        ops.live_runs()
            .unwrap()
            .into_iter()
            .filter(|r| r.thread.starts_with('c') && r.lease.as_ref().is_some_and(|l| victim.holds(&l.holder)))
            .map(|r| r.thread)
            .collect()
    };
    wait_until("w0 is stopped holding threads mid-run", LIMIT, || {
        let completed = store.list_threads().unwrap().iter().filter(|t| t.status == ThreadStatus::Completed).count();
        if completed < 20 || w0_runs(&ops).is_empty() {
            return false;
        }
        victim.signal("-STOP");
        // Those it has not finished (it may have stopped between a thread's last step and
        // letting go of its run).
        held = w0_runs(&ops)
            .into_iter()
            .filter(|t| store.thread(t).unwrap().is_none_or(|th| th.status != ThreadStatus::Completed))
            .collect();
        if held.is_empty() {
            victim.signal("-CONT");
        }
        !held.is_empty()
    })
    .await;
    let killed = victim.pid();
    drop(victim); // SIGKILL, and waits for the process to be gone
    assert!(held.len() <= 8);

    // Approvals are decided here, by a person, once each call is parked.
    let desk = ops.approvals(authorizer()).unwrap();
    let alice = Approver::new("alice", ["refund-approver"]);
    wait_until("every thread completes", LIMIT, || {
        for pending in desk.pending().unwrap() {
            if pending.status == ApprovalStatus::OutcomeUnknown {
                // An effect the kill cut off mid-call: its outcome is unknown, so the run waits
                // for a person, who says to run it again.
                desk.settle(&pending.id, &alice, Settlement::RunAgain).unwrap();
            } else {
                desk.approve(&pending.id, &alice).unwrap();
            }
        }
        ops.live_runs().unwrap().is_empty()
    })
    .await;
    let reports: Vec<_> = others.into_iter().map(WorkerProcess::stop).collect();

    let threads = ops.backing_store().unwrap().list_threads().unwrap();
    assert_eq!(threads.len(), 206);
    for t in &threads {
        assert_eq!(t.status, ThreadStatus::Completed, "{}: {}", t.id, t.detail);
    }
    let runs = ledger(&dir);
    for i in 0..200 {
        let thread = format!("c{i:03}");
        let state = ops.state(&thread).unwrap().unwrap().state;
        assert_eq!(state.counter, STEPS, "{thread}: each step applied once");
        assert_eq!(assert_linear_history(ops.backing_store().unwrap().as_ref(), &thread), STEPS as usize + 1);
        for step in 0..STEPS {
            let key = format!("step{step}");
            let pids = runs.get(&(thread.clone(), key.clone())).unwrap_or_else(|| panic!("{thread} {key} never ran"));
            // A call cut off by the kill (run, not yet journaled) runs again: that is the only
            // second run allowed, and it is the killed process's.
            let survivors = pids.iter().filter(|p| **p != killed).count();
            assert!(survivors <= 1, "{thread} {key} ran in {pids:?}");
            // The journaled result names the process whose run counts.
            let journaled = state.trail[step as usize].rsplit('@').next().unwrap().parse::<u32>().unwrap();
            assert!(pids.contains(&journaled), "{thread} {key}: journaled by {journaled}, ran in {pids:?}");
        }
    }
    // The threads w0 held unfinished when it was stopped: a step it had sent to the store
    // before may still have landed (one per thread), but not all of them can have been their
    // last. The others finished them.
    let finished_by_others: Vec<&String> = held.iter().filter(|t| step_pids(&ops, t).last() != Some(&killed)).collect();
    assert!(!finished_by_others.is_empty(), "w0 had finished all of {held:?} when it was stopped");
    // Each refund ran exactly once, after its approval.
    for i in 0..6 {
        let thread = format!("pay{i}");
        assert_eq!(runs.get(&(thread.clone(), "refund".to_string())).map(Vec::len), Some(1), "{thread}");
        assert_eq!(ops.state(&thread).unwrap().unwrap().state.receipt.unwrap()["result"]["refunded"], 10);
    }
    // Both survivors did part of the work (the killed worker's own completions are not in any
    // report, so the survivors' sum may be under 206).
    assert!(reports.iter().all(|r| r["completed"] > 0), "{reports:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_stopped_past_its_lease_is_refused_when_it_wakes() {
    let Some(url) = pg_url() else { return };
    let (schema, dir) = (fresh_schema("stop"), temp_dir("stop"));
    let ops = app(&url, &schema);
    ops.submit_as("slow", &Job::new(60, false, 20), "agent:jobs").unwrap();
    let a = WorkerProcess::start(&dir, "a", &url, &schema, 1000);
    let holder = |ops: &App<Job, ()>| ops.thread("slow").unwrap().and_then(|t| t.lease).map(|l| l.holder);
    wait_until("a runs the thread", LIMIT, || {
        ops.history("slow").map(|h| h.len() > 3).unwrap_or(false) && holder(&ops).is_some_and(|h| a.holds(&h))
    })
    .await;
    a.signal("-STOP");
    let stopped_at = ops.history("slow").unwrap().len();

    // Its lease expires; b claims the thread and moves it on.
    let b = WorkerProcess::start(&dir, "b", &url, &schema, 1000);
    let b_pid = b.pid();
    wait_until("b took the thread over and advanced it", LIMIT, || {
        holder(&ops).is_some_and(|h| b.holds(&h)) && ops.history("slow").unwrap().len() > stopped_at + 3
    })
    .await;
    a.signal("-CONT");
    // a finishes its step, and its commit is refused: the lease is b's.
    let report_a = a.stop();
    assert_eq!((report_a["claimed"], report_a["lost"], report_a["completed"]), (1, 1, 0), "{report_a:?}");

    wait_until("the thread completes", LIMIT, || ops.live_runs().unwrap().is_empty()).await;
    let report_b = b.stop();
    assert_eq!(report_b["completed"], 1, "{report_b:?}");
    let state = ops.state("slow").unwrap().unwrap().state;
    assert_eq!(state.counter, 60);
    assert_eq!(assert_linear_history(ops.backing_store().unwrap().as_ref(), "slow"), 61);
    // a's steps all come before b's: nothing of a's was committed after b took over.
    let pids = step_pids(&ops, "slow");
    let first_b = pids.iter().position(|p| *p == b_pid).expect("b ran steps");
    assert!(pids[first_b..].iter().all(|p| *p == b_pid), "{pids:?}");
    // Every effect ran once: a's woken step found b's journaled result.
    for (key, pids) in ledger(&dir) {
        assert_eq!(pids.len(), 1, "{key:?} ran in {pids:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_running_in_a_worker_process_is_cancelled_from_this_process() {
    let Some(url) = pg_url() else { return };
    let (schema, dir) = (fresh_schema("cancel"), temp_dir("cancel"));
    let ops = app(&url, &schema);
    ops.submit_as("endless", &Job::new(1_000_000, false, 2), "agent:jobs").unwrap();
    let w = WorkerProcess::start(&dir, "w", &url, &schema, 5000);
    wait_until("the worker runs it", LIMIT, || ops.history("endless").map(|h| h.len() > 3).unwrap_or(false)).await;
    let live = ops.live_runs().unwrap();
    assert!(live[0].holder.as_deref().is_some_and(|h| w.holds(h)), "{live:?}");
    assert!(live[0].heartbeat_at.is_some());
    assert!(ops.cancel_run("endless").unwrap());
    wait_until("the run leaves the queue", LIMIT, || ops.live_runs().unwrap().is_empty()).await;
    let report = w.stop();
    assert_eq!(report["controlled"], 1, "{report:?}");
    assert_eq!(ops.thread("endless").unwrap().unwrap().status, ThreadStatus::Cancelled);
    let state = ops.state("endless").unwrap().unwrap().state;
    assert_eq!(assert_linear_history(ops.backing_store().unwrap().as_ref(), "endless") as u64, state.counter + 1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_paused_from_this_process_is_resumed_by_a_worker_process_where_it_stopped() {
    let Some(url) = pg_url() else { return };
    let (schema, dir) = (fresh_schema("pause"), temp_dir("pause"));
    let ops = app(&url, &schema);
    const STEPS: u64 = 60;
    // The fourth step is held until the run is asked to stop: still running when paused.
    let marker = dir.join("held");
    ops.submit_as("paused", &Job::new(STEPS, false, 5).held_at(3, &marker), "agent:jobs").unwrap();
    let w = WorkerProcess::start(&dir, "w", &url, &schema, 5000);
    wait_until("the worker runs its fourth step", LIMIT, || marker.exists()).await;
    assert!(ops.pause_run("paused").unwrap());
    wait_until("the run leaves the queue", LIMIT, || ops.live_runs().unwrap().is_empty()).await;
    assert_eq!(ops.thread("paused").unwrap().unwrap().status, ThreadStatus::Paused);
    let at = ops.state("paused").unwrap().unwrap().state.counter;
    assert_eq!(at, 3, "paused inside the step it was asked in: the steps before it kept, that one dropped");

    ops.submit_resume("paused").unwrap();
    wait_until("the thread completes", LIMIT, || ops.live_runs().unwrap().is_empty()).await;
    let report = w.stop();
    assert_eq!((report["claimed"], report["controlled"], report["completed"]), (2, 1, 1), "{report:?}");
    assert_eq!(ops.thread("paused").unwrap().unwrap().status, ThreadStatus::Completed);
    let state = ops.state("paused").unwrap().unwrap().state;
    assert_eq!(state.counter, STEPS);
    assert_eq!(assert_linear_history(ops.backing_store().unwrap().as_ref(), "paused"), STEPS as usize + 1);
    // Every step's effect ran once, in order: none lost or repeated across the pause.
    let runs = ledger(&dir);
    assert_eq!(runs.len(), STEPS as usize);
    for step in 0..STEPS {
        let pids = &runs[&("paused".to_string(), format!("step{step}"))];
        assert_eq!(pids.len(), 1, "step{step} ran in {pids:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
