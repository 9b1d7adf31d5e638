//! Durable execution on the redb store: checkpoints, resume, pending writes,
//! the effect journal, history, forks, leases and compatibility refusals.

use crate::support::hooked_store;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use agentflow::persist::{CheckpointSource, ResumeError};
use agentflow::prelude::*;
use agentflow::{Durability, RunError};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Job {
    #[reduce(append)]
    log: Vec<String>,
    #[reduce(add)]
    total: u64,
    receipt: Option<String>,
}

#[derive(Default)]
pub struct Deps {
    /// How often the flaky branch fails before it succeeds.
    pub fail_right: AtomicU32,
    pub right_runs: AtomicU32,
    pub left_runs: AtomicU32,
    pub charges: AtomicU32,
    /// How often `charge` fails after its effect ran.
    pub fail_after_charge: AtomicU32,
}

#[graph(state = Job, deps = Deps, start = split, max_steps = 10)]
mod job {
    use super::*;

    #[node(goto = [left, right])]
    async fn split(_s: &Job) -> Step<Job> {
        goto!([left, right], Job::update().log(vec!["split".into()]))
    }

    #[node(goto = [charge])]
    async fn left(_s: &Job, deps: &Deps) -> Step<Job> {
        deps.left_runs.fetch_add(1, Ordering::SeqCst);
        goto!(charge, Job::update().log(vec!["left".into()]).total(1))
    }

    #[node(goto = [charge])]
    async fn right(_s: &Job, deps: &Deps) -> Result<Step<Job>, NodeError> {
        deps.right_runs.fetch_add(1, Ordering::SeqCst);
        if deps.fail_right.load(Ordering::SeqCst) > 0 {
            deps.fail_right.fetch_sub(1, Ordering::SeqCst);
            return Err(NodeError::fatal("downstream is down"));
        }
        Ok(goto!(charge, Job::update().log(vec!["right".into()]).total(10)))
    }

    #[node(goto = [END])]
    async fn charge(s: &Job, cx: &Ctx<Deps>) -> Result<Step<Job>, NodeError> {
        let total = s.total;
        let receipt = cx
            .effect("charge-card", |key| async move {
                cx.deps().charges.fetch_add(1, Ordering::SeqCst);
                Ok::<_, NodeError>(format!("receipt for {total} ({key})"))
            })
            .await?;
        if cx.deps().fail_after_charge.load(Ordering::SeqCst) > 0 {
            cx.deps().fail_after_charge.fetch_sub(1, Ordering::SeqCst);
            return Err(NodeError::fatal("crashed after charging"));
        }
        Ok(goto!(END, Job::update().receipt(Some(receipt))))
    }
}

use crate::support::stores::store;

#[tokio::test]
async fn every_step_is_a_checkpoint_and_the_latest_state_matches_the_run() {
    let graph = job::graph().app().store(store());
    let deps = Deps::default();
    let run = graph.runner(&deps).thread("t1").run(Job::default()).await.unwrap();
    assert_eq!(run.outcome, Outcome::Completed);
    let history = graph.history("t1").unwrap();
    // input + one checkpoint per super-step
    assert_eq!(history.len() as u32, run.steps + 1);
    assert_eq!(history[0].metadata.source, CheckpointSource::Input);
    let latest = graph.state("t1").unwrap().expect("thread exists");
    assert_eq!(latest.state, run.state);
    assert!(latest.next.is_empty());
    // state at an earlier checkpoint: after split and the two branches
    let mid = graph.state_at("t1", 2).unwrap().unwrap();
    assert_eq!(mid.state.log, vec!["split", "left", "right"]);
    assert_eq!(mid.next, vec!["charge"]);
    assert_eq!(graph.thread("t1").unwrap().unwrap().status, agentflow::persist::ThreadStatus::Completed);
}

#[tokio::test]
async fn resume_after_a_failed_step_reruns_only_the_failed_node() {
    let graph = job::graph().app().store(store());
    let deps = Deps::default();
    deps.fail_right.store(1, Ordering::SeqCst);
    let first = graph.runner(&deps).thread("t2").run(Job::default()).await.unwrap();
    assert!(matches!(&first.outcome, Outcome::Failed { node, .. } if node == "right"), "{:?}", first.outcome);
    assert_eq!(deps.left_runs.load(Ordering::SeqCst), 1);

    let resumed = graph.runner(&deps).thread("t2").resume().await.unwrap();
    assert_eq!(resumed.outcome, Outcome::Completed);
    // `left` finished in the failed step: its write was kept, it did not run again.
    assert_eq!(deps.left_runs.load(Ordering::SeqCst), 1);
    assert_eq!(deps.right_runs.load(Ordering::SeqCst), 2);
    assert_eq!(resumed.state.log, vec!["split", "left", "right"]);
    assert_eq!(resumed.state.total, 11);
}

#[tokio::test]
async fn a_completed_thread_cannot_be_resumed_or_restarted() {
    let graph = job::graph().app().store(store());
    let deps = Deps::default();
    graph.runner(&deps).thread("t3").run(Job::default()).await.unwrap();
    let again = graph.runner(&deps).thread("t3").resume().await.unwrap_err();
    assert!(matches!(again, RunError::Resume(ResumeError::Finished { .. })), "{again}");
    let restart = graph.runner(&deps).thread("t3").run(Job::default()).await.unwrap_err();
    assert!(matches!(restart, RunError::ThreadExists { .. }), "{restart}");
}

#[tokio::test]
async fn effects_run_once_when_their_node_runs_again() {
    let graph = job::graph().app().store(store());
    let deps = Deps::default();
    deps.fail_after_charge.store(1, Ordering::SeqCst);
    let first = graph.runner(&deps).thread("t4").run(Job::default()).await.unwrap();
    assert!(matches!(&first.outcome, Outcome::Failed { node, .. } if node == "charge"), "{:?}", first.outcome);
    assert_eq!(deps.charges.load(Ordering::SeqCst), 1);
    // `charge` runs again from its start; the journal returns the first receipt.
    let resumed = graph.runner(&deps).thread("t4").resume().await.unwrap();
    assert_eq!(resumed.outcome, Outcome::Completed);
    assert_eq!(deps.charges.load(Ordering::SeqCst), 1);
    let receipt = resumed.state.receipt.unwrap();
    assert!(receipt.starts_with("receipt for 11 (t4/"), "{receipt}");
    assert!(receipt.ends_with("/charge/charge-card)"), "{receipt}");
}

#[tokio::test]
async fn a_fork_of_a_completed_thread_runs_the_branch_again() {
    let graph = job::graph().app().store(store());
    let deps = Deps::default();
    let first = graph.runner(&deps).thread("t8").run(Job::default()).await.unwrap();
    // Back to the checkpoint before `charge`: a new branch, so a new charge.
    let fork = graph.fork("t8", 2, "tester").unwrap();
    assert_eq!(graph.state("t8").unwrap().unwrap().next, vec!["charge"]);
    let second = graph.runner(&deps).thread("t8").resume().await.unwrap();
    assert_eq!(second.outcome, Outcome::Completed);
    assert_eq!(second.state.total, first.state.total);
    assert_eq!(deps.charges.load(Ordering::SeqCst), 2);
    let history = graph.history("t8").unwrap();
    assert!(history.iter().any(|c| c.seq == fork && c.parent == Some(2)));
}

#[tokio::test]
async fn fork_and_update_state_add_checkpoints_without_rewriting_history() {
    let graph = job::graph().app().store(store());
    let deps = Deps::default();
    deps.fail_right.store(5, Ordering::SeqCst);
    graph.runner(&deps).thread("t5").run(Job::default()).await.unwrap();
    let before = graph.history("t5").unwrap();
    let seq = graph.update_state("t5", Job::update().log(vec!["operator note".into()]).total(100), "alice").unwrap();
    let after = graph.history("t5").unwrap();
    assert_eq!(after.len(), before.len() + 1);
    assert_eq!(after[..before.len()], before[..]);
    let now = graph.state("t5").unwrap().unwrap();
    assert_eq!(now.seq, seq);
    assert_eq!(now.state.total, 100);
    assert_eq!(now.state.log.last().map(String::as_str), Some("operator note"));
    let audit = graph.audit_log("t5").unwrap();
    assert!(audit.iter().any(|e| e.kind == "state.updated" && e.actor == "alice"));

    let forked = graph.fork("t5", 0, "alice").unwrap();
    let snap = graph.state("t5").unwrap().unwrap();
    assert_eq!(snap.seq, forked);
    assert_eq!(snap.parent, Some(0));
    assert_eq!(snap.state, Job::default());
    // The fork continues from the input.
    deps.fail_right.store(0, Ordering::SeqCst);
    let run = graph.runner(&deps).thread("t5").resume().await.unwrap();
    assert_eq!(run.outcome, Outcome::Completed);
    assert_eq!(run.state.total, 11);
}

#[tokio::test]
async fn a_changed_graph_is_refused_with_what_changed() {
    #[graph(state = Job, deps = Deps, start = split, max_steps = 10)]
    mod job_v2 {
        use super::*;

        #[node(goto = [left, END])]
        async fn split(_s: &Job) -> Step<Job> {
            goto!(END)
        }

        #[node(goto = [END])]
        async fn left(_s: &Job) -> Step<Job> {
            goto!(END)
        }
    }
    let store = store();
    let deps = Deps::default();
    deps.fail_right.store(1, Ordering::SeqCst);
    let v1 = job::graph().app().store(Arc::clone(&store));
    v1.runner(&deps).thread("t6").run(Job::default()).await.unwrap();
    let v2 = job_v2::graph().app().store(store);
    let err = v2.runner(&deps).thread("t6").resume().await.unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, RunError::Resume(ResumeError::GraphChanged { .. })), "{msg}");
    assert!(msg.contains("node `right` was removed"), "{msg}");
    assert!(msg.contains("routes of `split` changed"), "{msg}");
}

#[tokio::test]
async fn a_held_thread_is_busy_for_a_second_executor() {
    let store = store();
    store.acquire_lease("t7", "someone-else", 60_000, agentflow_now()).unwrap();
    let graph = job::graph().app().store(store);
    let deps = Deps::default();
    let err = graph.runner(&deps).thread("t7").run(Job::default()).await.unwrap_err();
    assert!(matches!(&err, RunError::ThreadBusy { holder, .. } if holder == "someone-else"), "{err}");
}

#[tokio::test]
async fn durability_modes_all_persist_the_same_history() {
    for (i, mode) in [Durability::Sync, Durability::Async, Durability::Exit].into_iter().enumerate() {
        let graph = job::graph().app().store(store());
        let deps = Deps::default();
        let thread = format!("d{i}");
        let run = graph.runner(&deps).thread(&thread).durability(mode).run(Job::default()).await.unwrap();
        assert_eq!(graph.state(&thread).unwrap().unwrap().state, run.state, "{mode:?}");
    }
}

fn agentflow_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Slow {
    #[reduce(add)]
    n: u32,
}

#[graph(state = Slow, start = wait, max_steps = 5)]
mod slow {
    use super::*;
    #[node(goto = [END])]
    async fn wait(_s: &Slow) -> Step<Slow> {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        goto!(END, Slow::update().n(1))
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Renamed {
    // Was `log: Vec<String>` (the `Job` state) when the thread was stored.
    log: Vec<u64>,
}

#[graph(state = Renamed, start = only)]
mod renamed {
    use super::*;
    #[node(goto = [END])]
    async fn only(_s: &Renamed) -> Step<Renamed> {
        goto!(END)
    }
}

/// The same graph before and after its state changed shape.
mod schema_v1 {
    use super::*;

    #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
    #[state(version = 1)]
    pub struct Person {
        pub name: String,
    }

    #[graph(state = Person, start = greet, max_steps = 3)]
    pub mod flow {
        use super::*;
        #[node(goto = [END], interrupt)]
        async fn greet(_s: &Person, cx: &Ctx<()>) -> Result<Step<Person>, NodeError> {
            let _: String = cx.interrupt("who?")?;
            Ok(goto!(END))
        }
    }
}

mod schema_v2 {
    use super::*;

    #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
    #[state(version = 2)]
    pub struct Person {
        pub first: String,
        pub last: String,
    }

    #[graph(state = Person, start = greet, max_steps = 3)]
    pub mod flow {
        use super::*;
        #[node(goto = [END], interrupt)]
        async fn greet(s: &Person, cx: &Ctx<()>) -> Result<Step<Person>, NodeError> {
            let _: String = cx.interrupt("who?")?;
            Ok(goto!(END, Person::update().last(format!("{} (checked)", s.last))))
        }
    }
}

/// The same two-question graph before and after its state changed shape.
mod asked_v1 {
    use super::*;

    #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
    #[state(version = 1)]
    pub struct Person {
        pub name: String,
    }

    #[graph(state = Person, start = greet, max_steps = 5)]
    pub mod flow {
        use super::*;
        #[node(goto = [confirm], interrupt)]
        async fn greet(_s: &Person, cx: &Ctx<()>) -> Result<Step<Person>, NodeError> {
            let _: String = cx.interrupt("who?")?;
            Ok(goto!(confirm))
        }
        #[node(goto = [END], interrupt)]
        async fn confirm(_s: &Person, cx: &Ctx<()>) -> Result<Step<Person>, NodeError> {
            let _: String = cx.interrupt("sure?")?;
            Ok(goto!(END))
        }
    }
}

mod asked_v2 {
    use super::*;

    #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
    #[state(version = 2)]
    pub struct Person {
        pub first: String,
        pub last: String,
    }

    #[graph(state = Person, start = greet, max_steps = 5)]
    pub mod flow {
        use super::*;
        #[node(goto = [confirm], interrupt)]
        async fn greet(s: &Person, cx: &Ctx<()>) -> Result<Step<Person>, NodeError> {
            let _: String = cx.interrupt("who?")?;
            Ok(goto!(confirm, Person::update().last(format!("{} (checked)", s.last))))
        }
        #[node(goto = [END], interrupt)]
        async fn confirm(_s: &Person, cx: &Ctx<()>) -> Result<Step<Person>, NodeError> {
            let _: String = cx.interrupt("sure?")?;
            Ok(goto!(END))
        }
    }
}

/// A thread migrated on resume that pauses again before it ends stays readable and resumable:
/// the migrated state is stored as a snapshot of the new version with the first step after the
/// migration, and until then the thread keeps the version its snapshot has.
#[tokio::test]
async fn a_migrated_thread_that_pauses_again_resumes_again() {
    let store = store();
    let old = asked_v1::flow::graph().app().store(Arc::clone(&store));
    let run = old.runner(&()).thread("m2").run(asked_v1::Person { name: "Ada Lovelace".into() }).await.unwrap();
    assert!(matches!(run.outcome, Outcome::Interrupted { .. }), "{:?}", run.outcome);
    let migrated = asked_v2::flow::graph().app().store(store).migration(1, |old| {
        let name = old["name"].as_str().ok_or("no name")?.to_string();
        let (first, last) = name.split_once(' ').ok_or("expected a first and a last name")?;
        Ok(serde_json::json!({ "first": first, "last": last }))
    });
    let run = migrated.runner(&()).thread("m2").resume_with("Ada").await.unwrap();
    assert!(matches!(run.outcome, Outcome::Interrupted { .. }), "{:?}", run.outcome);
    let expected = asked_v2::Person { first: "Ada".into(), last: "Lovelace (checked)".into() };
    assert_eq!(migrated.state("m2").unwrap().unwrap().state, expected);
    let run = migrated.runner(&()).thread("m2").resume_with("yes").await.unwrap();
    assert_eq!(run.outcome, Outcome::Completed);
    assert_eq!(run.state, expected);
}

/// A migrated run whose first step's commit fails leaves the thread as it was stored: of the old
/// version, so the next resume migrates it again. (The record said the new version over the old
/// snapshot before, which no resume could read.)
#[tokio::test]
async fn a_migrated_run_whose_first_commit_fails_keeps_the_stored_version() {
    let inner = store();
    let old = asked_v1::flow::graph().app().store(Arc::clone(&inner));
    old.runner(&()).thread("m3").run(asked_v1::Person { name: "Ada Lovelace".into() }).await.unwrap();
    let migrate = |mut old: serde_json::Value| {
        let name = old["name"].as_str().ok_or("no name")?.to_string();
        let (first, last) = name.split_once(' ').ok_or("expected a first and a last name")?;
        old = serde_json::json!({ "first": first, "last": last });
        Ok(old)
    };
    let mut hooked = hooked_store::Hooked::new(Arc::clone(&inner));
    let failed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let once = Arc::clone(&failed);
    hooked.fail_commit = Some(Box::new(move |commit| {
        (commit.checkpoint.is_some() && !once.swap(true, Ordering::SeqCst))
            .then(|| agentflow_store::CommitError::Invalid { thread: "m3".into(), reason: "the disk is full".into() })
    }));
    let failing = asked_v2::flow::graph().app().store(Arc::new(hooked)).migration(1, migrate);
    let _ = failing.runner(&()).thread("m3").resume_with("Ada").await;
    assert!(failed.load(Ordering::SeqCst), "the step's commit was never tried");
    assert_eq!(inner.thread("m3").unwrap().unwrap().schema_version, 1, "the snapshot is still of version 1");
    let migrated = asked_v2::flow::graph().app().store(inner).migration(1, migrate);
    let run = migrated.runner(&()).thread("m3").resume_with("Ada").await.unwrap();
    assert!(matches!(run.outcome, Outcome::Interrupted { .. }), "{:?}", run.outcome);
    assert_eq!(run.state, asked_v2::Person { first: "Ada".into(), last: "Lovelace (checked)".into() });
}

#[tokio::test]
async fn two_executors_racing_for_one_thread_one_runs_the_other_is_busy() {
    let graph = slow::graph().app().store(store());
    // Pause the thread before its only node, then race two resumes.
    let first = graph.runner(&()).thread("race").interrupt_before(["wait"]).run(Slow::default()).await.unwrap();
    assert!(matches!(first.outcome, Outcome::Interrupted { .. }));
    let (a, b) = tokio::join!(graph.runner(&()).thread("race").resume(), graph.runner(&()).thread("race").resume());
    let (ok, busy): (Vec<_>, Vec<_>) = [a, b].into_iter().partition(Result::is_ok);
    assert_eq!(ok.len(), 1, "exactly one executor runs the thread");
    let err = busy.into_iter().next().unwrap().unwrap_err();
    assert!(matches!(err, RunError::ThreadBusy { .. }), "{err}");
    assert!(err.to_string().contains("is being run by"), "{err}");
    assert_eq!(graph.state("race").unwrap().unwrap().state.n, 1);
}

#[tokio::test]
async fn a_state_that_no_longer_deserialises_is_a_typed_error() {
    let store = store();
    let deps = Deps::default();
    job::graph().app().store(Arc::clone(&store)).runner(&deps).thread("old").run(Job::default()).await.unwrap();
    let err = renamed::graph().app().store(store).state("old").unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("thread `old`") && msg.contains("does not decode"), "{msg}");
    assert!(msg.contains("#[state(version = N)]"), "{msg}");
}

#[tokio::test]
async fn a_new_schema_version_needs_a_migration() {
    let store = store();
    let old = schema_v1::flow::graph().app().store(Arc::clone(&store));
    old.runner(&()).thread("m").run(schema_v1::Person { name: "Ada Lovelace".into() }).await.unwrap();
    // Same nodes, new state version: refused without a migration...
    let new = schema_v2::flow::graph().app().store(Arc::clone(&store));
    let err = new.runner(&()).thread("m").resume_with("Ada").await.unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, RunError::Resume(ResumeError::SchemaVersion { stored: 1, current: 2, .. })), "{msg}");
    assert!(msg.contains("register a migration with `graph.app().migration(1, |old| ..)`"), "{msg}");
    // ...and resumed with one, which upgrades the stored state.
    let migrated = schema_v2::flow::graph().app().store(store).migration(1, |mut old| {
        let name = old["name"].as_str().ok_or("no name")?.to_string();
        let (first, last) = name.split_once(' ').ok_or("expected a first and a last name")?;
        old = serde_json::json!({ "first": first, "last": last });
        Ok(old)
    });
    let run = migrated.runner(&()).thread("m").resume_with("Ada").await.unwrap();
    assert_eq!(run.outcome, Outcome::Completed);
    assert_eq!(run.state, schema_v2::Person { first: "Ada".into(), last: "Lovelace (checked)".into() });
}

#[tokio::test]
async fn compaction_keeps_the_last_checkpoints_readable() {
    let graph = job::graph().app().store(store());
    let deps = Deps::default();
    let run = graph.runner(&deps).thread("c1").run(Job::default()).await.unwrap();
    let before = graph.history("c1").unwrap();
    assert!(before.len() >= 4);
    let report = graph.compact("c1", 2).unwrap();
    assert_eq!(report.dropped, before.len() - 2);
    let after = graph.history("c1").unwrap();
    assert_eq!(after.len(), 2);
    assert_eq!(graph.state("c1").unwrap().unwrap().state, run.state);
    for c in &after {
        assert!(graph.state_at("c1", c.seq).unwrap().is_some(), "checkpoint {} readable", c.seq);
    }
}

/// On a multi-threaded runtime a `Sync` step's commit is made from the run's
/// own thread when the store is idle, and queued for the writer when another
/// commit is under way: sixteen spawned runs exercise both paths at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_sync_runs_on_a_multi_thread_runtime_all_commit_every_step() {
    let graph = Arc::new(job::graph().app().store(store()));
    let deps = Arc::new(Deps::default());
    let runs: Vec<_> = (0..16)
        .map(|i| {
            let (graph, deps) = (Arc::clone(&graph), Arc::clone(&deps));
            tokio::spawn(async move {
                let thread = format!("mt{i}");
                let run = graph.runner(&*deps).thread(&thread).durability(Durability::Sync).run(Job::default()).await;
                (thread, run.expect("run"))
            })
        })
        .collect();
    for run in runs {
        let (thread, run) = run.await.expect("task");
        assert_eq!(run.outcome, Outcome::Completed);
        assert_eq!(graph.history(&thread).unwrap().len() as u32, run.steps + 1, "{thread}");
        assert_eq!(graph.state(&thread).unwrap().unwrap().state, run.state, "{thread}");
    }
    assert_eq!(deps.charges.load(Ordering::SeqCst), 16);
}
