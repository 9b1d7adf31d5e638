//! Purge, legal hold and retention through the App: a thread with a subgraph child, a
//! question, an effect, an approval and audit entries loses every payload (canaries planted in
//! each kind are found nowhere in the live store afterwards, the redb file's bytes and a
//! PostgreSQL dump included), keeps its tombstones and a verifying audit log; a hold refuses
//! the purge; a run holding the thread refuses it; the access policy gates it; a retention
//! policy compacts, purges and respects holds.

use crate::support::pg;
use crate::support::stores::open_redb;

use std::sync::Arc;
use std::time::Duration;

use agentflow::RetentionPolicy;
use agentflow::access::{Actor, Operation, RoleAccess};
use agentflow::persist::{HistoryError, PurgeError, ThreadStatus};
use agentflow::prelude::*;
use agentflow::{PendingKind, Store};
use agentflow_store::{
    ApprovalRecord, ApprovalStatus, CompactError, NewAuditEntry, PostgresStore, ReadError, StepCommit,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// What every planted payload starts with.
const CANARY: &str = "zq-canary-41d7";

fn canary(kind: &str) -> String {
    format!("{CANARY}-{kind}")
}

/// The canary of `kind` planted in thread `thread`: `{CANARY}-{thread}-{kind}`.
fn canary_of(thread: &str, kind: &str) -> String {
    format!("{CANARY}-{thread}-{kind}")
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct Mail {
    text: String,
}

/// Sends a mail. Irreversible: a human approves each.
#[tool(risk = irreversible)]
async fn send_mail(args: Mail) -> Result<Value, ToolError> {
    Ok(json!({ "sent": args.text.len() }))
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Outbox {
    pub tag: String,
    pub text: String,
    pub receipt: Option<Value>,
}

#[graph(state = Outbox, start = mail)]
pub mod mailer {
    use super::*;

    #[node(goto = [END], tools = [send_mail])]
    async fn mail(s: &Outbox, cx: &Ctx<()>) -> Result<Step<Outbox>, NodeError> {
        let obs = cx.run_tool(send_mail, json!({ "text": format!("{} {}-approval", s.text, s.tag) })).await?;
        Ok(goto!(END, Outbox::update().receipt(Some(obs.body))))
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Intake {
    /// `{CANARY}-{thread}`: what the nodes make their canaries of.
    pub tag: String,
    pub note: String,
    pub answer: String,
    pub fetched: String,
    pub receipt: Option<Value>,
}

#[graph(state = Intake, start = ask)]
pub mod intake {
    use super::*;

    #[node(goto = [send], interrupt)]
    async fn ask(s: &Intake, cx: &Ctx<()>) -> Result<Step<Intake>, NodeError> {
        let answer: String = cx.interrupt(json!({ "question": format!("{}-payload", s.tag) }))?;
        let effect = format!("{}-effect", s.tag);
        let fetched = cx.effect("fetch", |_| async { Ok::<_, NodeError>(effect) }).await?;
        Ok(goto!(send, Intake::update().answer(answer).fetched(fetched)))
    }

    #[node(goto = [END], subgraphs = [mailer])]
    async fn send(s: &Intake, cx: &Ctx<()>) -> Result<Step<Intake>, NodeError> {
        let sent =
            cx.subgraph(mailer::graph(), Outbox { tag: s.tag.clone(), text: s.answer.clone(), receipt: None }).await?;
        Ok(goto!(END, Intake::update().receipt(sent.receipt)))
    }
}

/// Runs `thread` until its child waits for the mail's approval, with a canary in the state,
/// the question, its answer, the effect's result, the approval's arguments and an audit entry.
async fn planted(app: &App<Intake>, store: &Arc<dyn Store>, thread: &str) -> String {
    let tag = format!("{CANARY}-{thread}");
    let input = Intake { note: canary_of(thread, "state"), tag, ..Intake::default() };
    let run = app.runner(&()).thread(thread).owner("agent:bot").run(input).await.unwrap();
    assert!(matches!(run.outcome, Outcome::Interrupted { .. }), "{:?}", run.outcome);
    // The question's payload is stored while it waits (its answer replaces it).
    assert!(everything(&**store, thread).contains(&canary_of(thread, "payload")));
    let run = app.runner(&()).thread(thread).resume_with(canary_of(thread, "answer")).await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{:?}", run.outcome) };
    assert_eq!(pending[0].kind, PendingKind::Approval, "{pending:?}");
    store
        .append_audit(thread, NewAuditEntry::new(1, "operator", "note", json!({ "said": canary_of(thread, "audit") })))
        .unwrap();
    let children = store.child_threads(thread).unwrap().items;
    assert_eq!(children.len(), 1, "{children:?}");
    children[0].id.clone()
}

/// Everything the store API gives back about `thread`, as text (bytes read as UTF-8).
fn everything(store: &dyn Store, thread: &str) -> String {
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let pending: Vec<_> = store.list_pending_approvals().unwrap().into_iter().filter(|a| a.thread == thread).collect();
    let runs: Vec<_> = store.list_runs().unwrap().into_iter().filter(|r| r.thread == thread).collect();
    let mut all = format!("{pending:?}{runs:?}");
    let Some(dump) = store.dump_thread(thread).unwrap() else { return all };
    all.push_str(&format!("{:?}{:?}{:?}", dump.thread, dump.audit, dump.approvals));
    for cp in &dump.checkpoints {
        all.push_str(&format!("{:?}", cp.metadata));
        all.extend(cp.snapshot.as_deref().map(text));
        all.extend(cp.delta.iter().map(|d| text(d)));
    }
    all.extend(dump.pending_writes.iter().map(|w| text(&w.value)));
    all.extend(dump.effects.iter().map(|(k, v)| format!("{k:?}{}", text(v))));
    all
}

fn hits(haystack: &[u8], needle: &str) -> usize {
    haystack.windows(needle.len()).filter(|w| *w == needle.as_bytes()).count()
}

const KINDS: [&str; 6] = ["state", "payload", "answer", "effect", "approval", "audit"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_leaves_no_canary_in_the_live_store_nor_in_the_compacted_redb_file() {
    let path = crate::support::temp::temp_dir("purge").join("purge.redb");
    let redb = Arc::new(open_redb(&path).unwrap());
    let store: Arc<dyn Store> = redb.clone();
    let app = intake::graph().app().store(Arc::clone(&store));
    let child = planted(&app, &store, "t-1").await;
    // A thread of its own keeps its data: its canaries show the searches find what is there.
    let other = planted(&app, &store, "t-2").await;
    let before = everything(&*store, "t-1") + &everything(&*store, &child);
    // (The question's payload was checked while it waited: its answer replaced it.)
    for kind in KINDS.iter().filter(|k| **k != "payload") {
        assert!(before.contains(&canary_of("t-1", kind)), "{kind} was planted: {before}");
    }

    let report = app.purge_thread("t-1", "dpo").unwrap();
    assert_eq!(report.threads, ["t-1".to_string(), child.clone()]);
    assert!(report.checkpoints > 0 && report.effects > 0 && report.approvals == 1, "{report:?}");
    assert!(report.file_compacted, "{report:?}");
    for id in ["t-1", child.as_str()] {
        assert_eq!(store.thread(id).unwrap().unwrap().status, ThreadStatus::Purged);
        let verified = store.verify_audit(id).unwrap().expect("the audit log verifies after the purge");
        assert!(verified.purged > 0, "{verified:?}");
    }
    let after = everything(&*store, "t-1") + &everything(&*store, &child);
    assert!(!after.contains(CANARY), "a canary survived in the live store: {after}");
    let tombstone = store.list_audit("t-1").unwrap().pop().unwrap();
    assert_eq!((tombstone.kind.as_str(), tombstone.actor.as_str()), ("thread.purged", "dpo"));
    assert!(app.state("t-1").unwrap().is_none());
    let resumed = app.runner(&()).thread("t-1").resume().await;
    assert!(resumed.is_err(), "a purged thread does not resume: {resumed:?}");
    let kept = everything(&*store, "t-2") + &everything(&*store, &other);
    for kind in KINDS.iter().filter(|k| **k != "payload") {
        assert!(kept.contains(&canary_of("t-2", kind)), "the other thread keeps its {kind}");
    }

    // The file's bytes, closed: the other thread's canaries are there, the purged thread's
    // are not (the purge compacted the file, which rewrote the pages that held them).
    drop((app, store));
    Arc::into_inner(redb).expect("one handle").close().unwrap();
    let bytes = std::fs::read(&path).unwrap();
    assert!(hits(&bytes, &canary_of("t-2", "state")) > 0, "the other thread's state is in the file");
    let left: Vec<(&str, usize)> = KINDS.iter().map(|k| (*k, hits(&bytes, &canary_of("t-1", k)))).collect();
    eprintln!("hits of the purged thread's canaries in the redb file: {left:?}");
    assert!(left.iter().all(|(_, n)| *n == 0), "the purged thread's bytes stay in the file: {left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_thread_or_one_with_a_held_child_is_not_purged_and_a_released_one_is() {
    let store: Arc<dyn Store> = crate::support::stores::store();
    let app = intake::graph().app().store(Arc::clone(&store));
    let child = planted(&app, &store, "case").await;
    let hold = app.hold_thread(&child, "matter 42", "counsel").unwrap();
    assert_eq!(hold.reason, "matter 42");
    assert_eq!(app.legal_hold(&child).unwrap(), Some(hold));
    let refused = app.purge_thread("case", "dpo");
    assert!(
        matches!(&refused, Err(HistoryError::Purge(PurgeError::Held { thread, .. })) if *thread == child),
        "{refused:?}"
    );
    assert!(everything(&*store, "case").contains(&canary_of("case", "state")), "nothing was purged");
    let released = app.release_hold(&child, "counsel").unwrap();
    assert!(released.is_some());
    // A hold on the parent keeps its subgraph child too: the child is not purged on its own.
    app.hold_thread("case", "matter 43", "counsel").unwrap();
    let refused = app.purge_thread(&child, "dpo");
    assert!(
        matches!(&refused, Err(HistoryError::Purge(PurgeError::Held { thread, .. })) if thread == "case"),
        "{refused:?}"
    );
    assert_ne!(store.thread(&child).unwrap().unwrap().status, ThreadStatus::Purged);
    assert!(app.release_hold("case", "counsel").unwrap().is_some());
    app.purge_thread("case", "dpo").unwrap();
    assert!(!everything(&*store, "case").contains(CANARY));
    let kinds: Vec<String> = store.list_audit(&child).unwrap().into_iter().map(|e| e.kind).collect();
    assert!(kinds.contains(&"thread.held".to_string()) && kinds.contains(&"thread.released".to_string()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_a_run_holds_is_not_purged() {
    let store: Arc<dyn Store> = crate::support::stores::store();
    let app = intake::graph().app().store(Arc::clone(&store));
    planted(&app, &store, "busy").await;
    store.acquire_lease("busy", "worker-9", 60_000, agentflow::timer::now_ms()).unwrap();
    let refused = app.purge_thread("busy", "dpo");
    assert!(matches!(&refused, Err(HistoryError::InUse { holder, .. }) if holder == "worker-9"), "{refused:?}");
    assert!(refused.unwrap_err().to_string().contains("cancel the run"));
    assert_eq!(store.thread("busy").unwrap().unwrap().status, ThreadStatus::Interrupted);
    // A run holding the parent refuses the purge of its subgraph child: the run may need it.
    let child = store.child_threads("busy").unwrap().items.pop().expect("a subgraph child").id;
    let refused = app.purge_thread(&child, "dpo");
    assert!(
        matches!(&refused, Err(HistoryError::InUse { thread, holder, .. }) if thread == "busy" && holder == "worker-9"),
        "{refused:?}"
    );
    assert_ne!(store.thread(&child).unwrap().unwrap().status, ThreadStatus::Purged);
    store.release_lease("busy", "worker-9").unwrap();
    app.purge_thread(&child, "dpo").unwrap();
    assert_eq!(store.thread(&child).unwrap().unwrap().status, ThreadStatus::Purged);
    // The purge's own leases are gone with it.
    assert!(store.thread("busy").unwrap().unwrap().lease.is_none_or(|l| l.holder == "worker-9"));
    app.purge_thread("busy", "dpo").unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_and_holds_are_checked_as_the_purge_operation_for_the_named_actor() {
    let store: Arc<dyn Store> = crate::support::stores::store();
    let policy = RoleAccess::new()
        .allow(Operation::Start, "agent")
        .allow(Operation::Resume, "agent")
        .allow(Operation::Purge, "dpo");
    let app = intake::graph().app().store(Arc::clone(&store)).access(policy);
    let agent = app.acting_as(Actor::new("agent:bot", ["agent"]));
    let input = Intake { note: canary("state"), ..Intake::default() };
    agent.runner(&()).thread("gated").owner("agent:bot").run(input).await.unwrap();

    let denied = app.purge_thread("gated", Actor::new("mallory", ["agent"]));
    assert!(matches!(denied, Err(HistoryError::Access(_))), "{denied:?}");
    let denied = app.hold_thread("gated", "x", Actor::new("mallory", ["agent"]));
    assert!(matches!(denied, Err(HistoryError::Access(_))), "{denied:?}");
    assert!(everything(&*store, "gated").contains(&canary("state")));
    // Of another tenant: not there for the actor at all.
    let elsewhere = app.purge_thread("gated", Actor::new("dora", ["dpo"]).for_tenants(["globex"]));
    assert!(matches!(elsewhere, Err(HistoryError::UnknownThread { .. })), "{elsewhere:?}");
    app.hold_thread("gated", "audit", Actor::new("dora", ["dpo"])).unwrap();
    app.release_hold("gated", Actor::new("dora", ["dpo"])).unwrap();
    app.purge_thread("gated", Actor::new("dora", ["dpo"])).unwrap();
    assert_eq!(store.thread("gated").unwrap().unwrap().status, ThreadStatus::Purged);
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Tally {
    #[reduce(add)]
    pub n: u32,
}

#[graph(state = Tally, start = one)]
pub mod tally {
    use super::*;

    #[node(goto = [two])]
    async fn one(_s: &Tally) -> Step<Tally> {
        goto!(two, Tally::update().n(1))
    }

    #[node(goto = [three])]
    async fn two(_s: &Tally) -> Step<Tally> {
        goto!(three, Tally::update().n(1))
    }

    #[node(goto = [END])]
    async fn three(_s: &Tally) -> Step<Tally> {
        goto!(END, Tally::update().n(1))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retention_policy_compacts_then_purges_finished_threads_and_a_hold_wins() {
    let store: Arc<dyn Store> = crate::support::stores::store();
    let app = tally::graph().app().store(Arc::clone(&store));
    for id in ["old", "held", "fresh"] {
        app.runner(&()).thread(id).run(Tally::default()).await.unwrap();
    }
    // Another graph's thread in the same store is not this policy's.
    let other = intake::graph().app().store(Arc::clone(&store));
    let input = Intake { note: canary("state"), ..Intake::default() };
    other.runner(&()).thread("theirs").owner("agent:bot").run(input).await.unwrap();
    app.hold_thread("held", "matter 7", "counsel").unwrap();
    let updated = |id: &str| store.thread(id).unwrap().unwrap().updated_at;
    let policy = RetentionPolicy::new().keep_checkpoints(1).purge_after(Duration::from_secs(3600));

    // Now: every thread is too young to purge; each keeps one checkpoint, but the held one.
    let now = updated("fresh");
    let report = app.apply_retention(&policy, now).unwrap();
    assert_eq!(report.compacted, ["fresh", "old"], "{report:?}");
    assert_eq!(report.held, ["held"], "{report:?}");
    assert_eq!(store.list_checkpoints("old").unwrap().len(), 1);
    assert!(store.list_checkpoints("held").unwrap().len() > 1, "a held thread keeps its history");
    let refused = app.compact("held", 1);
    assert!(
        matches!(&refused, Err(HistoryError::Compact(CompactError::Held { held, .. })) if held == "held"),
        "{refused:?}"
    );

    // An hour later: the finished threads go, but the held one; each purge is audited by the
    // app's actor.
    let later = updated("old").max(updated("fresh")) + 3_600_000;
    let report = app.apply_retention(&policy, later).unwrap();
    assert_eq!(report.purged, ["fresh", "old"], "{report:?}");
    assert_eq!(report.held, ["held"], "{report:?}");
    for id in ["fresh", "old"] {
        assert_eq!(store.thread(id).unwrap().unwrap().status, ThreadStatus::Purged);
        let last = store.list_audit(id).unwrap().pop().unwrap();
        assert_eq!((last.kind.as_str(), last.actor.as_str()), ("thread.purged", app.actor().id.as_str()));
    }
    assert_eq!(store.thread("held").unwrap().unwrap().status, ThreadStatus::Completed);
    assert_ne!(store.thread("theirs").unwrap().unwrap().status, ThreadStatus::Purged);
    // Applied again: nothing more to do.
    let again = app.apply_retention(&policy, later).unwrap();
    assert!(again.purged.is_empty() && again.compacted.is_empty(), "{again:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_purges_only_threads_that_ended_well_and_none_with_an_unknown_outcome() {
    let store: Arc<dyn Store> = crate::support::stores::store();
    let app = tally::graph().app().store(Arc::clone(&store));
    let ids = ["done", "made-good", "failed", "cancelled", "no-budget", "unsure"];
    for id in ids {
        app.runner(&()).thread(id).run(Tally::default()).await.unwrap();
    }
    let set = |id: &str, status: ThreadStatus| {
        let mut record = store.thread(id).unwrap().unwrap();
        record.status = status;
        store.commit_step(StepCommit::new(record)).unwrap();
    };
    set("made-good", ThreadStatus::Compensated);
    set("failed", ThreadStatus::Failed);
    set("cancelled", ThreadStatus::Cancelled);
    set("no-budget", ThreadStatus::BudgetExhausted);
    let mut unsure = StepCommit::new(store.thread("unsure").unwrap().unwrap());
    unsure.new_approvals.push(ApprovalRecord {
        id: "unsure-ap".into(),
        thread: "unsure".into(),
        node: "two".into(),
        tool: "pay".into(),
        args: "{}".into(),
        args_hash: "h".into(),
        risk: "irreversible".into(),
        requester: "agent".into(),
        reason: "over limit".into(),
        created_at: 1,
        expires_at: u64::MAX,
        status: ApprovalStatus::OutcomeUnknown,
        decided_by: Some("ops".into()),
        decision_note: None,
        conditions: None,
        updated_at: 1,
    });
    store.commit_step(unsure).unwrap();
    let policy = RetentionPolicy::new().purge_after(Duration::ZERO);
    let later = ids.iter().map(|id| store.thread(id).unwrap().unwrap().updated_at).max().unwrap() + 1;
    let report = app.apply_retention(&policy, later).unwrap();
    assert_eq!(report.purged, ["done", "made-good"], "{report:?}");
    assert!(report.failed.is_empty() && report.held.is_empty(), "{report:?}");
    for id in ["failed", "cancelled", "no-budget", "unsure"] {
        assert_ne!(store.thread(id).unwrap().unwrap().status, ThreadStatus::Purged, "{id}");
        assert!(!store.list_checkpoints(id).unwrap().is_empty(), "{id}");
    }
    // By hand, an operator still purges them.
    app.purge_thread("failed", "dpo").unwrap();
    assert_eq!(store.thread("failed").unwrap().unwrap().status, ThreadStatus::Purged);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_retention_cannot_read_is_reported_and_the_sweep_goes_on() {
    let inner: Arc<dyn Store> = crate::support::stores::store();
    let mut hooked = crate::support::hooked_store::Hooked::new(Arc::clone(&inner));
    hooked.fail_list_checkpoints = Some(Box::new(|thread: &str| {
        (thread == "broken").then(|| ReadError::BrokenChain {
            path: "store".into(),
            thread: thread.to_string(),
            seq: 1,
            missing: 0,
        })
    }));
    let store: Arc<dyn Store> = Arc::new(hooked);
    let app = tally::graph().app().store(Arc::clone(&store));
    for id in ["a-fine", "broken", "z-fine"] {
        app.runner(&()).thread(id).run(Tally::default()).await.unwrap();
    }
    let report = app.apply_retention(&RetentionPolicy::new().keep_checkpoints(1), agentflow::timer::now_ms()).unwrap();
    assert_eq!(report.compacted, ["a-fine", "z-fine"], "{report:?}");
    assert_eq!(report.failed.len(), 1, "{report:?}");
    assert_eq!(report.failed[0].0, "broken");
    assert!(report.failed[0].1.contains("broken"), "{report:?}");
    assert!(inner.list_checkpoints("broken").unwrap().len() > 1, "nothing was done to it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scheduler_and_a_worker_apply_the_retention_policy() {
    let store: Arc<dyn Store> = crate::support::stores::store();
    let app = tally::graph().app().store(Arc::clone(&store));
    app.runner(&()).thread("by-scheduler").run(Tally::default()).await.unwrap();
    let policy = RetentionPolicy::new().purge_after(Duration::ZERO).every(Duration::from_millis(20));
    let config = agentflow::timer::SchedulerConfig::default().poll(Duration::from_millis(10)).retention(policy);
    let scheduler = app.scheduler_with(Arc::new(()), config);
    let purged = |id: &str| store.thread(id).unwrap().unwrap().status == ThreadStatus::Purged;
    for _ in 0..500 {
        if purged("by-scheduler") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    scheduler.shutdown().await;
    assert!(purged("by-scheduler"), "the scheduler applied the policy");

    app.runner(&()).thread("by-worker").run(Tally::default()).await.unwrap();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let worker = agentflow::Worker::new(app.clone(), Arc::new(())).retention(policy);
    let handle = tokio::spawn(worker.run(shutdown.clone()));
    for _ in 0..500 {
        if purged("by-worker") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    shutdown.cancel();
    handle.await.unwrap().unwrap();
    assert!(purged("by-worker"), "the worker applied the policy");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_a_purge_and_vacuum_full_leave_no_canary_in_a_data_dump() {
    let Some(url) = pg::pg_url() else { return };
    let schema = pg::unique_schema("purge", "canary");
    let pg = PostgresStore::builder().schema(&schema).open(&url).unwrap();
    let store: Arc<dyn Store> = Arc::new(pg);
    let app = intake::graph().app().store(Arc::clone(&store));
    let child = planted(&app, &store, "t-1").await;
    planted(&app, &store, "t-2").await;
    app.purge_thread("t-1", "dpo").unwrap();
    let after = everything(&*store, "t-1") + &everything(&*store, &child);
    assert!(!after.contains(CANARY), "{after}");
    for id in ["t-1", child.as_str()] {
        store.verify_audit(id).unwrap().expect("verifies");
    }
    let Some(dump) = vacuum_and_dump(&url, &schema) else { return };
    // The dump shows bytea in hex: search both forms.
    let hex = |s: &str| s.bytes().map(|b| format!("{b:02x}")).collect::<String>();
    assert!(hits(dump.as_bytes(), &hex(&canary_of("t-2", "state"))) > 0, "the kept thread's state is in the dump");
    for kind in KINDS {
        let c = canary_of("t-1", kind);
        assert_eq!(hits(dump.as_bytes(), &c) + hits(dump.as_bytes(), &hex(&c)), 0, "{kind} is in the dump");
    }
    assert!(dump.contains("thread.purged"), "the tombstone is in the dump");
}

/// `VACUUM FULL` of the schema's tables, then `pg_dump --data-only` of the schema (with the
/// server's own tools; `None`, said once, where they are missing).
fn vacuum_and_dump(url: &str, schema: &str) -> Option<String> {
    let tables = ["threads", "checkpoints", "pending_writes", "effects", "audit", "approvals", "run_queue"];
    let list: Vec<String> = tables.iter().map(|t| format!("\"{schema}\".{t}")).collect();
    let vacuum = std::process::Command::new("psql")
        .args([url, "-v", "ON_ERROR_STOP=1", "-c", &format!("VACUUM FULL {}", list.join(", "))])
        .output();
    let Ok(vacuum) = vacuum else {
        eprintln!("SKIPPED the dump check: psql is not installed");
        return None;
    };
    assert!(vacuum.status.success(), "{}", String::from_utf8_lossy(&vacuum.stderr));
    let dump = std::process::Command::new("pg_dump").args(["--data-only", "--schema", schema, url]).output();
    let Ok(dump) = dump else {
        eprintln!("SKIPPED the dump check: pg_dump is not installed");
        return None;
    };
    assert!(dump.status.success(), "{}", String::from_utf8_lossy(&dump.stderr));
    Some(String::from_utf8_lossy(&dump.stdout).into_owned())
}
