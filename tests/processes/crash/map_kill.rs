//! SIGKILL during a map step, on redb and on PostgreSQL: a child process runs a map of
//! `DOCS` instances (`parallel = 2`, `Durability::Sync`) and is killed at a random moment
//! once the first instance started; a fresh process resumes the thread.
//!
//! Each instance appends `<run> <instance>` to a ledger file when it starts. After the kill,
//! the parent reads from the store which instances had their write committed. Every trial
//! asserts that no instance whose write was committed ran again, that at most `parallel`
//! instances re-ran (those in flight at the kill), and that the resumed thread ends with every
//! document once. At least 20 of the trials must have been killed with at least one committed
//! and one uncommitted instance.
//!
//! Trials default to 30 per store (`AGENTFLOW_CRASH_TRIALS`); the seed is printed and can be
//! replayed with `AGENTFLOW_CRASH_SEED`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use crate::support::process::own_test;
use crate::support::stores::open_redb;
use agentflow::persist::ResumeError;
use agentflow::prelude::*;
use agentflow::{Durability, RunError, Store};
use agentflow_store::PostgresStore;
use serde::{Deserialize, Serialize};

use super::{kill, pg};

const DOCS: usize = 6;
const PARALLEL: usize = 2;
const THREAD: &str = "map-kill";

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Docs {
    items: Vec<u32>,
    #[reduce(append)]
    summaries: Vec<u32>,
}

/// Where the ledger is.
pub struct Ledger {
    file: PathBuf,
    run: u32,
}

impl Ledger {
    fn started(&self, instance: u32) {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&self.file).unwrap();
        // One write call, so a SIGKILL cannot leave half a line.
        f.write_all(format!("{} {instance}\n", self.run).as_bytes()).unwrap();
    }
}

#[graph(state = Docs, deps = Ledger, start = split)]
mod mapped {
    use super::*;

    #[node(goto = [summarize])]
    async fn split(s: &Docs) -> Step<Docs> {
        goto!(each(summarize, s.items.clone()))
    }

    #[node(goto = [join], parallel = 2)]
    async fn summarize(_s: &Docs, #[payload] doc: &u32, ledger: &Ledger) -> Step<Docs> {
        ledger.started(*doc);
        // A model call per document, 20 to 40 ms.
        tokio::time::sleep(Duration::from_millis(20 + 10 * u64::from(doc % 3))).await;
        goto!(join, Docs::update().summaries(vec![*doc]))
    }

    #[node(goto = [END])]
    async fn join(_s: &Docs) -> Step<Docs> {
        goto!(END)
    }
}

#[derive(Clone, Copy, Debug)]
enum Backend {
    Redb,
    Postgres,
}

fn open(backend: Backend, dir: &Path) -> Arc<dyn Store> {
    match backend {
        Backend::Redb => Arc::new(open_redb(dir.join("store.redb")).expect("open the redb file")),
        Backend::Postgres => {
            let url = std::env::var("AGENTFLOW_PG_URL").expect("AGENTFLOW_PG_URL");
            let schema = std::fs::read_to_string(dir.join("schema")).expect("the trial's schema");
            Arc::new(PostgresStore::builder().schema(schema).open(&url).expect("open the PostgreSQL store"))
        }
    }
}

async fn run_child(backend: Backend, dir: &Path, resume: bool) -> Result<Docs, RunError> {
    let app = mapped::graph().app().store(open(backend, dir));
    let ledger = Ledger { file: dir.join("ledger"), run: if resume { 2 } else { 1 } };
    let runner =
        || app.runner(&ledger).thread(THREAD).durability(Durability::Sync).lease_ttl(Duration::from_millis(500));
    let input = Docs { items: (0..DOCS as u32).collect(), summaries: Vec::new() };
    if !resume {
        return runner().run(input).await.map(|r| r.state);
    }
    loop {
        return match runner().resume().await {
            // Killed before its first checkpoint: the thread never started.
            Err(RunError::Resume(ResumeError::UnknownThread { .. })) => runner().run(input).await.map(|r| r.state),
            // Killed after it completed.
            Err(RunError::Resume(ResumeError::Finished { .. })) => {
                Ok(app.state(THREAD).expect("state").expect("a completed thread").state)
            }
            // PostgreSQL keeps the killed process's lease until it expires.
            Err(RunError::ThreadBusy { .. }) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            other => other.map(|r| {
                assert_eq!(r.outcome, Outcome::Completed);
                r.state
            }),
        };
    }
}

/// The child process body. Not a test on its own: it only runs when the map kill test starts
/// this binary with `AGENTFLOW_MAP_KILL_CHILD` set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "child process of `sigkill_during_a_map_step_reruns_no_committed_instance`"]
async fn map_kill_child() {
    let Ok(dir) = std::env::var("AGENTFLOW_MAP_KILL_CHILD") else { return };
    let dir = PathBuf::from(dir);
    let backend = match std::env::var("AGENTFLOW_MAP_KILL_STORE").as_deref() {
        Ok("postgres") => Backend::Postgres,
        _ => Backend::Redb,
    };
    let resume = std::env::var("AGENTFLOW_MAP_KILL_RESUME").is_ok();
    let state = run_child(backend, &dir, resume).await.expect("child run");
    std::fs::write(dir.join("final.json"), serde_json::to_vec(&state).unwrap()).unwrap();
}

fn child(backend: Backend, dir: &Path, resume: bool) -> Command {
    let mut cmd = own_test(module_path!(), "map_kill_child");
    cmd.env("AGENTFLOW_MAP_KILL_CHILD", dir)
        .env("AGENTFLOW_MAP_KILL_STORE", if matches!(backend, Backend::Postgres) { "postgres" } else { "redb" })
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if resume {
        cmd.env("AGENTFLOW_MAP_KILL_RESUME", "1");
    }
    cmd
}

/// The instances whose write the store had committed when the process died: the pending
/// writes of the map step, or all of them once a later checkpoint holds the step.
fn committed(store: &dyn Store) -> BTreeSet<u32> {
    let Some(latest) = store.latest_checkpoint(THREAD).expect("read the latest checkpoint") else {
        return BTreeSet::new();
    };
    match latest.cursor.as_slice() {
        [split] if split == "split" => BTreeSet::new(),
        [map] if map == "summarize" => store
            .pending_writes(THREAD, latest.seq)
            .expect("read the pending writes")
            .into_iter()
            .filter(|w| w.node == "summarize")
            .map(|w| w.idx)
            .collect(),
        _ => (0..DOCS as u32).collect(),
    }
}

/// The instances each run started, from the ledger.
fn started(dir: &Path, run: u32) -> Vec<u32> {
    let ledger = std::fs::read_to_string(dir.join("ledger")).unwrap_or_default();
    ledger
        .lines()
        .filter_map(|l| l.split_once(' '))
        .filter(|(r, _)| r.parse::<u32>().ok() == Some(run))
        .map(|(_, i)| i.parse().unwrap())
        .collect()
}

fn wait_for_first_start(dir: &Path, child: &mut std::process::Child) {
    for _ in 0..2000 {
        if !started(dir, 1).is_empty() || child.try_wait().unwrap().is_some() {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("the child started no instance within 2 s");
}

fn trials_on(backend: Backend, root: &Path, seed: &mut u64, trials: u32, schema: impl Fn(u32) -> Option<String>) {
    let mut mixed = 0;
    for trial in 0..trials {
        let dir = root.join(format!("{backend:?}-{trial}"));
        std::fs::create_dir_all(&dir).unwrap();
        if let Some(schema) = schema(trial) {
            std::fs::write(dir.join("schema"), schema).unwrap();
        }
        // The map takes about 90 ms from its first start: kill in it, mostly.
        let delay = 20 + kill::next(seed) % 65;
        let mut first = child(backend, &dir, false).spawn().unwrap();
        wait_for_first_start(&dir, &mut first);
        std::thread::sleep(Duration::from_millis(delay));
        let _ = first.kill(); // SIGKILL on Unix
        let _ = first.wait();
        let what = format!("{backend:?} trial {trial} (kill {delay} ms after the first start)");
        let kept = committed(open(backend, &dir).as_ref());
        let before = started(&dir, 1);
        if !kept.is_empty() && kept.len() < DOCS {
            mixed += 1;
        }
        if !dir.join("final.json").exists() {
            let out = child(backend, &dir, true).output().unwrap();
            assert!(out.status.success(), "{what}: resume failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        let after = started(&dir, 2);
        let again: Vec<u32> = after.iter().copied().filter(|i| kept.contains(i)).collect();
        assert!(
            again.is_empty(),
            "{what}: instances {again:?} ran again although their writes were committed {kept:?}"
        );
        let reran: Vec<u32> = after.iter().copied().filter(|i| before.contains(i)).collect();
        assert!(reran.len() <= PARALLEL, "{what}: {reran:?} re-ran, more than the {PARALLEL} that can be in flight");
        let state: Docs = serde_json::from_slice(&std::fs::read(dir.join("final.json")).unwrap()).unwrap();
        let mut summaries = state.summaries.clone();
        summaries.sort_unstable();
        assert_eq!(summaries, (0..DOCS as u32).collect::<Vec<_>>(), "{what}: every document once");
    }
    println!("map kill test ({backend:?}): {mixed} of {trials} trials killed with committed and uncommitted instances");
    assert!(
        mixed >= 20.min(trials),
        "{backend:?}: too few kills landed with committed and uncommitted instances: {mixed}"
    );
}

#[test]
fn sigkill_during_a_map_step_reruns_no_committed_instance() {
    let trials = kill::trials(30);
    let mut seed = kill::seed();
    println!("map kill test: {trials} trials per store, AGENTFLOW_CRASH_SEED={seed}");
    let root = std::env::temp_dir().join(format!("agentflow-map-kill-{}-{seed}", std::process::id()));
    trials_on(Backend::Redb, &root, &mut seed, trials, |_| None);
    if pg::pg_url().is_some() {
        let tag = format!("{}_{seed}", std::process::id());
        trials_on(Backend::Postgres, &root, &mut seed, trials, |t| Some(format!("map_kill_{tag}_{t}")));
    }
    let _ = std::fs::remove_dir_all(&root);
}
