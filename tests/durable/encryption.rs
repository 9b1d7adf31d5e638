//! Encryption at rest through the App: a graph run on a `SealedStore` plants a distinct canary in
//! every payload kind (the input state and a personal field, node updates, a map instance's
//! write kept while another instance waits, the question and its answer, a journaled effect,
//! a tool call's arguments and result, an approval's arguments, an audit entry, and the status
//! line of a thread whose node failed with a message quoting a value). The raw redb
//! file (and, with a server, a PostgreSQL data dump and the database's files after
//! `CHECKPOINT`) holds none of them, while the unsealed store still lists the threads and their
//! statuses. After a purge, a copy of the data file taken before it no longer opens the purged
//! thread's payloads (its key is destroyed), while another thread's still open.

use crate::support::pg;
use crate::support::stores::open_redb;

use std::path::Path;
use std::sync::Arc;

use agentflow::approval::{Approver, RoleAuthorizer};
use agentflow::prelude::*;
use agentflow::sealed::{Kek, KeyStore, PostgresKeyStore, RedbKeyStore, SealedStore, StaticKeyProvider};
use agentflow::tool::Risk;
use agentflow::{PendingKind, Store};
use agentflow_store::{NewAuditEntry, PostgresStore, RedbStore, StorageError, ThreadStatus};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// What every planted payload starts with (unique to this file).
const CANARY: &str = "qv-sealed-7c19";

fn canary(kind: &str) -> String {
    format!("{CANARY}-{kind}")
}

/// The kinds planted, each found in the opened store and in no raw byte.
const KINDS: [&str; 13] = [
    "state",
    "personal",
    "update",
    "instance",
    "payload",
    "answer",
    "effect",
    "args",
    "result",
    "conditions",
    "audit",
    "item",
    "detail",
];

/// The kinds planted in the threads of [`case`] ([`KINDS`] but the failed thread's detail).
fn case_kinds() -> impl Iterator<Item = &'static str> {
    KINDS.into_iter().filter(|k| *k != "detail")
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct Transfer {
    to: String,
}

/// Wires money. Irreversible: a human approves each.
#[tool(risk = irreversible)]
async fn wire(args: Transfer) -> Result<Value, ToolError> {
    Ok(json!({ "receipt": canary("result"), "to_len": args.to.len() }))
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Item(pub String);

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, State)]
pub struct Case {
    pub note: String,
    #[state(pii)]
    pub email: String,
    #[reduce(append)]
    pub log: Vec<String>,
    pub receipt: Option<Value>,
}

#[graph(state = Case, start = fan)]
pub mod case {
    use super::*;

    #[node(goto = [work])]
    async fn fan(_s: &Case) -> Step<Case> {
        goto!(each(work, vec![Item(canary("item")), Item("ask".to_string())]))
    }

    /// The first instance writes at once; the second asks a person first.
    #[node(goto = [pay], interrupt, parallel = 2)]
    async fn work(_s: &Case, #[payload] item: &Item, cx: &Ctx<()>) -> Result<Step<Case>, NodeError> {
        if item.0 == "ask" {
            let answer: String = cx.interrupt(json!({ "question": canary("payload") }))?;
            return Ok(goto!(pay, Case::update().log(vec![answer])));
        }
        Ok(goto!(pay, Case::update().log(vec![format!("{} {}", item.0, canary("instance"))])))
    }

    #[node(goto = [END], tools = [wire])]
    async fn pay(_s: &Case, cx: &Ctx<()>) -> Result<Step<Case>, NodeError> {
        let fetched = cx.effect("lookup", |_| async { Ok::<_, NodeError>(canary("effect")) }).await?;
        let obs = cx.run_tool(wire, json!({ "to": canary("args") })).await?;
        Ok(goto!(END, Case::update().log(vec![fetched, canary("update")]).receipt(Some(obs.body))))
    }
}

#[graph(state = Case, start = parse)]
pub mod failing {
    use super::*;

    /// Fails the way a parse of a wrong-shaped value does: its message quotes the value.
    #[node(goto = [END])]
    async fn parse(_s: &Case) -> Result<Step<Case>, NodeError> {
        Err(NodeError::fatal(format!("invalid type: string \"{}\", expected u32", canary("detail"))))
    }
}

/// Runs `thread` of [`failing`] on `store` to its failure; its detail holds the canary.
async fn failed(store: &Arc<dyn Store>, thread: &str) {
    let app = failing::graph().app().store(Arc::clone(store));
    let _ = app.runner(&()).thread(thread).run(Case::default()).await;
    let record = store.thread(thread).unwrap().expect("the failed thread");
    assert_eq!(record.status, ThreadStatus::Failed);
    assert!(record.detail.contains(&canary("detail")), "the detail opens: {}", record.detail);
    let listed = store.list_threads().unwrap();
    assert!(listed.iter().any(|t| t.id == thread && t.detail.contains(&canary("detail"))), "{listed:?}");
}

fn provider() -> StaticKeyProvider {
    StaticKeyProvider::new(Kek::new([0x5a; 32]), vec![])
}

/// Runs `thread` to its end on `app`, planting every canary; the store is the sealed one.
async fn planted(app: &App<Case>, store: &Arc<dyn Store>, thread: &str) {
    let input = Case { note: canary("state"), email: canary("personal"), ..Case::default() };
    let run = app.runner(&()).thread(thread).owner("agent:bot").run(input).await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{:?}", run.outcome) };
    assert_eq!(pending[0].kind, PendingKind::Interrupt, "{pending:?}");
    // While it waits, the finished instance's write and the question are pending writes.
    let seq = store.latest_checkpoint(thread).unwrap().unwrap().seq;
    let pending_text =
        text_of(&store.pending_writes(thread, seq).unwrap().iter().map(|w| w.value.clone()).collect::<Vec<_>>());
    assert!(pending_text.contains(&canary("instance")) && pending_text.contains(&canary("payload")), "{pending_text}");
    let run = app.runner(&()).thread(thread).resume_with(canary("answer")).await.unwrap();
    let Outcome::Interrupted { pending, .. } = &run.outcome else { panic!("{:?}", run.outcome) };
    assert_eq!(pending[0].kind, PendingKind::Approval, "{pending:?}");
    let desk = app.approvals(RoleAuthorizer::new().role_for(Risk::Irreversible, "approver")).unwrap();
    let id = store.list_pending_approvals().unwrap().into_iter().find(|a| a.thread == thread).expect("approval").id;
    assert!(store.approval(&id).unwrap().unwrap().args.contains(&canary("args")));
    desk.approve_with_conditions(&id, &Approver::new("alice", ["approver"]), json!({ "limit": canary("conditions") }))
        .unwrap();
    store.append_audit(thread, NewAuditEntry::new(1, "operator", "note", json!({ "said": canary("audit") }))).unwrap();
    let run = app.runner(&()).thread(thread).resume().await.unwrap();
    assert!(matches!(run.outcome, Outcome::Completed), "{:?}", run.outcome);
}

fn text_of(blobs: &[Vec<u8>]) -> String {
    blobs.iter().map(|b| String::from_utf8_lossy(b).into_owned()).collect::<Vec<_>>().join(" ")
}

/// Everything the store API gives back about `thread`, as text.
fn everything(store: &dyn Store, thread: &str) -> String {
    let dump = store.dump_thread(thread).unwrap().expect("thread");
    let mut blobs: Vec<Vec<u8>> = Vec::new();
    for cp in &dump.checkpoints {
        blobs.extend(cp.snapshot.clone());
        blobs.extend(cp.delta.clone());
    }
    blobs.extend(dump.pending_writes.iter().map(|w| w.value.clone()));
    blobs.extend(dump.effects.iter().map(|(_, v)| v.clone()));
    let metadata: Vec<String> = dump.checkpoints.iter().map(|c| c.metadata.extra.to_string()).collect();
    format!("{:?} {:?} {metadata:?} {}", dump.audit, dump.approvals, text_of(&blobs))
}

fn hits(haystack: &[u8], needle: &str) -> usize {
    haystack.windows(needle.len()).filter(|w| *w == needle.as_bytes()).count()
}

/// Which kinds `bytes` holds a canary of.
fn found_in(bytes: &[u8]) -> Vec<&'static str> {
    let mut found: Vec<&str> = KINDS.iter().copied().filter(|k| hits(bytes, &canary(k)) > 0).collect();
    if found.is_empty() && hits(bytes, CANARY) > 0 {
        found.push("(a canary of another kind)");
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sealed_redb_file_holds_no_canary_and_a_copy_from_before_a_purge_no_longer_opens() {
    let dir = crate::support::temp::temp_dir("sealed");
    let (path, keys_path) = (dir.join("data.redb"), dir.join("keys.redb"));
    let keys = Arc::new(RedbKeyStore::open(&keys_path).unwrap());
    let sealed = Arc::new(SealedStore::new(open_redb(&path).unwrap(), keys.clone(), provider()));
    let store: Arc<dyn Store> = sealed.clone();
    assert!(store.seals_payloads());
    let app = case::graph().app().store(Arc::clone(&store));
    planted(&app, &store, "t-gone").await;
    planted(&app, &store, "t-kept").await;
    failed(&store, "t-failed").await;
    for thread in ["t-gone", "t-kept"] {
        let opened = everything(&*store, thread);
        // The question's payload left with its step (checked while it waited).
        for kind in case_kinds().filter(|k| *k != "payload") {
            assert!(opened.contains(&canary(kind)), "{kind} was planted in {thread}: {opened}");
        }
    }

    // The raw file: no canary, while the plain store lists the threads and their statuses.
    drop(app);
    drop(store);
    Arc::into_inner(sealed).expect("one handle").inner().flush().unwrap();
    let bytes = std::fs::read(&path).unwrap();
    assert!(hits(&bytes, "t-gone") > 0 && hits(&bytes, "t-kept") > 0, "the search reads the threads' records");
    assert_eq!(found_in(&bytes), Vec::<&str>::new(), "canaries in the raw redb file");
    assert_eq!(found_in(&std::fs::read(&keys_path).unwrap()), Vec::<&str>::new());
    let copy = dir.join("copy-before-purge.redb");
    std::fs::copy(&path, &copy).unwrap();
    {
        let plain = open_redb(&path).unwrap();
        let listed: Vec<(String, ThreadStatus)> =
            plain.list_threads().unwrap().into_iter().map(|t| (t.id, t.status)).collect();
        assert_eq!(
            listed,
            [
                ("t-failed".to_string(), ThreadStatus::Failed),
                ("t-gone".to_string(), ThreadStatus::Completed),
                ("t-kept".to_string(), ThreadStatus::Completed)
            ]
        );
        let stored = plain.thread("t-failed").unwrap().unwrap().detail;
        assert!(stored.starts_with("$sealed:"), "the plain store reads the sealed detail: {stored}");
        assert!(!everything(&plain, "t-gone").contains(CANARY), "the plain store reads only sealed forms");
    }

    // Purge through the App on the sealed store: the thread's key is destroyed first.
    let sealed = Arc::new(SealedStore::new(open_redb(&path).unwrap(), keys.clone(), provider()));
    let app = case::graph().app().store(sealed.clone());
    let report = app.purge_thread("t-gone", "dpo").unwrap();
    assert_eq!(report.threads, ["t-gone".to_string()]);
    assert!(keys.get("t-gone").unwrap().unwrap().is_destroyed());
    app.purge_thread("t-failed", "dpo").unwrap();
    drop(app);
    drop(sealed);

    // The copy taken before the purge, opened with the key store as it is now.
    let old = SealedStore::new(open_redb(&copy).unwrap(), keys.clone(), provider());
    let err = old.latest_checkpoint("t-gone").unwrap_err();
    assert!(
        matches!(&err, agentflow_store::ReadError::Storage(StorageError::Sealed { thread, .. }) if thread == "t-gone"),
        "{err}"
    );
    assert!(old.dump_thread("t-gone").is_err());
    // The failed thread's detail no longer opens in the copy: it reads as a fixed text, and
    // the listing still lists every thread.
    assert_eq!(old.thread("t-failed").unwrap().unwrap().detail, "(sealed)");
    assert_eq!(old.list_threads().unwrap().len(), 3);
    assert!(old.effect(&old.thread_effects("t-kept").unwrap()[0].0).unwrap().is_some());
    let kept = everything(&old, "t-kept");
    assert!(kept.contains(&canary("state")) && kept.contains(&canary("result")), "{kept}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sealed_postgres_data_holds_no_canary_in_a_dump_nor_in_the_table_files() {
    let Some(url) = pg::pg_url() else { return };
    let schema = pg::unique_schema("sealed", "canary");
    // The keys on the same server, in a schema of their own.
    let keys = PostgresKeyStore::open(&url, &format!("{schema}_keys")).unwrap();
    let pg_store = PostgresStore::builder().schema(&schema).open(&url).unwrap();
    let keys = Arc::new(keys);
    let store: Arc<dyn Store> = Arc::new(SealedStore::new(pg_store, keys.clone(), provider()));
    let app = case::graph().app().store(Arc::clone(&store));
    planted(&app, &store, "pg-1").await;
    failed(&store, "pg-failed").await;
    let opened = everything(&*store, "pg-1");
    for kind in case_kinds().filter(|k| *k != "payload") {
        assert!(opened.contains(&canary(kind)), "{kind}: {opened}");
    }
    let plain = PostgresStore::builder().schema(&schema).open(&url).unwrap();
    assert_eq!(plain.thread("pg-1").unwrap().unwrap().status, ThreadStatus::Completed);

    let dump = std::process::Command::new("pg_dump").args(["--data-only", "--schema", &schema, &url]).output();
    match dump {
        Ok(dump) => {
            assert!(dump.status.success(), "{}", String::from_utf8_lossy(&dump.stderr));
            assert!(String::from_utf8_lossy(&dump.stdout).contains("pg-1"), "the ids are in the dump");
            assert_eq!(found_in(&dump.stdout), Vec::<&str>::new(), "canaries in the data dump");
        }
        Err(_) => eprintln!("SKIPPED the dump check: pg_dump is not installed"),
    }
    match database_dir(&url) {
        Some(dir) => {
            let mut ids = 0;
            scan(&dir, &mut |bytes| {
                ids += hits(bytes, "apr-");
                assert_eq!(found_in(bytes), Vec::<&str>::new(), "canaries in the database's files");
            });
            assert!(ids > 0, "the search reads the files the approvals are in");
            eprintln!("scanned the database's files under {}", dir.display());
        }
        None => eprintln!("SKIPPED the table file check: the server's data directory is not readable here"),
    }

    // A copy of the rows taken before a purge (as stored: sealed), put back on another schema
    // after it: the purged thread's payloads no longer open, with the key store as it is now.
    let copy = plain.dump_thread("pg-1").unwrap().expect("rows of pg-1");
    app.purge_thread("pg-1", "dpo").unwrap();
    assert!(keys.get("pg-1").unwrap().unwrap().is_destroyed());
    let elsewhere = PostgresStore::builder().schema(format!("{schema}_copy")).open(&url).unwrap();
    elsewhere.restore_thread(copy).unwrap();
    let old = SealedStore::new(elsewhere, keys.clone(), provider());
    let err = old.latest_checkpoint("pg-1").unwrap_err();
    assert!(
        matches!(&err, agentflow_store::ReadError::Storage(StorageError::Sealed { thread, .. }) if thread == "pg-1"),
        "{err}"
    );
    let drop_sql = format!("DROP SCHEMA IF EXISTS \"{schema}\", \"{schema}_keys\", \"{schema}_copy\" CASCADE");
    let _ = std::process::Command::new("psql").args([url.as_str(), "-q", "-c", &drop_sql]).output();
}

/// After `CHECKPOINT`, the directory of the database's files (`None` where the server does
/// not say, or its files cannot be read from here).
fn database_dir(url: &str) -> Option<std::path::PathBuf> {
    let sql = "CHECKPOINT; SELECT current_setting('data_directory') || '/base/' || oid FROM pg_database WHERE datname = current_database()";
    let out =
        std::process::Command::new("psql").args([url, "-At", "-v", "ON_ERROR_STOP=1", "-c", sql]).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let dir = std::path::PathBuf::from(text.lines().last()?.trim());
    std::fs::read_dir(&dir).ok().map(|_| dir)
}

fn scan(dir: &Path, f: &mut dyn FnMut(&[u8])) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            scan(&path, f);
        } else if let Ok(bytes) = std::fs::read(&path) {
            f(&bytes);
        }
    }
}

#[test]
fn a_plain_store_does_not_seal() {
    assert!(!RedbStore::in_memory().unwrap().seals_payloads());
}
