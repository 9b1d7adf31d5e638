//! SIGKILL while a child graph runs: a parent whose node runs a 30-step
//! child (with an idempotent charge at step 12) is killed at a random moment
//! in a process of its own, and a fresh process resumes the parent. The
//! child resumes from its own last checkpoint: every trial ends with the
//! state of an uninterrupted run, the child's trail has each step once, and
//! the charge was made once.
//!
//! The process says on stderr when its store is open; the kill falls a
//! random 0-280 ms after that line (not after the spawn, which a loaded
//! machine can take longer than that to start), which spans the parent's
//! start, the child's steps and the end. At least a quarter of the kills
//! must land while the child runs; trials run on (up to three times as many)
//! until they have.
//!
//! Trials default to 12 (`AGENTFLOW_CRASH_TRIALS`); the seed is printed and
//! can be replayed with `AGENTFLOW_CRASH_SEED`.

use crate::support::kill;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use crate::support::process::own_test;
use crate::support::stores::open_redb;
use agentflow::persist::ResumeError;
use agentflow::prelude::*;
use agentflow::{Durability, RunError};
use serde::{Deserialize, Serialize};

const CHILD_STEPS: u64 = 30;
const CHARGE_AT: u64 = 12;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Job {
    #[reduce(add)]
    count: u64,
    #[reduce(append)]
    trail: Vec<u64>,
    receipt: Option<String>,
}

/// Charges once per idempotency key, on disk, like a real provider.
pub struct Provider {
    pub dir: PathBuf,
}

impl Provider {
    fn charge(&self, key: &str) -> String {
        use std::io::Write;
        let slug: String = key.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
        if let Ok(mut f) =
            std::fs::OpenOptions::new().write(true).create_new(true).open(self.dir.join(format!("charge-{slug}")))
        {
            writeln!(f, "charged").unwrap();
            f.sync_all().unwrap();
        }
        format!("receipt:{key}")
    }
}

#[graph(state = Job, deps = Provider, start = step, max_steps = 100)]
pub mod child_job {
    use super::*;

    #[node(goto = [step, charge, END])]
    async fn step(s: &Job) -> Step<Job> {
        tokio::time::sleep(Duration::from_millis(3)).await;
        let u = Job::update().count(1).trail(vec![s.count]);
        if s.count + 1 >= CHILD_STEPS {
            goto!(END, u)
        } else if s.count + 1 == CHARGE_AT {
            goto!(charge, u)
        } else {
            goto!(step, u)
        }
    }

    #[node(goto = [step])]
    async fn charge(_s: &Job, cx: &Ctx<Provider>) -> Result<Step<Job>, NodeError> {
        let receipt = cx
            .idempotent_effect("charge", |key| async move {
                tokio::time::sleep(Duration::from_millis(3)).await;
                Ok::<_, NodeError>(cx.deps().charge(&key))
            })
            .await?;
        Ok(goto!(step, Job::update().receipt(Some(receipt))))
    }
}

#[graph(state = Job, deps = Provider, start = delegate)]
pub mod parent_job {
    use super::*;

    #[node(goto = [END], subgraphs = [child_job])]
    async fn delegate(_s: &Job, cx: &Ctx<Provider>) -> Result<Step<Job>, NodeError> {
        let done = cx.subgraph(child_job::graph(), Job::default()).await?;
        Ok(goto!(END, Job::update().count(done.count).trail(done.trail).receipt(done.receipt)))
    }
}

async fn run_parent(db: &Path, dir: &Path, resume: bool) -> Result<Job, RunError> {
    let store = Arc::new(open_redb(db).expect("open store"));
    // The test's kill timer starts at this line.
    eprintln!("store open");
    let app = parent_job::graph().app().store(store);
    let provider = Provider { dir: dir.to_path_buf() };
    let runner = || app.runner(&provider).thread("p").durability(Durability::Sync);
    let run = if resume {
        match runner().resume().await {
            // Killed before the parent's first checkpoint.
            Err(RunError::Resume(ResumeError::UnknownThread { .. })) => runner().run(Job::default()).await?,
            // Killed after it completed, before its result was written down.
            Err(RunError::Resume(ResumeError::Finished { .. })) => {
                return Ok(app.state("p").expect("state").expect("a completed thread").state);
            }
            other => other?,
        }
    } else {
        runner().run(Job::default()).await?
    };
    assert_eq!(run.outcome, Outcome::Completed);
    Ok(run.state)
}

/// The child process body; runs only when the test below starts this binary
/// with `AGENTFLOW_SUBGRAPH_CHILD` set.
#[tokio::test]
#[ignore = "child process of `sigkill_while_a_child_graph_runs_then_resume`"]
async fn subgraph_crash_child() {
    let Ok(dir) = std::env::var("AGENTFLOW_SUBGRAPH_CHILD") else { return };
    let dir = PathBuf::from(dir);
    let resume = std::env::var("AGENTFLOW_SUBGRAPH_RESUME").is_ok();
    let state = run_parent(&dir.join("store.redb"), &dir, resume).await.expect("run");
    std::fs::write(dir.join("final.json"), serde_json::to_vec(&state).unwrap()).unwrap();
}

fn process(dir: &Path, resume: bool) -> Command {
    let mut cmd = own_test(module_path!(), "subgraph_crash_child");
    cmd.env("AGENTFLOW_SUBGRAPH_CHILD", dir).stdout(Stdio::null()).stderr(Stdio::piped());
    if resume {
        cmd.env("AGENTFLOW_SUBGRAPH_RESUME", "1");
    }
    cmd
}

#[test]
fn sigkill_while_a_child_graph_runs_then_resume() {
    let trials = kill::trials(12);
    let mut seed = kill::seed();
    println!("subgraph crash test: {trials} trials, AGENTFLOW_CRASH_SEED={seed}");
    let root = std::env::temp_dir().join(format!("agentflow-subgraph-crash-{}-{seed}", std::process::id()));

    let reference_dir = root.join("reference");
    std::fs::create_dir_all(&reference_dir).unwrap();
    let out = process(&reference_dir, false).output().unwrap();
    assert!(out.status.success(), "reference run failed: {}", String::from_utf8_lossy(&out.stderr));
    let reference: Job = serde_json::from_slice(&std::fs::read(reference_dir.join("final.json")).unwrap()).unwrap();
    assert_eq!(reference.trail, (0..CHILD_STEPS).collect::<Vec<_>>());

    let (quota, cap) = (trials / 4, trials * 3);
    let (mut mid_child, mut trial) = (0, 0);
    while trial < trials || (mid_child < quota && trial < cap) {
        let dir = root.join(format!("trial-{trial}"));
        std::fs::create_dir_all(&dir).unwrap();
        let delay = kill::next(&mut seed) % 280;
        let mut first = process(&dir, false).spawn().unwrap();
        // Wait until the process has its store open, then let it run a while.
        let mut stderr = BufReader::new(first.stderr.take().unwrap()).lines();
        let _ = stderr.by_ref().map_while(Result::ok).find(|line| line == "store open");
        // Drained to the end, so a later write to stderr does not fail on a closed pipe.
        std::thread::spawn(move || stderr.for_each(drop));
        std::thread::sleep(Duration::from_millis(delay));
        let _ = first.kill(); // SIGKILL on Unix
        let _ = first.wait();
        if !dir.join("final.json").exists() {
            // Was the child thread there, unfinished, when the process died?
            let store = open_redb(dir.join("store.redb")).unwrap();
            let child = agentflow::Store::thread(&store, "p/delegate.0.0.child_job").unwrap();
            if child.is_some_and(|t| t.status.as_str() == "running") {
                mid_child += 1;
            }
            drop(store);
            let out = process(&dir, true).output().unwrap();
            assert!(
                out.status.success(),
                "trial {trial} (kill {delay} ms after the store opened): resume failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let state: Job = serde_json::from_slice(&std::fs::read(dir.join("final.json")).unwrap()).unwrap();
        assert_eq!(state.trail, reference.trail, "trial {trial} (kill {delay} ms after the store opened)");
        assert_eq!(state.count, reference.count, "trial {trial} (kill {delay} ms after the store opened)");
        let charges = kill::files_starting_with(&dir, "charge-");
        assert_eq!(charges, 1, "trial {trial} (kill {delay} ms after the store opened): charged {charges} times");
        assert!(state.receipt.is_some());
        trial += 1;
    }
    println!("subgraph crash test: {mid_child} of {trial} kills landed while the child ran");
    assert!(mid_child >= quota, "too few kills landed inside the child: {mid_child} of {trial} trials, {quota} needed");
    let _ = std::fs::remove_dir_all(&root);
}
