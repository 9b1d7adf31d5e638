//! Crash tests with real processes: a child process runs a long graph with
//! `Durability::Sync` on a redb file and is killed with SIGKILL at a random
//! moment; a fresh process resumes the thread. Every trial must end with the
//! same state as an uninterrupted run, and the journaled effect must have
//! charged exactly once.
//!
//! Trials default to 50 (`AGENTFLOW_CRASH_TRIALS`); the seed is printed and can
//! be replayed with `AGENTFLOW_CRASH_SEED`.

#[path = "crash/fanout_drop.rs"]
mod fanout_drop;
use crate::support::kill;
#[path = "crash/map_kill.rs"]
mod map_kill;
use crate::support::pg;

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

const STEPS: u64 = 45;
const CHARGE_AT: u64 = 21;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Work {
    #[reduce(add)]
    count: u64,
    #[reduce(append)]
    trail: Vec<u64>,
    receipt: Option<String>,
}

/// The "payment provider": idempotent by key, like real ones. It records
/// every call it receives and every charge it makes, on disk.
pub struct Provider {
    pub dir: PathBuf,
}

impl Provider {
    fn charge(&self, key: &str) -> String {
        use std::io::Write;
        let calls = self.dir.join("calls.log");
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(calls).unwrap();
        // One write call, so a SIGKILL cannot leave half a line (writeln! may make two).
        f.write_all(format!("{key}\n").as_bytes()).unwrap();
        f.sync_all().unwrap();
        let slug: String = key.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
        let charge = self.dir.join(format!("charge-{slug}"));
        // create_new: a second request with the same key charges nothing.
        if let Ok(mut f) = std::fs::OpenOptions::new().write(true).create_new(true).open(&charge) {
            writeln!(f, "charged").unwrap();
            f.sync_all().unwrap();
        }
        format!("receipt:{key}")
    }
}

#[graph(state = Work, deps = Provider, start = tick, max_steps = 200)]
mod work {
    use super::*;

    #[node(goto = [tock, charge, END])]
    async fn tick(s: &Work) -> Step<Work> {
        tokio::time::sleep(Duration::from_millis(2)).await;
        let u = Work::update().count(1).trail(vec![s.count]);
        if s.count + 1 >= STEPS {
            goto!(END, u)
        } else if s.count + 1 == CHARGE_AT {
            goto!(charge, u)
        } else {
            goto!(tock, u)
        }
    }

    #[node(goto = [tick])]
    async fn tock(s: &Work) -> Step<Work> {
        tokio::time::sleep(Duration::from_millis(2)).await;
        goto!(tick, Work::update().count(1).trail(vec![s.count]))
    }

    #[node(goto = [tick])]
    async fn charge(_s: &Work, cx: &Ctx<Provider>) -> Result<Step<Work>, NodeError> {
        let receipt = cx
            .idempotent_effect("charge", |key| async move {
                tokio::time::sleep(Duration::from_millis(3)).await;
                Ok::<_, NodeError>(cx.deps().charge(&key))
            })
            .await?;
        Ok(goto!(tick, Work::update().receipt(Some(receipt))))
    }
}

async fn run_child(db: &Path, dir: &Path, resume: bool) -> Result<Work, RunError> {
    let store = Arc::new(open_redb(db).expect("open store"));
    let graph = work::graph().app().store(store);
    let provider = Provider { dir: dir.to_path_buf() };
    let runner = || graph.runner(&provider).thread("crash").durability(Durability::Sync);
    let run = if resume {
        match runner().resume().await {
            // Killed before its first checkpoint: the thread never started.
            Err(RunError::Resume(ResumeError::UnknownThread { .. })) => runner().run(Work::default()).await?,
            // Killed after it completed, before its result was written down.
            Err(RunError::Resume(ResumeError::Finished { .. })) => {
                return Ok(graph.state("crash").expect("state").expect("a completed thread").state);
            }
            other => other?,
        }
    } else {
        runner().run(Work::default()).await?
    };
    assert_eq!(run.outcome, Outcome::Completed);
    Ok(run.state)
}

/// The child process body. Not a test on its own: it only runs when the
/// crash test starts this binary with `AGENTFLOW_CRASH_CHILD` set.
#[tokio::test]
#[ignore = "child process of `sigkill_at_random_points_then_resume`"]
async fn crash_child() {
    let Ok(dir) = std::env::var("AGENTFLOW_CRASH_CHILD") else { return };
    let dir = PathBuf::from(dir);
    let resume = std::env::var("AGENTFLOW_CRASH_RESUME").is_ok();
    let state = run_child(&dir.join("store.redb"), &dir, resume).await.expect("child run");
    std::fs::write(dir.join("final.json"), serde_json::to_vec(&state).unwrap()).unwrap();
}

fn child(dir: &Path, resume: bool) -> Command {
    let mut cmd = own_test(module_path!(), "crash_child");
    cmd.env("AGENTFLOW_CRASH_CHILD", dir).stdout(Stdio::null()).stderr(Stdio::piped());
    if resume {
        cmd.env("AGENTFLOW_CRASH_RESUME", "1");
    }
    cmd
}

#[tokio::test]
async fn sigkill_at_random_points_then_resume() {
    let trials = kill::trials(50);
    let mut seed = kill::seed();
    println!("crash test: {trials} trials, AGENTFLOW_CRASH_SEED={seed}");
    let root = std::env::temp_dir().join(format!("agentflow-crash-{}-{seed}", std::process::id()));

    // The reference: one uninterrupted run, in a process of its own.
    let reference_dir = root.join("reference");
    std::fs::create_dir_all(&reference_dir).unwrap();
    let out = child(&reference_dir, false).output().unwrap();
    assert!(out.status.success(), "reference run failed: {}", String::from_utf8_lossy(&out.stderr));
    let reference: Work = serde_json::from_slice(&std::fs::read(reference_dir.join("final.json")).unwrap()).unwrap();
    assert!(reference.count >= STEPS && reference.receipt.is_some(), "{reference:?}");

    let mut killed_mid_run = 0;
    for trial in 0..trials {
        let dir = root.join(format!("trial-{trial}"));
        std::fs::create_dir_all(&dir).unwrap();
        let delay = 5 + kill::next(&mut seed) % 160;
        let mut first = child(&dir, false).spawn().unwrap();
        std::thread::sleep(Duration::from_millis(delay));
        let finished_before_kill = first.try_wait().unwrap().is_some();
        let _ = first.kill(); // SIGKILL on Unix
        let _ = first.wait();
        if !finished_before_kill && !dir.join("final.json").exists() {
            killed_mid_run += 1;
        }
        if !dir.join("final.json").exists() {
            let out = child(&dir, true).output().unwrap();
            assert!(
                out.status.success(),
                "trial {trial} (kill after {delay} ms): resume failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let state: Work = serde_json::from_slice(&std::fs::read(dir.join("final.json")).unwrap()).unwrap();
        assert_eq!(state.count, reference.count, "trial {trial} (kill after {delay} ms)");
        assert_eq!(state.trail, reference.trail, "trial {trial} (kill after {delay} ms)");
        let charges = kill::files_starting_with(&dir, "charge-");
        assert_eq!(charges, 1, "trial {trial} (kill after {delay} ms): charged {charges} times");
        let receipt = state.receipt.expect("the charge step ran");
        let calls = std::fs::read_to_string(dir.join("calls.log")).unwrap();
        // Every call the provider saw carried the one idempotency key of the receipt.
        assert!(calls.lines().all(|k| receipt == format!("receipt:{k}")), "trial {trial}: {calls}");
    }
    println!("crash test: {killed_mid_run} of {trials} trials were killed mid-run");
    assert!(killed_mid_run >= trials / 2, "too few kills landed mid-run: {killed_mid_run}");
    let _ = std::fs::remove_dir_all(&root);
    // (kept on failure for inspection: the asserts above panic first)
}

// ---------------------------------------------------------------- SIGKILL inside approved calls and effects

/// Appends a line to `dir/<file>` with O_APPEND and fsync before returning:
/// what the outside world saw, whatever happens to the process next.
fn append_line(file: &str, line: &str) {
    use std::io::Write;
    let dir = std::env::var("AGENTFLOW_APPROVAL_CHILD").expect("the approval child's directory");
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(Path::new(&dir).join(file)).unwrap();
    // One write call, so a SIGKILL cannot leave half a line (writeln! may make two).
    f.write_all(format!("{line}\n").as_bytes()).unwrap();
    f.sync_all().unwrap();
}

fn lines(dir: &Path, file: &str) -> Vec<String> {
    std::fs::read_to_string(dir.join(file)).map(|s| s.lines().map(String::from).collect()).unwrap_or_default()
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct RefundArgs {
    order_id: String,
}

/// Refunds an order. Irreversible; the provider does not deduplicate.
#[tool(risk = irreversible)]
async fn refund(args: RefundArgs, cx: &ToolCx) -> Result<serde_json::Value, ToolError> {
    tokio::time::sleep(Duration::from_millis(15)).await;
    append_line("refund.log", cx.idempotency_key());
    tokio::time::sleep(Duration::from_millis(15)).await;
    Ok(serde_json::json!({ "refunded": args.order_id }))
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Refunding {
    order: String,
    receipt: Option<serde_json::Value>,
    notified: Option<String>,
}

#[graph(state = Refunding, deps = (), start = pay)]
mod refunding {
    use super::*;

    #[node(goto = [notify], tools = [refund])]
    async fn pay(s: &Refunding, cx: &Ctx<()>) -> Result<Step<Refunding>, NodeError> {
        let obs = cx.run_tool(refund, serde_json::json!({ "order_id": s.order })).await?;
        Ok(goto!(notify, Refunding::update().receipt(Some(obs.body))))
    }

    /// Texts the customer: an effect that is not idempotent.
    #[node(goto = [END])]
    async fn notify(_s: &Refunding, cx: &Ctx<()>) -> Result<Step<Refunding>, NodeError> {
        let sent = cx
            .effect("sms", |key| async move {
                tokio::time::sleep(Duration::from_millis(10)).await;
                append_line("sms.log", &key);
                tokio::time::sleep(Duration::from_millis(10)).await;
                Ok::<_, NodeError>(format!("sms:{key}"))
            })
            .await?;
        Ok(goto!(END, Refunding::update().notified(Some(sent))))
    }
}

const APPROVAL_OWNER: &str = "agent:refunds";

fn refund_desk_role() -> agentflow::approval::RoleAuthorizer {
    agentflow::approval::RoleAuthorizer::new().role_for(agentflow::tool::Risk::Irreversible, "ops")
}

/// The approval child's body: starts or resumes the thread and writes how
/// the run ended to `outcome.json`.
#[tokio::test]
#[ignore = "child process of `sigkill_inside_approved_calls_and_effects`"]
async fn approval_crash_child() {
    let Ok(dir) = std::env::var("AGENTFLOW_APPROVAL_CHILD") else { return };
    let dir = PathBuf::from(dir);
    let store = Arc::new(open_redb(dir.join("store.redb")).expect("open store"));
    let graph = refunding::graph().app().store(store);
    let runner = || graph.runner(&()).thread("refund").owner(APPROVAL_OWNER).durability(Durability::Sync);
    let run = if std::env::var("AGENTFLOW_CRASH_RESUME").is_ok() {
        runner().resume().await
    } else {
        runner().run(Refunding { order: "O-1".into(), ..Refunding::default() }).await
    };
    let run = match run {
        // The killed process got to the end before the kill.
        Err(RunError::Resume(ResumeError::Finished { .. })) => {
            std::fs::write(dir.join("outcome.json"), r#"{"kind":"completed"}"#).unwrap();
            return;
        }
        other => other.expect("child run"),
    };
    let outcome = match &run.outcome {
        Outcome::Completed => serde_json::json!({ "kind": "completed" }),
        Outcome::Interrupted { pending, .. } => {
            serde_json::json!({ "kind": pending[0].kind, "approval": pending[0].payload["approval"] })
        }
        other => panic!("unexpected outcome {other:?}"),
    };
    std::fs::write(dir.join("outcome.json"), outcome.to_string()).unwrap();
}

fn approval_child(dir: &Path, resume: bool) -> Command {
    let mut cmd = own_test(module_path!(), "approval_crash_child");
    cmd.env("AGENTFLOW_APPROVAL_CHILD", dir).stdout(Stdio::null()).stderr(Stdio::piped());
    if resume {
        cmd.env("AGENTFLOW_CRASH_RESUME", "1");
    }
    cmd
}

fn run_approval_child(dir: &Path, resume: bool) -> serde_json::Value {
    let _ = std::fs::remove_file(dir.join("outcome.json"));
    let out = approval_child(dir, resume).output().unwrap();
    assert!(out.status.success(), "child failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&std::fs::read(dir.join("outcome.json")).unwrap()).unwrap()
}

/// Decides what the thread waits for, as a person at the desk would: approves
/// the refund; settles an unknown outcome from what the outside world shows
/// (the provider's log): it happened, or run it again.
fn decide(dir: &Path, outcome: &serde_json::Value) {
    let store = Arc::new(open_redb(dir.join("store.redb")).expect("open store"));
    let desk = refunding::graph().app().store(store).approvals(refund_desk_role()).unwrap();
    let ops = agentflow::approval::Approver::new("ops-1", ["ops"]);
    let id = outcome["approval"].as_str().expect("a record id");
    match outcome["kind"].as_str() {
        Some("approval") => {
            desk.approve(id, &ops).unwrap();
        }
        Some("outcome_unknown") => {
            let record = desk.get(id).unwrap().unwrap();
            let log = if record.tool == "refund" { "refund.log" } else { "sms.log" };
            let settlement = if lines(dir, log).is_empty() {
                agentflow::approval::Settlement::RunAgain
            } else if record.tool == "refund" {
                agentflow::approval::Settlement::Succeeded(serde_json::json!({ "refunded": "O-1" }))
            } else {
                agentflow::approval::Settlement::Succeeded(serde_json::json!("sms:settled"))
            };
            desk.settle(id, &ops, settlement).unwrap();
        }
        other => panic!("nothing to decide for {other:?}"),
    }
}

#[tokio::test]
async fn sigkill_inside_approved_calls_and_effects() {
    let trials = kill::trials(30);
    let mut seed = kill::seed();
    println!("approval crash test: {trials} trials, AGENTFLOW_CRASH_SEED={seed}");
    let root = std::env::temp_dir().join(format!("agentflow-approval-crash-{}-{seed}", std::process::id()));
    let (mut unknown_outcomes, mut killed_mid_run) = (0, 0);
    // How long an approved resume takes here, from spawn to exit: the kills are drawn over that
    // span and a quarter more, so most land mid-run on a fast machine as on a loaded one.
    let span = {
        let dir = root.join("calibration");
        std::fs::create_dir_all(&dir).unwrap();
        let outcome = run_approval_child(&dir, false);
        decide(&dir, &outcome);
        let began = std::time::Instant::now();
        approval_child(&dir, true).spawn().unwrap().wait().unwrap();
        (began.elapsed().as_millis() as u64).max(8)
    };
    println!("approval crash test: a resume takes {span} ms here; kills fall within {} ms", span + span / 4);
    for trial in 0..trials {
        let dir = root.join(format!("trial-{trial}"));
        std::fs::create_dir_all(&dir).unwrap();
        // Start: the refund needs an approval.
        let outcome = run_approval_child(&dir, false);
        assert_eq!(outcome["kind"], "approval", "trial {trial}: {outcome}");
        decide(&dir, &outcome);
        // Resume, and kill the process at a random moment: before, inside or
        // after the refund's body or the SMS effect.
        let delay = 2 + kill::next(&mut seed) % (span + span / 4);
        let mut victim = approval_child(&dir, true).spawn().unwrap();
        std::thread::sleep(Duration::from_millis(delay));
        if victim.try_wait().unwrap().is_none() {
            killed_mid_run += 1;
        }
        let _ = victim.kill();
        let _ = victim.wait();
        // Resume until done, deciding what the thread waits for.
        let mut rounds = 0;
        loop {
            let refunds = lines(&dir, "refund.log").len();
            let texts = lines(&dir, "sms.log").len();
            assert!(refunds <= 1, "trial {trial} (kill after {delay} ms): refunded {refunds} times");
            assert!(texts <= 1, "trial {trial} (kill after {delay} ms): texted {texts} times");
            let outcome = run_approval_child(&dir, true);
            match outcome["kind"].as_str() {
                Some("completed") => break,
                Some("outcome_unknown") => {
                    unknown_outcomes += 1;
                    decide(&dir, &outcome);
                }
                _ => decide(&dir, &outcome),
            }
            rounds += 1;
            assert!(rounds < 6, "trial {trial}: no end after {rounds} decisions: {outcome}");
        }
        assert_eq!(lines(&dir, "refund.log").len(), 1, "trial {trial} (kill after {delay} ms): one refund");
        assert_eq!(lines(&dir, "sms.log").len(), 1, "trial {trial} (kill after {delay} ms): one text");
    }
    println!(
        "approval crash test: {killed_mid_run} of {trials} kills landed mid-run; \
         {unknown_outcomes} unknown outcomes surfaced and were settled"
    );
    assert!(killed_mid_run >= trials / 2, "too few kills landed mid-run: {killed_mid_run}");
    let _ = std::fs::remove_dir_all(&root);
}
