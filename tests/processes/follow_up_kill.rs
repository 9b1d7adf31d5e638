//! A follow-up run survives its workers being killed (SIGKILL): a worker process killed right
//! after the settle that put the follow-up in its thread's queue row, as it claims it, and
//! another killed right after the follow-up's restart commit. A last worker runs the follow-up
//! once: its update applied once, one restart checkpoint, one `run.follow_up` entry.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::support::hooked_store::Hooked;
use crate::support::process::own_test;
use crate::support::stores::open_redb;
use crate::support::temp::temp_dir;
use crate::support::worker_graph::{Job, job, wait_until};
use agentflow::persist::{CheckpointSource, ThreadStatus};
use agentflow::prelude::*;
use agentflow::{CancellationToken, FollowUpQueued, Multitask, Store, Worker};
use agentflow_store::RunWait;

const LIMIT: Duration = Duration::from_secs(60);
const THREAD: &str = "chat";

fn app_on(store: Arc<dyn Store>) -> App<Job, ()> {
    job::graph().app().store(store)
}

/// Kills this process at once: nothing after it runs.
fn die() -> ! {
    let pid = std::process::id().to_string();
    let _ = std::process::Command::new("kill").args(["-KILL", &pid]).status();
    std::process::abort()
}

/// A worker process on the redb file `AGENTFLOW_FOLLOW_UP_FILE`, killed as
/// `AGENTFLOW_FOLLOW_UP_CUT` says: `claim` as it claims a follow-up run (after the settle that
/// queued it), `restart` right after a commit that wrote a checkpoint (the follow-up's
/// restart, the run before it having ended). Not a test on its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "child process of the test in this file"]
async fn follow_up_worker_child() {
    let (Ok(file), Ok(cut)) = (std::env::var("AGENTFLOW_FOLLOW_UP_FILE"), std::env::var("AGENTFLOW_FOLLOW_UP_CUT"))
    else {
        return;
    };
    let mut hooked = Hooked::new(Arc::new(open_redb(&file).expect("open the redb file")));
    match cut.as_str() {
        "claim" => {
            hooked.after_claim = Some(Box::new(|_, claims, _| {
                if claims.iter().any(|c| c.follow_up) {
                    die();
                }
            }))
        }
        "restart" => hooked.after_checkpoint = Some(Box::new(|| die())),
        other => panic!("no cut named {other}"),
    }
    let app = app_on(Arc::new(hooked));
    let stop = CancellationToken::new();
    let worker = Worker::new(app, Arc::new(())).poll_interval(Duration::from_millis(10));
    // Killed before the time is up; a worker still alive then fails the child.
    let _ = tokio::time::timeout(LIMIT, worker.run(stop)).await;
    panic!("the worker was not killed at its cut");
}

/// Runs the child worker on `file` with cut `cut` and waits for it to be killed.
fn killed_at(file: &Path, cut: &str) {
    let status = own_test(module_path!(), "follow_up_worker_child")
        .env("AGENTFLOW_FOLLOW_UP_FILE", file)
        .env("AGENTFLOW_FOLLOW_UP_CUT", cut)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("run the worker process");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(9), "the worker process was not killed at its cut ({cut}): {status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_runs_once_after_its_workers_are_killed_at_its_claim_and_after_its_restart() {
    let file = temp_dir("follow-up-kill").join("chat.redb");
    {
        let app = app_on(Arc::new(open_redb(&file).unwrap()));
        app.submit_as(THREAD, &Job::new(2, false, 0), "agent:jobs").unwrap();
        // Not started yet: the follow-up waits behind the first run.
        let next = Job::update().n(4).trail(vec!["follow-up".into()]);
        assert_eq!(
            app.submit_follow_up(THREAD, &next, Multitask::Enqueue, "ada").unwrap(),
            FollowUpQueued::Behind { ahead: 0 }
        );
    }

    // The first run ends and its settle puts the follow-up in its place; the worker dies as it
    // claims the follow-up.
    killed_at(&file, "claim");
    {
        let app = app_on(Arc::new(open_redb(&file).unwrap()));
        assert_eq!(app.thread(THREAD).unwrap().unwrap().status, ThreadStatus::Completed);
        assert_eq!(app.state(THREAD).unwrap().unwrap().state.counter, 2);
        let queued = app.live_runs().unwrap();
        assert_eq!(queued.len(), 1, "{queued:?}");
        assert!(queued[0].follow_up && queued[0].wait == RunWait::Ready, "{queued:?}");
        assert!(restarts(&app).is_empty(), "nothing of the follow-up ran");
    }

    // The next worker restarts the thread and dies right after the restart's commit.
    killed_at(&file, "restart");
    {
        let app = app_on(Arc::new(open_redb(&file).unwrap()));
        assert_eq!(restarts(&app).len(), 1, "the restart was committed");
        assert_eq!(app.state(THREAD).unwrap().unwrap().state.trail.last().map(String::as_str), Some("follow-up"));
        assert_eq!(app.live_runs().unwrap().len(), 1, "the follow-up is still queued");
    }

    // A worker that lives runs it to its end, applying the update once.
    let app = app_on(Arc::new(open_redb(&file).unwrap()));
    let stop = CancellationToken::new();
    let worker =
        tokio::spawn(Worker::new(app.clone(), Arc::new(())).poll_interval(Duration::from_millis(10)).run(stop.clone()));
    wait_until("the follow-up completes", LIMIT, || {
        app.live_runs().unwrap().is_empty()
            && app.thread(THREAD).unwrap().is_some_and(|t| t.status == ThreadStatus::Completed)
    })
    .await;
    stop.cancel();
    let report = worker.await.unwrap().unwrap();
    assert_eq!((report.completed, report.failed), (1, 0), "{report:?}");
    let state = app.state(THREAD).unwrap().unwrap().state;
    assert_eq!(state.counter, 4);
    assert_eq!(state.trail.iter().filter(|t| *t == "follow-up").count(), 1, "{:?}", state.trail);
    assert_eq!(restarts(&app).len(), 1);
    let follow_ups = app.audit_log(THREAD).unwrap().into_iter().filter(|e| e.kind == "run.follow_up").count();
    assert_eq!(follow_ups, 1);
}

/// The thread's restart checkpoints: those after its input with source `Input`.
fn restarts(app: &App<Job, ()>) -> Vec<u64> {
    let history = app.history(THREAD).unwrap();
    history.iter().filter(|c| c.seq > 0 && c.metadata.source == CheckpointSource::Input).map(|c| c.seq).collect()
}
