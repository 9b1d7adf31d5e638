//! Every operation × {allowed, denied} × {library, CLI, inbox}: each cell performs the
//! operation for an actor whose role the role-access policy allows, or one whose role it does
//! not, and checks what really happened (allowed: the thing happened; denied: refused with the
//! access error, and nothing changed). Each surface is a function with a `match` on the
//! operation whose wildcard fails the test, so an operation added to the library fails here
//! until it is given a case on every surface.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentflow::access::{AccessError, Operation};
use agentflow::approval::{AnswerError, ApprovalStatus, DecisionError};
use agentflow::persist::HistoryError;
use agentflow::prelude::*;
use agentflow::{RedbStore, Store, WorkerError};
use agentflow_store::RunControl;
use serde_json::json;

use crate::access_fixture::{self as fx, OTHER, TENANT, Who, look};
use crate::cli_common::{Ask, Pay, af, asking, payments, stderr, stdout};
use crate::inbox_common::http::{self, User};
use crate::inbox_common::{Serve, Stopped, temp_dir, with_redb};

/// Whether a surface offers an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Offered {
    Yes,
    /// Not offered by design: the cell checked that no route performs it.
    No,
}

/// The library surface: the apps of the two graphs on one store, under the policy.
struct Library {
    store: Arc<dyn Store>,
    pay: App<Pay>,
    ask: App<Ask>,
    contact: App<fx::Contact>,
}

fn is_denied<E: std::fmt::Display>(what: &str, e: &E) {
    let text = e.to_string();
    assert!(text.contains("may not") && text.contains("`dan`"), "{what}: not an access refusal: {text}");
}

fn denied_access(e: &AccessError) -> bool {
    matches!(e, AccessError::Denied { .. })
}

/// Whether `t-old` (the thread the purge cells purge) was purged.
fn purged(store: &dyn Store) -> bool {
    store.thread("t-old").unwrap().is_some_and(|t| t.status == agentflow::persist::ThreadStatus::Purged)
}

/// A library cell.
async fn library(lib: &Library, op: Operation, who: Who) -> Offered {
    let store = lib.store.as_ref();
    let actor = who.actor();
    let pay = lib.pay.acting_as(actor.clone());
    let allowed = who == Who::Allowed;
    match op {
        Operation::List => match pay.list_threads() {
            Ok(threads) if allowed => {
                assert!(threads.iter().any(|t| t.id == "t-done"), "{threads:?}");
                assert!(!threads.iter().any(|t| t.id == OTHER), "another tenant's thread listed: {threads:?}");
            }
            Err(HistoryError::Access(e)) if !allowed => assert!(denied_access(&e), "{e}"),
            other => panic!("list for {who:?}: {other:?}"),
        },
        Operation::ReadState => match pay.state("t-done") {
            Ok(Some(snapshot)) if allowed => assert_eq!(snapshot.state.order, "O-t-done"),
            Err(HistoryError::Access(e)) if !allowed => assert!(denied_access(&e), "{e}"),
            other => panic!("state for {who:?}: {other:?}"),
        },
        Operation::ReadHistory => match pay.history("t-done") {
            Ok(history) if allowed => assert!(!history.is_empty()),
            Err(HistoryError::Access(e)) if !allowed => assert!(denied_access(&e), "{e}"),
            other => panic!("history for {who:?}: {other:?}"),
        },
        Operation::Start => {
            let thread = format!("t-new-{}", who.parts().0);
            let input = Pay { order: "N-1".into(), ..Pay::default() };
            let run = pay.runner(&()).thread(&thread).tenant(TENANT).owner("agent").run(input).await;
            match run {
                Ok(run) if allowed => assert_eq!(run.outcome, Outcome::Completed),
                Err(e) if !allowed => is_denied("start", &e),
                Ok(run) => panic!("start for {who:?}: {:?}", run.outcome),
                Err(e) => panic!("start for {who:?}: {e}"),
            }
            assert_eq!(look::exists(store, &thread), allowed);
        }
        Operation::UpdateState => {
            let before = look::head(store, "t-done");
            let update = Pay::update().log(vec![format!("by {}", who.parts().0)]);
            match lib.pay.update_state("t-done", update, actor) {
                Ok(seq) if allowed => assert!(seq > before),
                Err(HistoryError::Access(e)) if !allowed => assert!(denied_access(&e), "{e}"),
                other => panic!("update for {who:?}: {other:?}"),
            }
            let log = look::log(&lib.store, "t-done");
            assert_eq!(log.contains(&format!("by {}", who.parts().0)), allowed, "{log:?}");
            assert_eq!(look::head(store, "t-done") > before, allowed);
        }
        Operation::Fork => {
            let before = look::head(store, "t-done");
            match lib.pay.fork("t-done", look::first(store, "t-done"), actor) {
                Ok(seq) if allowed => assert!(seq > before),
                Err(HistoryError::Access(e)) if !allowed => assert!(denied_access(&e), "{e}"),
                other => panic!("fork for {who:?}: {other:?}"),
            }
            assert_eq!(look::head(store, "t-done") > before, allowed);
        }
        Operation::Resume => {
            let run = lib.ask.acting_as(actor).runner(&()).thread("t-res").resume().await;
            match run {
                Ok(run) if allowed => assert_eq!(run.outcome, Outcome::Completed),
                Err(e) if !allowed => is_denied("resume", &e),
                Ok(run) => panic!("resume for {who:?}: {:?}", run.outcome),
                Err(e) => panic!("resume for {who:?}: {e}"),
            }
            assert_eq!(look::status(store, "t-res") == "completed", allowed);
        }
        Operation::Answer => {
            // Read what it waits at as the app's people see it; answer as the actor.
            let reader = agentflow::approval::ApprovalDesk::for_store(Arc::clone(&lib.store), fx::authorizer());
            let seq = reader.waiting_interrupt("t-ask").expect("t-ask waits").0;
            let desk = lib.ask.approvals(fx::authorizer()).expect("desk").reading_as(actor.clone());
            match desk.answer_interrupt("t-ask", seq, json!(3), &actor) {
                Ok(answer) if allowed => assert_eq!(answer.by, "olga"),
                Err(AnswerError::Access(e)) if !allowed => assert!(denied_access(&e), "{e}"),
                other => panic!("answer for {who:?}: {other:?}"),
            }
            assert_eq!(look::answered(&lib.store, "t-ask"), allowed);
        }
        Operation::Decide => {
            let desk = lib.pay.approvals(fx::authorizer()).expect("desk");
            let (id, _) = look::approval(store, "t-pay");
            match desk.approve(&id, &actor) {
                Ok(record) if allowed => assert_eq!(record.status, ApprovalStatus::Approved),
                Err(DecisionError::Access(e)) if !allowed => assert!(denied_access(&e), "{e}"),
                other => panic!("approve for {who:?}: {other:?}"),
            }
            let (_, status) = look::approval(store, "t-pay");
            assert_eq!(status == ApprovalStatus::Approved, allowed, "{status:?}");
        }
        Operation::Cancel => {
            match lib.pay.cancel_run_as("t-q1", actor) {
                Ok(asked) if allowed => assert!(asked),
                Err(WorkerError::Access(e)) if !allowed => assert!(denied_access(&e), "{e}"),
                other => panic!("cancel for {who:?}: {other:?}"),
            }
            assert_eq!(look::control(store, "t-q1") == Some(RunControl::Cancel), allowed);
        }
        Operation::Pause => {
            match lib.pay.pause_run_as("t-q2", actor) {
                Ok(asked) if allowed => assert!(asked),
                Err(WorkerError::Access(e)) if !allowed => assert!(denied_access(&e), "{e}"),
                other => panic!("pause for {who:?}: {other:?}"),
            }
            assert_eq!(look::control(store, "t-q2") == Some(RunControl::Pause), allowed);
        }
        Operation::Compact => {
            let before = look::checkpoints(store, "t-old");
            assert!(before > 1, "t-old has {before} checkpoints");
            match pay.compact("t-old", 1) {
                Ok(report) if allowed => assert!(report.dropped > 0, "{report:?}"),
                Err(HistoryError::Access(e)) if !allowed => assert!(denied_access(&e), "{e}"),
                other => panic!("compact for {who:?}: {other:?}"),
            }
            assert_eq!(look::checkpoints(store, "t-old") < before, allowed);
        }
        // The denied cell is `vic`, who may read the state but not see personal data: a
        // typed state cannot be masked, so the library refuses it to them.
        Operation::SeePersonalData => {
            let contact = lib.contact.acting_as(if allowed { actor.clone() } else { fx::reader() });
            let before = fx::personal_reads(store, fx::PERSONAL);
            match contact.state(fx::PERSONAL) {
                Ok(Some(snapshot)) if allowed => assert_eq!(snapshot.state.email, fx::EMAIL),
                Err(HistoryError::Access(AccessError::Denied { operation, .. })) if !allowed => {
                    assert_eq!(operation, Operation::SeePersonalData)
                }
                other => panic!("personal state for {who:?}: {other:?}"),
            }
            let reads = fx::personal_reads(store, fx::PERSONAL);
            assert_eq!(reads.len(), before.len() + usize::from(allowed), "{reads:?}");
            if allowed {
                assert_eq!(reads.last(), Some(&("olga".to_string(), "app".to_string())));
            }
        }
        Operation::Purge => {
            match pay.purge_thread("t-old", actor.clone()) {
                Ok(report) if allowed => assert_eq!(report.threads, ["t-old"], "{report:?}"),
                Err(HistoryError::Access(e)) if !allowed => assert!(denied_access(&e), "{e}"),
                other => panic!("purge for {who:?}: {other:?}"),
            }
            assert_eq!(purged(store), allowed);
        }
        _ => panic!("operation {op} has no case in the matrix"),
    }
    Offered::Yes
}

/// The CLI surface: a redb file, the policy file, and an export of a thread to import.
struct Cli {
    store: PathBuf,
    access: PathBuf,
    import: PathBuf,
}

impl Cli {
    /// Runs `agentflow ARGS` as `who`; the exit code is checked against `who`: 0 when allowed,
    /// 1 with the access error when denied. Returns standard output.
    fn run(&self, who: Who, args: &[&str]) -> String {
        let mut all: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        all.extend(who.flags(&self.access));
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        let out = af(&self.store, &all);
        match who {
            Who::Allowed => assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out)),
            Who::Denied => {
                assert_eq!(out.status.code(), Some(1), "{args:?}: {} {}", stdout(&out), stderr(&out));
                is_denied(&format!("{args:?}"), &stderr(&out));
            }
        }
        stdout(&out)
    }

    fn read<T>(&self, f: impl FnOnce(&Arc<dyn Store>) -> T) -> T {
        with_redb(&self.store, f)
    }
}

/// A CLI cell.
fn cli(c: &Cli, op: Operation, who: Who) -> Offered {
    let allowed = who == Who::Allowed;
    let name = who.parts().0;
    match op {
        Operation::List => {
            let out = c.run(who, &["--json", "threads"]);
            if allowed {
                let ids: Vec<String> = serde_json::from_str::<serde_json::Value>(&out)
                    .unwrap()
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|t| t["id"].as_str().unwrap().to_string())
                    .collect();
                assert!(ids.contains(&"t-done".to_string()) && !ids.contains(&OTHER.to_string()), "{ids:?}");
            }
        }
        Operation::ReadState => {
            let out = c.run(who, &["--json", "show", "t-done"]);
            assert_eq!(out.contains("O-t-done"), allowed, "{out}");
        }
        Operation::ReadHistory => {
            let out = c.run(who, &["--json", "history", "t-done"]);
            assert_eq!(out.contains("seq"), allowed, "{out}");
        }
        Operation::Start => {
            c.run(who, &["import", c.import.to_str().unwrap()]);
            assert_eq!(c.read(|s| look::exists(s.as_ref(), "t-imp")), allowed);
        }
        Operation::UpdateState => {
            let before = c.read(|s| look::head(s.as_ref(), "t-done"));
            let set = json!({ "log": [format!("by {name}")] }).to_string();
            c.run(who, &["update", "t-done", "--set", &set]);
            let log = c.read(|s| look::log(s, "t-done"));
            assert_eq!(log.contains(&format!("by {name}")), allowed, "{log:?}");
            assert_eq!(c.read(|s| look::head(s.as_ref(), "t-done")) > before, allowed);
        }
        Operation::Fork => {
            let (before, first) = c.read(|s| (look::head(s.as_ref(), "t-done"), look::first(s.as_ref(), "t-done")));
            c.run(who, &["fork", "t-done", &first.to_string()]);
            assert_eq!(c.read(|s| look::head(s.as_ref(), "t-done")) > before, allowed);
        }
        Operation::Resume => {
            c.run(who, &["run", "resume", "t-res"]);
            assert_eq!(c.read(|s| look::queued(s.as_ref(), "t-res")), allowed);
        }
        Operation::Answer => {
            c.run(who, &["answer", "t-ask", "--value", "3"]);
            assert_eq!(c.read(|s| look::answered(s, "t-ask")), allowed);
        }
        Operation::Decide => {
            let (id, _) = c.read(|s| look::approval(s.as_ref(), "t-pay"));
            c.run(who, &["approve", &id]);
            let (_, status) = c.read(|s| look::approval(s.as_ref(), "t-pay"));
            assert_eq!(status == ApprovalStatus::Approved, allowed, "{status:?}");
        }
        Operation::Cancel => {
            c.run(who, &["run", "cancel", "t-q1"]);
            assert_eq!(c.read(|s| look::control(s.as_ref(), "t-q1")) == Some(RunControl::Cancel), allowed);
        }
        Operation::Pause => {
            c.run(who, &["run", "pause", "t-q2"]);
            assert_eq!(c.read(|s| look::control(s.as_ref(), "t-q2")) == Some(RunControl::Pause), allowed);
        }
        Operation::Compact => {
            let before = c.read(|s| look::checkpoints(s.as_ref(), "t-old"));
            c.run(who, &["compact", "t-old", "--keep", "1"]);
            assert_eq!(c.read(|s| look::checkpoints(s.as_ref(), "t-old")) < before, allowed);
        }
        // The denied cell is `vic`, who may read the state but not see personal data.
        Operation::SeePersonalData => {
            let access = c.access.display().to_string();
            let flags: Vec<&str> = if allowed {
                vec!["--as", "olga", "--role", fx::ROLE]
            } else {
                vec!["--as", fx::READER, "--role", fx::READER_ROLE]
            };
            let mut args = vec!["--json", "show", fx::PERSONAL, "--tenant", TENANT, "--access", &access];
            args.extend(flags);
            let before = c.read(|s| fx::personal_reads(s.as_ref(), fx::PERSONAL));
            let out = af(&c.store, &args);
            assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
            let shown: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
            let want = if allowed { fx::EMAIL } else { "•••" };
            assert_eq!(shown["state"]["email"], want, "{shown}");
            assert_eq!(shown["state"]["visits"], 1, "{shown}");
            assert_eq!(stdout(&out).contains(fx::EMAIL), allowed);
            let reads = c.read(|s| fx::personal_reads(s.as_ref(), fx::PERSONAL));
            assert_eq!(reads.len(), before.len() + usize::from(allowed), "{reads:?}");
            if allowed {
                assert_eq!(reads.last(), Some(&("olga".to_string(), "cli".to_string())));
            }
        }
        Operation::Purge => {
            c.run(who, &["purge", "t-old"]);
            assert_eq!(c.read(|store| purged(store.as_ref())), allowed);
        }
        _ => panic!("operation {op} has no case in the matrix"),
    }
    Offered::Yes
}

/// The inbox surface: the server on a redb file, and each actor logged in. A redb file is open
/// in one process at a time, and the server may hold it while it runs: reading the store stops
/// the server, and the next request starts it again, each actor logging in anew.
struct Inbox {
    store: PathBuf,
    /// How the server was started, to start it again.
    server: Stopped,
    /// The server and the sessions, while it runs.
    up: Option<Up>,
}

/// A running server and each actor's session on it.
struct Up {
    serve: Serve,
    olga: User,
    dan: User,
    /// May read state but not see personal data.
    vic: User,
}

impl Inbox {
    /// The server, started (and the actors logged in) if it is not running.
    async fn up(&mut self) -> &Up {
        if self.up.is_none() {
            let serve = self.server.start();
            let olga = login(&serve.base, "olga-token").await;
            let dan = login(&serve.base, "dan-token").await;
            let vic = login(&serve.base, "vic-token").await;
            self.up = Some(Up { serve, olga, dan, vic });
        }
        self.up.as_ref().expect("started")
    }

    /// GETs `path` as `name` (`olga`, `dan` or `vic`), whatever the answer.
    async fn get_as(&mut self, name: &str, path: &str) -> (reqwest::StatusCode, String) {
        let up = self.up().await;
        let user = match name {
            "olga" => &up.olga,
            "dan" => &up.dan,
            "vic" => &up.vic,
            other => panic!("no user `{other}` in the inbox's users file"),
        };
        http::get(&up.serve.base, Some(user), path).await
    }

    /// POSTs `fields` to `path` as `who`, whatever the answer.
    async fn post_as(&mut self, who: Who, path: &str, fields: &[(&str, &str)]) -> (reqwest::StatusCode, String) {
        let up = self.up().await;
        let user = if who == Who::Allowed { &up.olga } else { &up.dan };
        http::post(&up.serve.base, Some(user), path, fields).await
    }

    /// Expects 200 (a page) or 303 (an action done) when allowed, 403 with the access error
    /// when denied.
    fn expect(&self, who: Who, what: &str, (status, body): (reqwest::StatusCode, String), done: u16) {
        match who {
            Who::Allowed => assert_eq!(status.as_u16(), done, "{what}: {body}"),
            Who::Denied => {
                assert_eq!(status.as_u16(), 403, "{what}: {body}");
                is_denied(what, &body.replace("&#96;", "`").replace("&#x60;", "`"));
            }
        }
    }

    async fn get(&mut self, who: Who, path: &str) -> String {
        let r = self.get_as(who.parts().0, path).await;
        let body = r.1.clone();
        self.expect(who, path, r, 200);
        body
    }

    async fn post(&mut self, who: Who, path: &str, fields: &[(&str, &str)]) {
        let r = self.post_as(who, path, fields).await;
        self.expect(who, path, r, 303);
    }

    /// POSTs that a route would take for an operation the inbox does not offer: each is
    /// answered 404 (no such action) or 405 (no such method).
    async fn not_offered(&mut self, who: Who, paths: &[&str]) {
        for path in paths {
            let (status, body) = self.post_as(who, path, &[("seq", "1")]).await;
            assert!(matches!(status.as_u16(), 404 | 405), "POST {path} for {who:?}: {status} {body}");
        }
    }

    /// Reads the store, the server stopped.
    fn read<T>(&mut self, f: impl FnOnce(&Arc<dyn Store>) -> T) -> T {
        if let Some(up) = self.up.take() {
            up.serve.stop();
        }
        with_redb(&self.store, f)
    }
}

/// An inbox cell.
async fn inbox(i: &mut Inbox, op: Operation, who: Who) -> Offered {
    let allowed = who == Who::Allowed;
    match op {
        Operation::List => {
            for path in ["/threads", "/"] {
                let page = i.get(who, path).await;
                if allowed {
                    assert!(!page.contains(OTHER), "{path} shows another tenant's thread: {page}");
                }
            }
            if allowed {
                assert!(i.get(who, "/threads").await.contains("t-done"));
            }
        }
        Operation::ReadState => {
            let page = i.get(who, "/threads/t-done").await;
            assert_eq!(page.contains("O-t-done"), allowed);
        }
        Operation::ReadHistory => {
            let first = i.read(|s| look::first(s.as_ref(), "t-done"));
            i.get(who, &format!("/threads/t-done/at/{first}")).await;
            i.get(who, "/audit").await;
        }
        // Not offered by design: the inbox starts no thread.
        Operation::Start => {
            i.not_offered(who, &["/threads/t-new/start", "/threads", "/threads/t-new"]).await;
            assert!(!i.read(|s| look::exists(s.as_ref(), "t-new")));
            return Offered::No;
        }
        // Not offered by design: the inbox writes no state update.
        Operation::UpdateState => {
            let before = i.read(|s| look::head(s.as_ref(), "t-done"));
            i.not_offered(who, &["/threads/t-done/update", "/threads/t-done/state", "/threads/t-done"]).await;
            assert_eq!(i.read(|s| look::head(s.as_ref(), "t-done")), before);
            return Offered::No;
        }
        Operation::Fork => {
            let (before, first) = i.read(|s| (look::head(s.as_ref(), "t-done"), look::first(s.as_ref(), "t-done")));
            i.post(who, "/threads/t-done/fork", &[("seq", &first.to_string())]).await;
            assert_eq!(i.read(|s| look::head(s.as_ref(), "t-done")) > before, allowed);
        }
        Operation::Resume => {
            i.post(who, "/threads/t-res/resume", &[]).await;
            assert_eq!(i.read(|s| look::queued(s.as_ref(), "t-res")), allowed);
        }
        Operation::Answer => {
            let (seq, question) = i.read(|s| {
                let desk = agentflow::approval::ApprovalDesk::for_store(Arc::clone(s), fx::authorizer());
                let (seq, asks) = desk.waiting_questions("t-ask").expect("t-ask waits");
                (seq, asks[0].0.question_id())
            });
            let fields = [("checkpoint", seq.to_string()), ("question", question), ("value", "3".to_string())];
            let fields: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
            i.post(who, "/threads/t-ask/answer", &fields).await;
            assert_eq!(i.read(|s| look::answered(s, "t-ask")), allowed);
        }
        Operation::Decide => {
            let (id, _) = i.read(|s| look::approval(s.as_ref(), "t-pay"));
            i.post(who, &format!("/approvals/{id}/approve"), &[]).await;
            let (_, status) = i.read(|s| look::approval(s.as_ref(), "t-pay"));
            assert_eq!(status == ApprovalStatus::Approved, allowed, "{status:?}");
        }
        Operation::Cancel => {
            i.post(who, "/threads/t-q1/cancel", &[]).await;
            assert_eq!(i.read(|s| look::control(s.as_ref(), "t-q1")) == Some(RunControl::Cancel), allowed);
        }
        Operation::Pause => {
            i.post(who, "/threads/t-q2/pause", &[]).await;
            assert_eq!(i.read(|s| look::control(s.as_ref(), "t-q2")) == Some(RunControl::Pause), allowed);
        }
        // Not offered by design: retention is the CLI's and the app's.
        Operation::Compact => {
            let before = i.read(|s| look::checkpoints(s.as_ref(), "t-old"));
            i.not_offered(who, &["/threads/t-old/compact", "/threads/t-old/retention"]).await;
            assert_eq!(i.read(|s| look::checkpoints(s.as_ref(), "t-old")), before);
            return Offered::No;
        }
        // The denied cell is `vic`, who may read the state but not see personal data.
        Operation::SeePersonalData => {
            let user = if allowed { "olga" } else { fx::READER };
            let before = i.read(|s| fx::personal_reads(s.as_ref(), fx::PERSONAL));
            let (status, page) = i.get_as(user, &format!("/threads/{}", fx::PERSONAL)).await;
            assert_eq!(status.as_u16(), 200, "{page}");
            assert_eq!(page.contains(fx::EMAIL), allowed, "{page}");
            assert_eq!(page.contains("•••"), !allowed, "{page}");
            let reads = i.read(|s| fx::personal_reads(s.as_ref(), fx::PERSONAL));
            assert_eq!(reads.len(), before.len() + usize::from(allowed), "{reads:?}");
            if allowed {
                assert_eq!(reads.last(), Some(&("olga".to_string(), "inbox".to_string())));
            }
        }
        // Not offered by design: purge and legal holds are the CLI's and the app's.
        Operation::Purge => {
            i.not_offered(who, &["/threads/t-old/purge", "/threads/t-old/hold"]).await;
            assert!(!i.read(|store| purged(store.as_ref())));
            return Offered::No;
        }
        _ => panic!("operation {op} has no case in the matrix"),
    }
    Offered::Yes
}

/// The users file of the inbox: `olga`, `dan` and the reader `vic`, with the actors' roles and tenant.
pub fn users_file(dir: &Path) -> PathBuf {
    let user = |who: Who| {
        let (name, role) = who.parts();
        json!({ "name": name, "token": format!("{name}-token"), "roles": [role, "irreversible"], "tenants": [TENANT] })
    };
    let path = dir.join("users.json");
    let vic = json!({ "name": fx::READER, "token": "vic-token", "roles": [fx::READER_ROLE], "tenants": [TENANT] });
    let users = json!({ "users": [user(Who::Allowed), user(Who::Denied), vic] });
    std::fs::write(&path, users.to_string()).unwrap();
    path
}

/// Logs in with `token`; the CSRF token is read from the inbox page, whatever its status (a
/// user who may not list threads gets a refusal page, with the session's forms).
pub async fn login(base: &str, token: &str) -> User {
    use reqwest::header::{COOKIE, SET_COOKIE};
    let c = http::client();
    let form = c.get(format!("{base}/login")).send().await.unwrap();
    let login_cookie = http::set_cookie(&form, "agentflow_login").expect("login cookie");
    let page = form.text().await.unwrap();
    let csrf = crate::inbox_common::csrf_in(&page);
    let r = c
        .post(format!("{base}/login"))
        .header(COOKIE, &login_cookie)
        .form(&[("token", token), ("csrf", &csrf)])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 303, "login as {token}");
    let cookie = http::set_cookie(&r, "agentflow_session").expect("a session cookie");
    let inbox = c.get(format!("{base}/")).header(COOKIE, &cookie).send().await.unwrap();
    let csrf = crate::inbox_common::csrf_in(&inbox.text().await.unwrap());
    let _ = SET_COOKIE;
    User { cookie, csrf }
}

/// The three surfaces, each on a store of its own seeded alike.
async fn surfaces(dir: &Path) -> (Library, Cli, Inbox) {
    let store: Arc<dyn Store> = Arc::new(RedbStore::in_memory().expect("in-memory store"));
    fx::seed(Arc::clone(&store)).await;
    let lib = Library {
        pay: payments::graph().app().store(Arc::clone(&store)).access(fx::policy()),
        ask: asking::graph().app().store(Arc::clone(&store)).access(fx::policy()),
        contact: fx::contacts::graph().app().store(Arc::clone(&store)).access(fx::policy()),
        store,
    };
    let access = fx::policy_file(dir);
    // The thread `import` starts, exported from a store of its own.
    let source = dir.join("source.redb");
    {
        let store: Arc<dyn Store> = Arc::new(RedbStore::open(&source).unwrap());
        let input = Pay { order: "I-1".into(), ..Pay::default() };
        let app = payments::graph().app().store(store);
        app.runner(&()).thread("t-imp").tenant(TENANT).owner("agent").run(input).await.expect("t-imp");
    }
    let import = dir.join("t-imp.jsonl");
    let out = af(&source, &["export", "t-imp", "--output", import.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let cli_store = dir.join("cli.redb");
    fx::seeded_file(&cli_store).await;
    let inbox_store = dir.join("inbox.redb");
    fx::seeded_file(&inbox_store).await;
    let server = Stopped::new(inbox_store.to_str().unwrap(), &users_file(dir), &["--access", access.to_str().unwrap()]);
    let inbox = Inbox { store: inbox_store, server, up: None };
    (lib, Cli { store: cli_store, access, import }, inbox)
}

#[test]
fn every_operation_is_checked_on_every_surface_for_the_allowed_and_the_denied() {
    crate::inbox_common::runtime().block_on(async {
        let dir = temp_dir("access-matrix");
        let (lib, cli_surface, mut inbox_surface) = surfaces(&dir).await;
        let mut covered: BTreeMap<&str, BTreeSet<Operation>> = BTreeMap::new();
        let mut not_offered: BTreeMap<&str, BTreeSet<Operation>> = BTreeMap::new();
        for op in Operation::ALL {
            // Denied first: nothing it tries may change what the allowed cell then changes.
            for who in [Who::Denied, Who::Allowed] {
                let cells = [
                    ("library", library(&lib, op, who).await),
                    ("cli", cli(&cli_surface, op, who)),
                    ("inbox", inbox(&mut inbox_surface, op, who).await),
                ];
                for (surface, offered) in cells {
                    covered.entry(surface).or_default().insert(op);
                    if offered == Offered::No {
                        not_offered.entry(surface).or_default().insert(op);
                    }
                }
            }
        }
        for (surface, ops) in &covered {
            assert_eq!(ops.len(), Operation::ALL.len(), "{surface} covers {ops:?}");
        }
        let inbox_missing: Vec<Operation> = not_offered.get("inbox").into_iter().flatten().copied().collect();
        assert_eq!(inbox_missing, [Operation::Start, Operation::UpdateState, Operation::Compact, Operation::Purge]);
        assert!(!not_offered.contains_key("library") && !not_offered.contains_key("cli"), "{not_offered:?}");
    });
}
