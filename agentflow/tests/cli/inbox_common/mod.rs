//! What the inbox tests share: a graph whose refund waits for an approval, a store filled
//! with one such paused thread (and that approval read back), a users file, and `agentflow
//! serve` run as a subprocess; a large graph (`escalation`), and driving a browser (`browser`).
// Each test crate includes this module and uses a part of it.
#![allow(dead_code)]

pub mod browser;
pub mod http;
mod large;

pub use large::*;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use agentflow::approval::{ApprovalRecord, ApprovalStatus};
use agentflow::prelude::*;
use agentflow::{RedbStore, Store};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[derive(Deserialize, schemars::JsonSchema)]
pub struct RefundArgs {
    pub order_id: String,
    pub amount: u32,
}

/// Refunds an order. Irreversible, so every call waits for a person.
#[tool(risk = irreversible)]
pub async fn refund(args: RefundArgs) -> Result<Value, ToolError> {
    // The tool's result echoes the arguments it actually received.
    Ok(json!({ "refunded": args.amount, "order_id": args.order_id }))
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
pub struct Pay {
    pub order: String,
    pub amount: u32,
    #[reduce(append)]
    pub log: Vec<String>,
    pub receipt: Option<Value>,
}

#[graph(state = Pay, start = check)]
pub mod payments {
    use super::*;

    #[node(goto = [pay, END])]
    async fn check(s: &Pay) -> Result<Step<Pay>, NodeError> {
        let update = Pay::update().log(vec![format!("checked order {}", s.order)]);
        if s.amount == 0 { Ok(goto!(END, update)) } else { Ok(goto!(pay, update)) }
    }

    #[node(goto = [END], tools = [refund])]
    async fn pay(s: &Pay, cx: &Ctx<()>) -> Result<Step<Pay>, NodeError> {
        let obs = cx.run_tool(refund, json!({ "order_id": s.order, "amount": s.amount })).await?;
        Ok(goto!(END, Pay::update().log(vec!["paid".into()]).receipt(Some(obs.body))))
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
pub struct Question {
    pub text: String,
    pub answer: Option<String>,
}

#[graph(state = Question, start = ask)]
pub mod questions {
    use super::*;

    #[node(goto = [END], interrupt)]
    async fn ask(s: &Question, cx: &Ctx<()>) -> Result<Step<Question>, NodeError> {
        let answer: String = cx.interrupt(json!({ "question": s.text }))?;
        Ok(goto!(END, Question::update().answer(Some(answer))))
    }
}

#[graph(state = Question, start = delegate)]
pub mod delegating {
    use super::*;

    /// Asks through the `questions` subgraph.
    #[node(goto = [END], subgraphs = [questions])]
    async fn delegate(s: &Question, cx: &Ctx<()>) -> Result<Step<Question>, NodeError> {
        let answered = cx.subgraph(questions::graph(), s.clone()).await?;
        Ok(goto!(END, Question::update().answer(answered.answer)))
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Draft {
    pub title: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
pub struct Reviews {
    #[reduce(append)]
    pub verdicts: Vec<String>,
}

#[graph(state = Reviews, start = fan)]
pub mod reviewers {
    use super::*;

    #[node(goto = [review])]
    async fn fan(_s: &Reviews) -> Step<Reviews> {
        let drafts = ["intro", "outro"].map(|t| Draft { title: t.to_string() });
        goto!(each(review, drafts.to_vec()))
    }

    /// Each instance asks about its own draft.
    #[node(goto = [END], interrupt)]
    async fn review(_s: &Reviews, #[payload] draft: &Draft, cx: &Ctx<()>) -> Result<Step<Reviews>, NodeError> {
        let verdict: String = cx.interrupt(json!({ "review": draft.title }))?;
        Ok(goto!(END, Reviews::update().verdicts(vec![format!("{}: {verdict}", draft.title)])))
    }
}

/// Adds `t-reviews`, where two instances of the map worker `review` each ask about a draft.
pub async fn add_two_instance_questions(store: Arc<dyn Store>) {
    let run = reviewers::graph()
        .app()
        .store(store)
        .runner(&())
        .thread("t-reviews")
        .run(Reviews::default())
        .await
        .expect("interrupted run");
    assert!(matches!(run.outcome, Outcome::Interrupted { .. }), "{:?}", run.outcome);
}

/// Adds `t-parent`, whose subgraph run (a thread of its own under `t-parent/`) asks "merge it?";
/// the parent waits on that question as its own.
pub async fn add_delegated_question(store: Arc<dyn Store>) {
    let run = delegating::graph()
        .app()
        .store(store)
        .runner(&())
        .thread("t-parent")
        .run(Question { text: "merge it?".into(), answer: None })
        .await
        .expect("interrupted run");
    assert!(matches!(run.outcome, Outcome::Interrupted { .. }), "{:?}", run.outcome);
}

/// Adds `t-question`, paused at an interrupt that asks "ship it?".
pub async fn add_question(store: Arc<dyn Store>) {
    let run = questions::graph()
        .app()
        .store(store)
        .runner(&())
        .thread("t-question")
        .run(Question { text: "ship it?".into(), answer: None })
        .await
        .expect("interrupted run");
    assert!(matches!(run.outcome, Outcome::Interrupted { .. }), "{:?}", run.outcome);
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime")
}

/// A fresh directory for one test's files.
pub fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("agentflow-inbox-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

pub fn app(store: Arc<dyn Store>) -> App<Pay> {
    payments::graph().app().store(store)
}

/// Fills a store with `t-paused` (a refund of 40 on order A-1 requested by `agent`, waiting
/// for approval) and `t-done` (completed). The store is closed when this returns.
pub async fn fill(store: Arc<dyn Store>) {
    let app = app(store);
    {
        let paused = app
            .runner(&())
            .thread("t-paused")
            .owner("agent")
            .run(Pay { order: "A-1".into(), amount: 40, ..Pay::default() })
            .await
            .expect("paused run");
        assert!(matches!(paused.outcome, Outcome::Interrupted { .. }), "{:?}", paused.outcome);
        let done = app
            .runner(&())
            .thread("t-done")
            .owner("agent")
            .run(Pay { order: "A-2".into(), amount: 0, ..Pay::default() })
            .await
            .expect("completed run");
        assert_eq!(done.outcome, Outcome::Completed);
    }
}

/// A redb store file filled by [`fill`].
pub async fn filled_redb(dir: &Path) -> PathBuf {
    let path = dir.join("runs.redb");
    fill(Arc::new(RedbStore::open(&path).expect("open store"))).await;
    path
}

/// Opens the redb file. A running server may hold it for as long as it runs: [`Serve::stop`]
/// it first.
pub fn open_redb(path: &Path) -> Arc<dyn Store> {
    match RedbStore::open(path) {
        Ok(s) => Arc::new(s),
        Err(e) => panic!("open the store (stop a server running on it first): {e}"),
    }
}

/// Resumes `t-paused` in this process (the file is open only during the run; a server on it
/// must be stopped).
pub async fn resume(path: &Path) -> agentflow::Run<Pay> {
    app(open_redb(path)).runner(&()).thread("t-paused").resume().await.expect("resume")
}

/// Opens the redb file, reads, closes it again.
pub fn with_redb<T>(path: &Path, f: impl FnOnce(&Arc<dyn Store>) -> T) -> T {
    f(&open_redb(path))
}

/// The OS user running the tests, as `id -un` names it.
pub fn os_user() -> String {
    let out = Command::new("id").arg("-un").output().expect("run `id -un`");
    assert!(out.status.success(), "id -un: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("a UTF-8 user name").trim().to_string()
}

/// The users: `alice` and `carol` may decide irreversible calls, `bob` has no role, `agent`
/// (who requests the refunds) has the role too. Tokens: `<name>-token`; alice's is given hashed.
/// `carol` is the OS user running the tests: the CLI reaches a server holding the file as her.
pub fn users_file(dir: &Path) -> PathBuf {
    use sha2::Digest;
    let hash: String = sha2::Sha256::digest(b"alice-token").iter().map(|b| format!("{b:02x}")).collect();
    let path = dir.join("users.json");
    let users = json!({ "users": [
        { "name": "alice", "token_sha256": hash, "roles": ["irreversible"] },
        { "name": "bob", "token": "bob-token", "roles": ["support"] },
        { "name": "agent", "token": "agent-token", "roles": ["irreversible"] },
        { "name": "carol", "token": "carol-token", "roles": ["irreversible", "refunds"], "os_user": os_user() },
    ]});
    std::fs::write(&path, users.to_string()).expect("users file");
    path
}

/// `agentflow serve` running in a subprocess on a free loopback port; killed on drop.
///
/// A redb file is open in one process at a time, and the server may hold it for as long as it
/// runs: a test reads or changes the store itself, or runs a CLI command other than
/// `pending`, `approve`, `reject` and `show` on it, only after [`Serve::stop`]; to go on with
/// the inbox after that, [`Stopped::start`] starts it again (on another port: users log in again).
pub struct Serve {
    child: Child,
    // Kept open: the server's stdout stays a pipe with a reader.
    _stdout: BufReader<std::process::ChildStdout>,
    /// `http://127.0.0.1:PORT`
    pub base: String,
    /// How it was started.
    how: Stopped,
}

/// A server that was stopped, and how it was started, to start it again.
#[derive(Debug, Clone)]
pub struct Stopped {
    store: String,
    users: PathBuf,
    extra: Vec<String>,
}

impl Serve {
    /// Starts the server on `store` (a redb path or a postgres URL) and waits for the line
    /// that names its address.
    pub fn start(store: &str, users: &Path, extra: &[&str]) -> Serve {
        let how = Stopped::new(store, users, extra);
        let mut child =
            serve_command(store, users, extra).stdout(Stdio::piped()).spawn().expect("start agentflow serve");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        let mut reader = BufReader::new(stdout);
        reader.read_line(&mut line).expect("read the server's first line");
        let Some(at) = line.find("http://") else {
            let _ = child.kill();
            panic!("agentflow serve did not start: {line:?}");
        };
        let base = line[at..].split_whitespace().next().unwrap_or_default().trim_end_matches('/').to_string();
        Serve { child, _stdout: reader, base, how }
    }

    /// Stops the server (it must still be running) and waits until it has exited, so the store
    /// file is free; what it returns starts it again.
    pub fn stop(mut self) -> Stopped {
        let exited = self.child.try_wait().expect("ask whether the server exited");
        assert!(exited.is_none(), "agentflow serve exited by itself: {exited:?}");
        self.child.kill().expect("stop agentflow serve");
        self.child.wait().expect("wait for agentflow serve to exit");
        self.how.clone()
    }
}

impl Stopped {
    /// A server not started yet: [`Stopped::start`] starts it on `store` as [`Serve::start`] does.
    pub fn new(store: &str, users: &Path, extra: &[&str]) -> Stopped {
        Stopped { store: store.to_string(), users: users.to_path_buf(), extra: to_strings(extra) }
    }

    /// Starts the server again as it was started (on another port: log in again).
    pub fn start(&self) -> Serve {
        let extra: Vec<&str> = self.extra.iter().map(String::as_str).collect();
        Serve::start(&self.store, &self.users, &extra)
    }

    /// Starts the server as it was started, expecting it to refuse to (see [`start_refused`]).
    pub fn start_refused(&self) -> std::process::Output {
        let extra: Vec<&str> = self.extra.iter().map(String::as_str).collect();
        start_refused(&self.store, &self.users, &extra)
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn to_strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| a.to_string()).collect()
}

/// `agentflow serve` on `store` on a free loopback port, free of the environment that would
/// change what it does.
fn serve_command(store: &str, users: &Path, extra: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_agentflow"));
    command
        .args(["serve", "--store", store, "--bind", "127.0.0.1:0", "--users"])
        .arg(users)
        // The gauge's refresh stays out of the tests' way unless a test asks for it.
        .args(if extra.contains(&"--stuck-every") { &[][..] } else { &["--stuck-every", "1h"][..] })
        .args(extra)
        .env_remove("AGENTFLOW_STORE")
        .env_remove("AGENTFLOW_ROLES")
        .env_remove("AGENTFLOW_TWO_PERSON")
        .env_remove("AGENTFLOW_PG_SCHEMA")
        .env_remove("AGENTFLOW_AS")
        .env_remove("AGENTFLOW_ACCESS")
        .stderr(Stdio::inherit());
    command
}

/// Runs `agentflow serve` on `store` expecting it to refuse to start: its output (stderr
/// captured) once it exited by itself, within ten seconds. A server that starts instead is
/// stopped, and the test fails.
pub fn start_refused(store: &str, users: &Path, extra: &[&str]) -> std::process::Output {
    let mut child = serve_command(store, users, extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start agentflow serve");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while child.try_wait().expect("ask whether the server exited").is_none() {
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("agentflow serve started on {store} (users {}): it was expected to refuse", users.display());
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child.wait_with_output().expect("the refused server's output")
}

/// Runs the CLI on `store`.
pub fn cli(store: &str, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_agentflow"))
        .arg("--store")
        .arg(store)
        .args(args)
        .env_remove("AGENTFLOW_STORE")
        .env_remove("AGENTFLOW_ROLES")
        .env_remove("AGENTFLOW_TWO_PERSON")
        .env_remove("AGENTFLOW_PG_SCHEMA")
        .env_remove("AGENTFLOW_AS")
        .env_remove("AGENTFLOW_ACCESS")
        .output()
        .expect("run the agentflow binary")
}

/// The value of the first `name="csrf" value="..."` in a page.
pub fn csrf_in(page: &str) -> String {
    let key = "name=\"csrf\" value=\"";
    let at = page.find(key).unwrap_or_else(|| panic!("no CSRF field in the page: {page}")) + key.len();
    page[at..].split('"').next().unwrap_or_default().to_string()
}

/// The one approval in the store, read with the library (the file is closed again after).
pub fn the_approval(store: &Path) -> ApprovalRecord {
    with_redb(store, |s| {
        let list = s.list_approvals("t-paused").unwrap();
        assert_eq!(list.len(), 1, "{list:?}");
        list.into_iter().next().unwrap()
    })
}

/// Asserts the approval is still pending, undecided, with the arguments it was asked with.
pub fn assert_untouched(store: &Path) {
    let a = the_approval(store);
    assert_eq!(a.status, ApprovalStatus::Pending, "{a:?}");
    assert_eq!(a.decided_by, None);
    assert_eq!(serde_json::from_str::<Value>(&a.args).unwrap(), json!({ "order_id": "A-1", "amount": 40 }));
}

/// A store filled by [`filled_redb`] in a new directory, its one approval as filled (read
/// before the server starts), and `agentflow serve` on it.
pub async fn setup(name: &str) -> (PathBuf, Serve, ApprovalRecord) {
    let dir = temp_dir(name);
    let store = filled_redb(&dir).await;
    let approval = the_approval(&store);
    let serve = Serve::start(store.to_str().unwrap(), &users_file(&dir), &[]);
    (store, serve, approval)
}

/// A path segment, percent-encoded as the pages write links.
pub fn segment(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// Runs `f` in one write transaction of the redb file at `store`, committed after it.
pub fn with_write(store: &Path, f: impl FnOnce(&redb::WriteTransaction)) {
    let db = redb::Database::open(store).unwrap();
    let txn = db.begin_write().unwrap();
    f(&txn);
    txn.commit().unwrap();
}

/// Overwrites every pending write of `thread` with bytes no decoder accepts.
pub fn damage_pending_writes(txn: &redb::WriteTransaction, thread: &str) {
    use redb::ReadableTable;
    let mut pending = txn.open_table(agentflow_store::tables::PENDING_WRITES).unwrap();
    let keys: Vec<(u64, String, u32)> = pending
        .range((thread, 0, "", 0)..=(thread, u64::MAX, "\u{10FFFF}", u32::MAX))
        .unwrap()
        .map(|entry| {
            let (key, _) = entry.unwrap();
            let (_, seq, node, idx) = key.value();
            (seq, node.to_string(), idx)
        })
        .collect();
    assert!(!keys.is_empty(), "{thread} has pending writes to damage");
    for (seq, node, idx) in keys {
        pending.insert((thread, seq, node.as_str(), idx), b"\x09\xff".as_slice()).unwrap();
    }
}
