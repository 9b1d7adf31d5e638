//! SIGKILL while a store file is created or opened: a child process opens
//! the store (creating it the first time), runs a one-step thread, closes
//! it, and does that again. It says on stderr when it starts each open; the
//! parent picks one of the first three opens and kills the child a random
//! 0-3 ms after it started, which lands inside the create (or the reopen) or
//! just after. After every kill the file must open, and every thread the
//! child finished before the kill must read back completed.
//!
//! At least a fifth of the kills must land before the first thread finished
//! (in the create). The 0-3 ms sleep oversleeps on a loaded machine, so when
//! the trials fall short of that, more trials (each killing in the first
//! open) run until they reach it, up to three times the trials in all.
//!
//! Trials default to 100 (`AGENTFLOW_CRASH_OPEN_TRIALS`); the seed is printed
//! and can be replayed with `AGENTFLOW_CRASH_OPEN_SEED`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use crate::support::process::own_test;
use crate::support::stores::open_redb;
use agentflow::prelude::*;
use agentflow::{Durability, Store};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Mark {
    n: u64,
}

#[graph(state = Mark, start = mark, max_steps = 4)]
mod marking {
    use super::*;

    #[node(goto = [END])]
    async fn mark(s: &Mark) -> Step<Mark> {
        goto!(END, Mark::update().n(s.n + 1))
    }
}

/// The child: open, run thread `t-<k>`, record it as done, close; repeat.
#[tokio::test]
#[ignore = "child process of `sigkill_while_the_store_is_created_or_opened`"]
async fn crash_open_child() {
    let Ok(dir) = std::env::var("AGENTFLOW_CRASH_OPEN_CHILD") else { return };
    let dir = PathBuf::from(dir);
    for k in 0u64.. {
        eprintln!("opening {k}");
        let store: Arc<dyn Store> = Arc::new(open_redb(dir.join("store.redb")).expect("open store"));
        let graph = marking::graph().app().store(store);
        let thread = format!("t-{k}");
        if graph.thread(&thread).unwrap().is_none() {
            graph.runner(&()).thread(&thread).durability(Durability::Sync).run(Mark { n: k }).await.unwrap();
        }
        std::fs::write(dir.join(format!("done-{k}")), b"").unwrap();
    }
}

fn child(dir: &Path) -> Command {
    let mut cmd = own_test(module_path!(), "crash_open_child");
    cmd.env("AGENTFLOW_CRASH_OPEN_CHILD", dir).stdout(Stdio::null()).stderr(Stdio::piped());
    cmd
}

use crate::support::kill::next;

fn done_threads(dir: &Path) -> Vec<u64> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.unwrap().file_name().to_str()?.strip_prefix("done-")?.parse().ok())
        .collect()
}

#[test]
fn sigkill_while_the_store_is_created_or_opened() {
    let trials: u32 = std::env::var("AGENTFLOW_CRASH_OPEN_TRIALS").ok().and_then(|t| t.parse().ok()).unwrap_or(100);
    let mut seed: u64 =
        std::env::var("AGENTFLOW_CRASH_OPEN_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
        });
    println!("crash-open test: {trials} trials, AGENTFLOW_CRASH_OPEN_SEED={seed}");
    let root = std::env::temp_dir().join(format!("agentflow-crash-open-{}-{seed}", std::process::id()));
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let (quota, cap) = (trials / 5, trials * 3);
    let (mut before_file, mut first_open, mut trial) = (0, 0, 0);
    while trial < trials || (first_open < quota && trial < cap) {
        let dir = root.join(format!("trial-{trial}"));
        std::fs::create_dir_all(&dir).unwrap();
        // The extra trials, run only to reach the quota, all aim at the first open.
        let open = if trial < trials { next(&mut seed) % 3 } else { 0 };
        let delay = Duration::from_micros(next(&mut seed) % 3_000);
        let mut first = child(&dir).spawn().unwrap();
        // Wait until the child starts its open number `open`, then let it run a little.
        let mut stderr = BufReader::new(first.stderr.take().unwrap()).lines();
        let mark = format!("opening {open}");
        let _ = stderr.by_ref().map_while(Result::ok).find(|line| *line == mark);
        // Drained to the end, so the child's next line does not fail on a closed pipe.
        std::thread::spawn(move || stderr.for_each(drop));
        std::thread::sleep(delay);
        let _ = first.kill(); // SIGKILL on Unix
        let _ = first.wait();
        let delay = format!("open {open} + {} us", delay.as_micros());
        let path = dir.join("store.redb");
        if !path.exists() {
            before_file += 1;
        }
        let done = done_threads(&dir);
        if done.is_empty() {
            first_open += 1;
        }
        // A fresh open succeeds, whatever the kill interrupted.
        let store = open_redb(&path)
            .unwrap_or_else(|e| panic!("trial {trial} (kill at {delay}): the store does not open: {e}"));
        let graph = marking::graph().app().store(Arc::new(store) as Arc<dyn Store>);
        for k in done {
            let snapshot = graph.state(&format!("t-{k}")).unwrap().unwrap_or_else(|| {
                panic!("trial {trial} (kill at {delay}): thread t-{k} finished before the kill but is gone")
            });
            assert_eq!(snapshot.state.n, k + 1, "trial {trial}");
            assert!(snapshot.next.is_empty(), "trial {trial}: t-{k} is not completed");
        }
        // And it is usable.
        runtime.block_on(async {
            let run = graph.runner(&()).thread("after").run(Mark { n: 0 }).await.unwrap();
            assert_eq!(run.outcome, Outcome::Completed, "trial {trial}");
        });
        trial += 1;
    }
    println!(
        "crash-open test: {trial} trials, {first_open} kills before the first thread finished, {before_file} left no file"
    );
    assert!(
        first_open >= quota,
        "too few kills landed in the first open: {first_open} of {trial} trials ({} run to reach the quota), {quota} needed",
        trial - trials
    );
    let _ = std::fs::remove_dir_all(&root);
}
