//! Durable execution on the redb store: checkpoints, resume, pending writes,
//! the effect journal, history, forks, leases and compatibility refusals.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use agentflow::persist::{CheckpointSource, ResumeError};
use agentflow::prelude::*;
use agentflow::{Durability, RedbStore, RunError, Store};
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

fn store() -> Arc<dyn Store> {
    Arc::new(RedbStore::in_memory().expect("in-memory store"))
}

#[tokio::test]
async fn every_step_is_a_checkpoint_and_the_latest_state_matches_the_run() {
    let graph = job::graph().with_store(store());
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
    let graph = job::graph().with_store(store());
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
    let graph = job::graph().with_store(store());
    let deps = Deps::default();
    graph.runner(&deps).thread("t3").run(Job::default()).await.unwrap();
    let again = graph.runner(&deps).thread("t3").resume().await.unwrap_err();
    assert!(matches!(again, RunError::Resume(ResumeError::Finished { .. })), "{again}");
    let restart = graph.runner(&deps).thread("t3").run(Job::default()).await.unwrap_err();
    assert!(matches!(restart, RunError::ThreadExists { .. }), "{restart}");
}

#[tokio::test]
async fn effects_run_once_when_their_node_runs_again() {
    let graph = job::graph().with_store(store());
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
    let graph = job::graph().with_store(store());
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
    let graph = job::graph().with_store(store());
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
    let v1 = job::graph().with_store(Arc::clone(&store));
    v1.runner(&deps).thread("t6").run(Job::default()).await.unwrap();
    let v2 = job_v2::graph().with_store(store);
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
    let graph = job::graph().with_store(store);
    let deps = Deps::default();
    let err = graph.runner(&deps).thread("t7").run(Job::default()).await.unwrap_err();
    assert!(matches!(&err, RunError::ThreadBusy { holder, .. } if holder == "someone-else"), "{err}");
}

#[tokio::test]
async fn durability_modes_all_persist_the_same_history() {
    for (i, mode) in [Durability::Sync, Durability::Async, Durability::Exit].into_iter().enumerate() {
        let graph = job::graph().with_store(store());
        let deps = Deps::default();
        let thread = format!("d{i}");
        let run = graph.runner(&deps).thread(&thread).durability(mode).run(Job::default()).await.unwrap();
        assert_eq!(graph.state(&thread).unwrap().unwrap().state, run.state, "{mode:?}");
    }
}

fn agentflow_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64
}
