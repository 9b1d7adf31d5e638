//! What the `agentflow` binary's tests share: a small payments graph whose refund waits for a
//! person (and a front desk delegating to it), a graph that asks a question, a store filled
//! with a paused, a completed and a failed thread, and running the binary on a store.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;

use agentflow::prelude::*;
use agentflow::{RedbStore, Store};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

// The irreversible refund tool and the runtime are the inbox tests' own.
pub use crate::inbox_common::{refund, runtime};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
pub struct Pay {
    pub order: String,
    pub amount: u32,
    #[reduce(add)]
    pub steps: u32,
    #[reduce(append)]
    pub log: Vec<String>,
    pub receipt: Option<Value>,
}

#[graph(state = Pay, start = check)]
pub mod payments {
    use super::*;

    #[node(goto = [pay, END])]
    async fn check(s: &Pay) -> Result<Step<Pay>, NodeError> {
        if s.order == "broken" {
            return Err(NodeError::fatal("the order does not exist"));
        }
        let update = Pay::update().steps(1).log(vec!["checked".into()]);
        if s.amount == 0 { Ok(goto!(END, update)) } else { Ok(goto!(pay, update)) }
    }

    #[node(goto = [END], tools = [refund])]
    async fn pay(s: &Pay, cx: &Ctx<()>) -> Result<Step<Pay>, NodeError> {
        let obs = cx.run_tool(refund, json!({ "order_id": s.order, "amount": s.amount })).await?;
        Ok(goto!(END, Pay::update().steps(1).log(vec!["paid".into()]).receipt(Some(obs.body))))
    }
}

/// `payments` as the child of a front desk: the refund waits for approval inside the child.
#[graph(state = Pay, start = delegate)]
pub mod front {
    use super::*;

    #[node(goto = [END], subgraphs = [payments])]
    async fn delegate(s: &Pay, cx: &Ctx<()>) -> Result<Step<Pay>, NodeError> {
        let done =
            cx.subgraph(payments::graph(), Pay { order: s.order.clone(), amount: s.amount, ..Pay::default() }).await?;
        Ok(goto!(END, Pay::update().receipt(done.receipt)))
    }
}

/// A fresh directory for one test's store files.
pub fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("agentflow-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// The payments app on `store`, its runs logged (so exports carry a thread's event log).
pub fn app(store: Arc<dyn Store>) -> App<Pay> {
    payments::graph().app().store(store).event_log(true)
}

/// Fills a store file: `t-paused` waits for an approval of a refund requested by `agent`,
/// `t-done` completed, `t-failed` failed. The store is closed when this returns.
pub fn fill(path: &Path) {
    let store: Arc<dyn Store> = Arc::new(RedbStore::open(path).expect("open store"));
    let app = app(store);
    runtime().block_on(async {
        let run = |thread: &'static str, order: &'static str, amount: u32| {
            let app = app.clone();
            async move {
                let input = Pay { order: order.into(), amount, ..Pay::default() };
                app.runner(&()).thread(thread).owner("agent").run(input).await
            }
        };
        let paused = run("t-paused", "A-1", 40).await.expect("paused run");
        assert!(matches!(paused.outcome, Outcome::Interrupted { .. }), "{:?}", paused.outcome);
        let done = run("t-done", "A-2", 0).await.expect("completed run");
        assert_eq!(done.outcome, Outcome::Completed);
        let _ = run("t-failed", "broken", 5).await;
    });
}

/// Runs the binary on `store` with `args`.
/// The binary on `store` with `args`, free of the environment that would change what it does.
pub fn af_command(store: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_agentflow"));
    command
        .arg("--store")
        .arg(store)
        .args(args)
        .env_remove("AGENTFLOW_STORE")
        .env_remove("AGENTFLOW_ROLES")
        .env_remove("AGENTFLOW_TWO_PERSON")
        .env_remove("AGENTFLOW_PG_SCHEMA")
        .env_remove("AGENTFLOW_AS")
        .env_remove("AGENTFLOW_ACCESS");
    command
}

pub fn af(store: &Path, args: &[&str]) -> Output {
    af_command(store, args).output().expect("run the agentflow binary")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs the binary, expects exit code 0, and parses its JSON output.
pub fn af_json(store: &Path, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let out = af(store, &all);
    assert_eq!(out.status.code(), Some(0), "agentflow {args:?} failed: {}", stderr(&out));
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("agentflow {args:?}: not JSON ({e}): {}", stdout(&out)))
}

/// Expects the binary to exit with `code` and a message containing `needle` on stderr.
pub fn expect_refusal(out: &Output, code: i32, needle: &str) {
    assert_eq!(out.status.code(), Some(code), "stdout: {} stderr: {}", stdout(out), stderr(out));
    assert!(stderr(out).contains(needle), "expected `{needle}` in: {}", stderr(out));
}

pub fn by_id<'a>(list: &'a Value, id: &str) -> &'a Value {
    list.as_array().expect("array").iter().find(|t| t["id"] == id).unwrap_or_else(|| panic!("no `{id}` in {list}"))
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
pub struct Ask {
    pub question: String,
    pub answer: Option<u32>,
}

#[graph(state = Ask, start = ask)]
pub mod asking {
    use super::*;

    #[node(goto = [END], interrupt)]
    async fn ask(s: &Ask, cx: &Ctx<()>) -> Result<Step<Ask>, NodeError> {
        let n: u32 = cx.interrupt(json!({ "question": s.question }))?;
        Ok(goto!(END, Ask::update().answer(Some(n))))
    }
}
