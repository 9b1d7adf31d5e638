//! SIGKILL while a store file of format 5 is moved to the current format (10): a child process opens a copy
//! of a format-5 file (which chains every thread's audit log, in the transaction that opens
//! it) and says on stderr when it starts the open and when the open returned. The parent kills
//! it a random 0-N ms after it started, N being about twice what the upgrade takes here. After
//! every kill the file is of format 5 (the kill landed before the upgrade committed) or 10,
//! never in between: it opens (moving it to format 10 if it was not), every thread's audit log
//! verifies with the same links as an upgrade left alone makes, and each thread has as many
//! entries as before.
//!
//! At least a fifth of the kills must land during the open (before the child said it opened);
//! when the trials fall short of that, more trials (each killing within the first half of the
//! upgrade) run until they reach it, up to three times the trials in all.
//!
//! Trials default to 30 (`AGENTFLOW_CRASH_UPGRADE_TRIALS`); the seed is printed and can be
//! replayed with `AGENTFLOW_CRASH_UPGRADE_SEED`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::kill::next;
use crate::support::process::own_test;
use crate::support::stores::open_redb;
use crate::support::temp::temp_dir;
use agentflow::Store;
use agentflow_store::testing_support::{redb_format, rewrite_as_format_5};
use agentflow_store::{NewAuditEntry, StepCommit, ThreadRecord};
use serde_json::json;

/// Threads in the file, and audit entries per thread.
const THREADS: usize = 300;
const ENTRIES: u64 = 20;

/// The child: open the file (upgrading it), then wait to be killed.
#[test]
#[ignore = "child process of `sigkill_while_a_format_5_file_is_upgraded`"]
fn crash_upgrade_child() {
    let Ok(path) = std::env::var("AGENTFLOW_CRASH_UPGRADE_CHILD") else { return };
    eprintln!("opening");
    let store = open_redb(&path).expect("open the store");
    eprintln!("opened");
    store.close().expect("close the store");
    std::thread::sleep(Duration::from_secs(60));
}

fn child(path: &Path) -> Command {
    let mut cmd = own_test(module_path!(), "crash_upgrade_child");
    cmd.env("AGENTFLOW_CRASH_UPGRADE_CHILD", path).stdout(Stdio::null()).stderr(Stdio::piped());
    cmd
}

fn thread_id(i: usize) -> String {
    format!("t-{i:04}")
}

/// A file of this build with [`THREADS`] threads of [`ENTRIES`] audit entries each, rewritten
/// as format 5.
fn format_5_file(path: &Path) {
    let store = open_redb(path).expect("create the store");
    for i in 0..THREADS {
        let id = thread_id(i);
        let mut commit = StepCommit::new(ThreadRecord::new(&id, "ops", "fp", 1, 1_700_000_000_000));
        commit.audit = (0..ENTRIES)
            .map(|n| {
                let detail = json!({ "thread": i, "n": n, "note": "an entry of a log chained on upgrade" });
                NewAuditEntry::new(1_700_000_000_000 + n, "ops", "note", detail)
            })
            .collect();
        store.commit_step(commit).expect("write a thread");
    }
    store.close().expect("close the store");
    assert_eq!(rewrite_as_format_5(path).expect("rewrite as format 5"), THREADS * ENTRIES as usize);
    assert_eq!(redb_format(path).unwrap(), 5);
}

/// Each thread's chain head and entry count, every log verified; `what` names the file.
fn chains(path: &Path, what: &str) -> Vec<(String, u64)> {
    let store = open_redb(path).unwrap_or_else(|e| panic!("{what}: the store does not open: {e}"));
    let heads = (0..THREADS)
        .map(|i| {
            let id = thread_id(i);
            let report = store
                .verify_audit(&id)
                .unwrap_or_else(|e| panic!("{what}: `{id}`'s audit log cannot be read: {e}"))
                .unwrap_or_else(|broken| panic!("{what}: `{id}`'s audit log does not verify: {broken:?}"));
            (report.head, report.entries)
        })
        .collect();
    store.close().unwrap();
    assert_eq!(redb_format(path).unwrap(), 10, "{what}: opening the file moved it to format 10");
    heads
}

#[test]
fn sigkill_while_a_format_5_file_is_upgraded() {
    let trials: u32 = std::env::var("AGENTFLOW_CRASH_UPGRADE_TRIALS").ok().and_then(|t| t.parse().ok()).unwrap_or(30);
    let mut seed: u64 =
        std::env::var("AGENTFLOW_CRASH_UPGRADE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
        });
    println!("crash-upgrade test: {trials} trials, AGENTFLOW_CRASH_UPGRADE_SEED={seed}");
    let root: PathBuf = temp_dir("crash-upgrade");
    let template = root.join("format-5.redb");
    format_5_file(&template);

    // The upgrade left alone: what every killed one must end as, and how long it takes here.
    let reference = root.join("reference.redb");
    std::fs::copy(&template, &reference).unwrap();
    let started = Instant::now();
    open_redb(&reference).expect("upgrade the reference copy").close().unwrap();
    let upgrade = started.elapsed();
    let expected = chains(&reference, "the reference copy");
    assert!(expected.iter().all(|(_, n)| *n == ENTRIES), "each thread has its {ENTRIES} entries");
    let window = (2 * upgrade.as_micros() as u64).max(2_000);
    println!("crash-upgrade test: the upgrade takes {upgrade:?}; kills within {window} us of the open");

    let (quota, cap) = (trials / 5, trials * 3);
    let (mut during, mut before_commit, mut trial) = (0, 0, 0);
    while trial < trials || (during < quota && trial < cap) {
        let path = root.join(format!("trial-{trial}.redb"));
        std::fs::copy(&template, &path).unwrap();
        // The extra trials, run only to reach the quota, aim at the first half of the upgrade.
        let range = if trial < trials { window } else { (window / 4).max(1) };
        let delay = Duration::from_micros(next(&mut seed) % range);
        let mut proc = child(&path).spawn().unwrap();
        let mut stderr = BufReader::new(proc.stderr.take().unwrap()).lines();
        let _ = stderr.by_ref().map_while(Result::ok).find(|line| line == "opening");
        std::thread::sleep(delay);
        let _ = proc.kill(); // SIGKILL on Unix
        let _ = proc.wait();
        // The rest of what the child said before it died.
        let opened = stderr.map_while(Result::ok).any(|line| line == "opened");
        let what = format!("trial {trial} (kill {} us into the open)", delay.as_micros());
        if !opened {
            during += 1;
        }
        let format = redb_format(&path).unwrap_or_else(|e| panic!("{what}: the format cannot be read: {e}"));
        match format {
            5 => {
                assert!(!opened, "{what}: the child opened the file, which is still of format 5");
                before_commit += 1;
            }
            10 => {}
            other => panic!("{what}: the file is of format {other}"),
        }
        assert_eq!(chains(&path, &what), expected, "{what}: the chains differ from an upgrade left alone");
        let _ = std::fs::remove_file(&path);
        trial += 1;
    }
    println!(
        "crash-upgrade test: {trial} trials, {during} kills during the open, {before_commit} left the file of format 5"
    );
    assert!(
        during >= quota,
        "too few kills landed during the open: {during} of {trial} trials ({} run to reach the quota), {quota} needed",
        trial - trials
    );
    let _ = std::fs::remove_dir_all(&root);
}
