//! SIGKILL while threads move to a newer version of their graph: a process of version 1 parks
//! threads of three kinds on a redb file (in `interrupt` in a node version 2 renames, after a
//! journaled effect; waiting for the approval of a tool version 2 renames; a step that failed
//! after a node version 2 renames finished, its write kept). A child process of version 2 says on
//! stderr when it starts resuming them and when it is done; the parent kills it a random 0-N ms
//! after it started, N being about twice what the resumes take here.
//!
//! After every kill each thread is wholly on version 1 (its fingerprint, latest checkpoint and
//! approvals as the first process left them, no `graph.migrated`) or wholly on version 2
//! (`graph.migrated` once, its cursor naming nodes of version 2 only). Then every thread is
//! resumed to its end in this process: each completes, says `graph.migrated` exactly once, and
//! neither the journaled effect nor the kept write ran again.
//!
//! At least a fifth of the kills must land before every move committed (some thread still on
//! version 1); when the trials fall short of that, more trials (each killing within the first
//! half of the resumes) run until they reach it, up to three times the trials in all.
//!
//! Trials default to 30 (`AGENTFLOW_CRASH_GRAPH_MIGRATION_TRIALS`); the seed is printed and can
//! be replayed with `AGENTFLOW_CRASH_GRAPH_MIGRATION_SEED`.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentflow::approval::{ApprovalStatus, Approver, RoleAuthorizer};
use agentflow::prelude::*;
use agentflow::tool::Risk;
use agentflow::{Durability, PendingKind, Store};
use agentflow_store::{ApprovalRecord, Checkpoint};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::support::kill::next;
use crate::support::process::own_test;
use crate::support::stores::open_redb;
use crate::support::temp::temp_dir;

/// Threads of each kind.
const EACH: usize = 4;
const KINDS: [&str; 3] = ["review", "pay", "crash"];
/// The nodes of version 2; a thread on version 2 waits in these only.
const V2_NODES: [&str; 6] = ["intake", "confirm", "pay", "split", "boxing", "flaky"];
/// The directory of the store file and of what the outside world saw (`world.log`).
const DIR: &str = "AGENTFLOW_CRASH_GRAPH_MIGRATION_DIR";

/// The calls the tools made in this process: (tool, recipient).
static SENT: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

/// Where the nodes record what they did outside the graph.
pub struct Deps {
    dir: PathBuf,
}

impl Deps {
    /// Appends `line` to `world.log` with one write and an fsync: what the outside world saw,
    /// whatever happens to the process next.
    fn record(&self, line: &str) {
        let path = self.dir.join("world.log");
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path).unwrap();
        f.write_all(format!("{line}\n").as_bytes()).unwrap();
        f.sync_all().unwrap();
    }
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct Note {
    to: String,
}

/// Notifies a customer.
#[tool(risk = irreversible)]
pub async fn notify(args: Note) -> Result<Value, ToolError> {
    SENT.lock().unwrap().push(("notify".into(), args.to));
    Ok(json!({ "sent": true }))
}

/// Messages a customer.
#[tool(risk = irreversible)]
pub async fn message(args: Note) -> Result<Value, ToolError> {
    SENT.lock().unwrap().push(("message".into(), args.to));
    Ok(json!({ "sent": true }))
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Order {
    pub kind: String,
    pub customer: String,
    #[reduce(append)]
    pub log: Vec<String>,
}

mod v1 {
    use super::*;

    #[graph(state = Order, deps = Deps, start = intake, max_steps = 10, id = "crash_orders")]
    pub mod flow {
        use super::*;

        #[node(goto = [review, pay, split])]
        async fn intake(s: &Order) -> Step<Order> {
            match s.kind.as_str() {
                "review" => goto!(review),
                "pay" => goto!(pay),
                _ => goto!(split),
            }
        }

        #[node(goto = [END], interrupt)]
        async fn review(s: &Order, cx: &Ctx<Deps>) -> Result<Step<Order>, NodeError> {
            let customer = s.customer.clone();
            cx.effect("open", |_| async move {
                cx.deps().record(&format!("open:{customer}"));
                Ok::<_, NodeError>(())
            })
            .await?;
            let answer: String = cx.interrupt(json!({ "order": s.customer }))?;
            Ok(goto!(END, Order::update().log(vec![format!("reviewed: {answer}")])))
        }

        #[node(goto = [END], tools = [notify])]
        async fn pay(s: &Order, cx: &Ctx<Deps>) -> Result<Step<Order>, NodeError> {
            cx.run_tool(notify, json!({ "to": s.customer })).await?;
            Ok(goto!(END, Order::update().log(vec![format!("sent to {}", s.customer)])))
        }

        #[node(goto = [pack, flaky])]
        async fn split(_s: &Order) -> Step<Order> {
            goto!([pack, flaky])
        }

        #[node(goto = [END])]
        async fn pack(s: &Order, deps: &Deps) -> Step<Order> {
            deps.record(&format!("pack:{}", s.customer));
            goto!(END, Order::update().log(vec!["packed".into()]))
        }

        /// The step fails here, after `pack` finished.
        #[node(goto = [END])]
        async fn flaky(_s: &Order) -> Result<Step<Order>, NodeError> {
            Err(NodeError::fatal("the process died mid-step"))
        }
    }
}

mod v2 {
    use super::*;

    #[graph(state = Order, deps = Deps, start = intake, max_steps = 10, id = "crash_orders", version = 2,
            migrate(from = 1, nodes(review -> confirm, pack -> boxing), tools(notify -> message)))]
    pub mod flow {
        use super::*;

        #[node(goto = [confirm, pay, split])]
        async fn intake(s: &Order) -> Step<Order> {
            match s.kind.as_str() {
                "review" => goto!(confirm),
                "pay" => goto!(pay),
                _ => goto!(split),
            }
        }

        #[node(goto = [END], interrupt)]
        async fn confirm(s: &Order, cx: &Ctx<Deps>) -> Result<Step<Order>, NodeError> {
            let customer = s.customer.clone();
            cx.effect("open", |_| async move {
                cx.deps().record(&format!("open:{customer}"));
                Ok::<_, NodeError>(())
            })
            .await?;
            let answer: String = cx.interrupt(json!({ "order": s.customer }))?;
            Ok(goto!(END, Order::update().log(vec![format!("reviewed: {answer}")])))
        }

        #[node(goto = [END], tools = [message])]
        async fn pay(s: &Order, cx: &Ctx<Deps>) -> Result<Step<Order>, NodeError> {
            cx.run_tool(message, json!({ "to": s.customer })).await?;
            Ok(goto!(END, Order::update().log(vec![format!("sent to {}", s.customer)])))
        }

        #[node(goto = [boxing, flaky])]
        async fn split(_s: &Order) -> Step<Order> {
            goto!([boxing, flaky])
        }

        #[node(goto = [END])]
        async fn boxing(s: &Order, deps: &Deps) -> Step<Order> {
            deps.record(&format!("pack:{}", s.customer));
            goto!(END, Order::update().log(vec!["packed".into()]))
        }

        #[node(goto = [END])]
        async fn flaky(_s: &Order) -> Step<Order> {
            goto!(END, Order::update().log(vec!["flaky ran".into()]))
        }
    }
}

/// Every thread as (id, kind), kinds interleaved.
fn threads() -> Vec<(String, &'static str)> {
    (0..EACH).flat_map(|i| KINDS.map(|kind| (format!("t-{kind}-{i}"), kind))).collect()
}

fn store_at(dir: &Path) -> Arc<dyn Store> {
    Arc::new(open_redb(dir.join("threads.redb")).expect("open the store"))
}

fn authorizer() -> RoleAuthorizer {
    RoleAuthorizer::new().role_for(Risk::Irreversible, "payments")
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).map(|s| s.lines().map(String::from).collect()).unwrap_or_default()
}

/// The process of version 1: parks every thread and exits.
#[tokio::test]
#[ignore = "child process of `sigkill_while_threads_move_to_version_2`: version 1 parks"]
async fn crash_graph_migration_park_child() {
    let Ok(dir) = std::env::var(DIR) else { return };
    let deps = Deps { dir: PathBuf::from(&dir) };
    let app = v1::flow::graph().app().store(store_at(&deps.dir));
    for (thread, kind) in threads() {
        let order = Order { kind: kind.into(), customer: thread.clone(), log: vec![] };
        let runner = app.runner(&deps).thread(thread.as_str()).owner("agent:orders");
        let run = runner.durability(Durability::Sync).run(order).await.unwrap();
        match (kind, &run.outcome) {
            ("review", Outcome::Interrupted { pending, .. }) => assert_eq!(pending[0].kind, PendingKind::Interrupt),
            ("pay", Outcome::Interrupted { pending, .. }) => assert_eq!(pending[0].kind, PendingKind::Approval),
            ("crash", Outcome::Failed { .. }) => {}
            (kind, other) => panic!("{kind}: {other:?}"),
        }
    }
}

/// The process of version 2: resumes every thread as far as it goes without a person (an
/// answer is given to the question), saying `resuming` and `resumed` on stderr.
#[tokio::test]
#[ignore = "child process of `sigkill_while_threads_move_to_version_2`: version 2 resumes"]
async fn crash_graph_migration_resume_child() {
    let Ok(dir) = std::env::var(DIR) else { return };
    let deps = Deps { dir: PathBuf::from(&dir) };
    let app = v2::flow::graph().app().store(store_at(&deps.dir));
    eprintln!("resuming");
    for (thread, kind) in threads() {
        let runner = app.runner(&deps).thread(thread.as_str()).durability(Durability::Sync);
        let run = if kind == "review" { runner.resume_with("yes").await } else { runner.resume().await };
        let run = run.unwrap_or_else(|e| panic!("{thread}: {e}"));
        let expected = if kind == "pay" { "interrupted" } else { "completed" };
        let got = match run.outcome {
            Outcome::Interrupted { .. } => "interrupted",
            Outcome::Completed => "completed",
            _ => "other",
        };
        assert_eq!(got, expected, "{thread}: {:?}", run.outcome);
    }
    eprintln!("resumed");
}

fn child(test: &str, dir: &Path) -> Command {
    let mut cmd = own_test(module_path!(), test);
    cmd.env(DIR, dir).stdout(Stdio::null()).stderr(Stdio::piped());
    cmd
}

/// What version 1 left of a thread.
#[derive(Debug, PartialEq)]
struct Parked {
    fingerprint: String,
    latest: Checkpoint,
    approvals: Vec<ApprovalRecord>,
}

fn parked(store: &dyn Store, thread: &str) -> Parked {
    Parked {
        fingerprint: store.thread(thread).unwrap().expect("the thread").graph_fingerprint,
        latest: store.latest_checkpoint(thread).unwrap().expect("a checkpoint"),
        approvals: store.list_approvals(thread).unwrap(),
    }
}

fn migrated(store: &dyn Store, thread: &str) -> Vec<Value> {
    let audit = store.list_audit(thread).unwrap();
    audit.into_iter().filter(|e| e.kind == "graph.migrated").map(|e| e.detail).collect()
}

/// Checks each thread is wholly on version 1 or wholly on version 2; returns how many are
/// still on version 1.
fn check_whole(dir: &Path, before: &BTreeMap<String, Parked>, fingerprints: (&str, &str), what: &str) -> usize {
    let store = store_at(dir);
    let mut on_v1 = 0;
    for (thread, _) in threads() {
        let now = parked(store.as_ref(), &thread);
        let moves = migrated(store.as_ref(), &thread);
        if now.fingerprint == fingerprints.0 {
            assert!(moves.is_empty(), "{what}: `{thread}` is on version 1 and says it moved: {moves:?}");
            assert_eq!(&now, &before[&thread], "{what}: `{thread}` is on version 1 and changed");
            on_v1 += 1;
        } else {
            assert_eq!(now.fingerprint, fingerprints.1, "{what}: `{thread}` is on neither version");
            assert_eq!(moves.len(), 1, "{what}: `{thread}` moved {} times: {moves:?}", moves.len());
            assert_eq!((moves[0]["from"].as_u64(), moves[0]["to"].as_u64()), (Some(1), Some(2)), "{what}: `{thread}`");
            let cursor = &now.latest.cursor;
            assert!(
                cursor.iter().all(|n| V2_NODES.contains(&n.as_str())),
                "{what}: `{thread}` is on version 2 and waits in {cursor:?}"
            );
        }
    }
    on_v1
}

/// Resumes every thread of the file in `dir` to its end on version 2, and checks each
/// completed, moved once, and nothing the first process did ran again.
async fn complete_all(dir: &Path, world_before: &[String], what: &str) {
    let store = store_at(dir);
    let deps = Deps { dir: dir.to_path_buf() };
    let app = v2::flow::graph().app().store(Arc::clone(&store));
    let desk = app.approvals(authorizer()).unwrap();
    SENT.lock().unwrap().clear();
    for (thread, kind) in threads() {
        let runner = || app.runner(&deps).thread(thread.as_str());
        if store.thread(&thread).unwrap().unwrap().status != agentflow_store::ThreadStatus::Completed {
            let run = match kind {
                "review" => runner().resume_with("yes").await,
                "pay" => {
                    let asked = runner().resume().await.unwrap_or_else(|e| panic!("{what}: `{thread}`: {e}"));
                    let Outcome::Interrupted { pending, .. } = &asked.outcome else {
                        panic!("{what}: `{thread}` does not wait for its approval: {:?}", asked.outcome)
                    };
                    assert_eq!(pending[0].payload["tool"], "message", "{what}: `{thread}`: {pending:?}");
                    let id = pending[0].payload["approval"].as_str().expect("an approval id");
                    desk.approve(id, &Approver::new("alice", ["payments"])).unwrap();
                    runner().resume().await
                }
                _ => runner().resume().await,
            };
            let run = run.unwrap_or_else(|e| panic!("{what}: `{thread}`: {e}"));
            assert_eq!(run.outcome, Outcome::Completed, "{what}: `{thread}`");
        }
        let state = app.state(&thread).unwrap().expect("a completed thread").state;
        let log = match kind {
            "review" => vec!["reviewed: yes".to_string()],
            "pay" => vec![format!("sent to {thread}")],
            _ => vec!["packed".to_string(), "flaky ran".to_string()],
        };
        assert_eq!(state.log, log, "{what}: `{thread}`");
        let moves = migrated(store.as_ref(), &thread);
        assert_eq!(moves.len(), 1, "{what}: `{thread}` moved {} times: {moves:?}", moves.len());
        if kind == "pay" {
            // The request of version 1 cancelled, the one asked anew under the new tool carried out.
            let mut asked: Vec<_> = store
                .list_approvals(&thread)
                .unwrap()
                .into_iter()
                .map(|a| (a.tool, a.status == ApprovalStatus::Succeeded, a.status == ApprovalStatus::Cancelled))
                .collect();
            asked.sort();
            let expected = [("message".to_string(), true, false), ("notify".to_string(), false, true)];
            assert_eq!(asked, expected, "{what}: `{thread}` (tool, carried out, cancelled)");
        }
    }
    assert_eq!(lines(&dir.join("world.log")), world_before, "{what}: an effect or a kept write ran again");
    let mut sent = SENT.lock().unwrap().clone();
    sent.sort();
    let mut expected: Vec<_> =
        threads().into_iter().filter(|(_, k)| *k == "pay").map(|(t, _)| ("message".to_string(), t)).collect();
    expected.sort();
    assert_eq!(sent, expected, "{what}: each approved call ran once, under the new tool");
}

fn copy_template(template: &Path, dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    for file in ["threads.redb", "world.log"] {
        std::fs::copy(template.join(file), dir.join(file)).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_while_threads_move_to_version_2() {
    let trials: u32 =
        std::env::var("AGENTFLOW_CRASH_GRAPH_MIGRATION_TRIALS").ok().and_then(|t| t.parse().ok()).unwrap_or(30);
    let mut seed: u64 =
        std::env::var("AGENTFLOW_CRASH_GRAPH_MIGRATION_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
        });
    println!("crash-graph-migration test: {trials} trials, AGENTFLOW_CRASH_GRAPH_MIGRATION_SEED={seed}");
    let root = temp_dir("crash-graph-migration");
    let template = root.join("template");
    std::fs::create_dir_all(&template).unwrap();
    let out = child("crash_graph_migration_park_child", &template).output().unwrap();
    assert!(out.status.success(), "the version 1 process failed: {}", String::from_utf8_lossy(&out.stderr));
    let world = lines(&template.join("world.log"));
    assert_eq!(world.len(), 2 * EACH, "each effect and each `pack` ran once: {world:?}");
    let fingerprints = (v1::flow::graph().fingerprint().to_string(), v2::flow::graph().fingerprint().to_string());
    let fingerprints = (fingerprints.0.as_str(), fingerprints.1.as_str());
    let before: BTreeMap<String, Parked> = {
        let store = store_at(&template);
        threads().into_iter().map(|(t, _)| (t.clone(), parked(store.as_ref(), &t))).collect()
    };
    assert!(before.values().all(|p| p.fingerprint == fingerprints.0));

    // The resumes left alone: how long they take here, and that they move everything.
    let reference = root.join("reference");
    copy_template(&template, &reference);
    let mut proc = child("crash_graph_migration_resume_child", &reference).spawn().unwrap();
    let mut stderr = BufReader::new(proc.stderr.take().unwrap()).lines().map_while(Result::ok);
    assert!(stderr.by_ref().any(|line| line == "resuming"), "the version 2 process did not start");
    let started = Instant::now();
    let resumed = stderr.by_ref().any(|line| line == "resumed");
    let took = started.elapsed();
    let status = proc.wait().unwrap();
    assert!(resumed && status.success(), "the version 2 process failed: {status}");
    assert_eq!(check_whole(&reference, &before, fingerprints, "the reference"), 0);
    complete_all(&reference, &world, "the reference").await;
    let window = (2 * took.as_micros() as u64).max(2_000);
    println!("crash-graph-migration test: the resumes take {took:?}; kills within {window} us of their start");

    let (quota, cap) = (trials / 5, trials * 3);
    let (mut before_all_moved, mut part_moved, mut trial) = (0, 0, 0);
    while trial < trials || (before_all_moved < quota && trial < cap) {
        let dir = root.join(format!("trial-{trial}"));
        copy_template(&template, &dir);
        // The extra trials, run only to reach the quota, aim at the first half of the resumes.
        let range = if trial < trials { window } else { (window / 4).max(1) };
        let delay = Duration::from_micros(next(&mut seed) % range);
        let mut proc = child("crash_graph_migration_resume_child", &dir).spawn().unwrap();
        let mut stderr = BufReader::new(proc.stderr.take().unwrap()).lines().map_while(Result::ok);
        let _ = stderr.by_ref().find(|line| line == "resuming");
        std::thread::sleep(delay);
        let _ = proc.kill(); // SIGKILL on Unix
        let _ = proc.wait();
        let what = format!("trial {trial} (kill {} us into the resumes)", delay.as_micros());
        let on_v1 = check_whole(&dir, &before, fingerprints, &what);
        if on_v1 > 0 {
            before_all_moved += 1;
        }
        if on_v1 > 0 && on_v1 < threads().len() {
            part_moved += 1;
        }
        complete_all(&dir, &world, &what).await;
        let _ = std::fs::remove_dir_all(&dir);
        trial += 1;
    }
    println!(
        "crash-graph-migration test: {trial} trials, {before_all_moved} killed before every thread moved \
         ({part_moved} with some threads moved)"
    );
    assert!(
        before_all_moved >= quota,
        "too few kills landed before every thread moved: {before_all_moved} of {trial} trials ({} run to reach \
         the quota), {quota} needed",
        trial - trials
    );
    let _ = std::fs::remove_dir_all(&root);
}
