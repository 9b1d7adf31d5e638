//! `agentflow tail THREAD`: a thread's event log, one line an entry or its AG-UI events as JSON
//! lines, after an id (one past the log's end refused), read from the store file; through the
//! socket of a server holding the file, the same lines; `--follow` waits there until the run a
//! person let go on ends, also when it starts in the middle of the run before.

use std::path::Path;
use std::process::{Output, Stdio};
use std::sync::Arc;

use agentflow::approval::RoleAuthorizer;
use agentflow::prelude::*;
use agentflow::server::Server;
use agentflow::{RedbStore, Store};
use serde_json::{Value, json};

use super::inbox_common::{Pay, app, cli, os_user, temp_dir};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn lines(out: &Output) -> Vec<String> {
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout).lines().map(str::to_string).collect()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime")
}

/// A store with `t-paused` (a refund of 40 waiting for approval) and `t-done` (completed), each
/// run keeping its event log.
fn filled(rt: &tokio::runtime::Runtime, path: &Path) -> Arc<dyn Store> {
    let store: Arc<dyn Store> = Arc::new(RedbStore::open(path).expect("open store"));
    let app = app(Arc::clone(&store)).event_log(true);
    rt.block_on(async {
        let run = |thread: &'static str, amount| {
            let app = app.clone();
            async move {
                let input = Pay { order: "A-1".into(), amount, ..Pay::default() };
                app.runner(&()).thread(thread).owner("agent").run(input).await.expect("a run")
            }
        };
        assert!(matches!(run("t-paused", 40).await.outcome, Outcome::Interrupted { .. }));
        assert_eq!(run("t-done", 0).await.outcome, Outcome::Completed);
    });
    store
}

#[test]
fn tail_prints_a_threads_log_from_the_file_and_through_the_server_that_holds_it() {
    let dir = temp_dir("cli-tail");
    let path = dir.join("runs.redb");
    let spec = path.to_str().unwrap();
    let rt = runtime();
    drop(filled(&rt, &path));

    // One line an entry: its id, its kind and what it says.
    let local = lines(&cli(spec, &["tail", "t-paused"]));
    assert!(local.len() >= 3, "{local:?}");
    let id = |line: &str| line.split(' ').next().unwrap().to_string();
    assert!(local[0].contains(" run.started run "), "{local:?}");
    assert!(local.iter().any(|l| l.contains(" interrupt waits for 0 answer(s), 1 approval(s) (refund)")), "{local:?}");
    assert!(local.last().unwrap().contains(" run.finished interrupted"), "{local:?}");
    let ids: Vec<String> = local.iter().map(|l| id(l)).collect();
    assert!(ids.iter().all(|i| i.split('-').count() == 2), "{ids:?}");
    // As JSON: the AG-UI events, a run's start first and its end last.
    let json: Vec<Value> = lines(&cli(spec, &["tail", "t-paused", "--json"]))
        .iter()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!((json[0]["type"].as_str(), json[0]["threadId"].as_str()), (Some("RUN_STARTED"), Some("t-paused")));
    assert_eq!(json.last().unwrap()["type"], "RUN_FINISHED");
    // After an entry: the ones after it. A completed thread followed: it has ended.
    let after = lines(&cli(spec, &["tail", "t-paused", "--after", &ids[0]]));
    assert_eq!(after, local[1..].to_vec());
    let done = lines(&cli(spec, &["tail", "t-done", "--follow"]));
    assert!(done.last().unwrap().contains(" run.finished completed"), "{done:?}");
    let bad = cli(spec, &["tail", "t-paused", "--after", "yesterday"]);
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad.stderr));
    assert_eq!(cli(spec, &["tail", "t-nowhere"]).status.code(), Some(1));
    // An id past the log's end is no id of the thread's: refused, rather than waited for.
    let past = cli(spec, &["tail", "t-paused", "--follow", "--after", "99-0"]);
    assert_eq!(past.status.code(), Some(2), "{}", text(&past.stderr));
    assert!(text(&past.stderr).contains("`99-0` is past the newest event"), "{}", text(&past.stderr));
    // Without `--follow`, what there is after the position, and the end.
    let last = ids.last().unwrap().clone();
    assert!(lines(&cli(spec, &["tail", "t-paused", "--after", &last])).is_empty(), "nothing after the end");

    // A server holds the file: the same, through its socket.
    let store: Arc<dyn Store> = Arc::new(RedbStore::open(&path).expect("open store"));
    let users = dir.join("users.json");
    let alice = json!({ "name": "alice", "token": "alice-token", "roles": ["irreversible"], "os_user": os_user() });
    std::fs::write(&users, json!({ "users": [alice] }).to_string()).unwrap();
    let server = Server::new()
        .users_file(&users)
        .unwrap()
        .authorizer(RoleAuthorizer::new().role_for(Risk::Irreversible, "irreversible"))
        .app(app(Arc::clone(&store)), ());
    let server = rt.block_on(server.start()).expect("the server starts");
    let through = cli(spec, &["tail", "t-paused"]);
    assert_eq!(lines(&through), local);
    assert!(text(&through.stderr).contains("answered through its socket as `alice`"), "{}", text(&through.stderr));
    let through_json: Vec<Value> = lines(&cli(spec, &["tail", "t-paused", "--json"]))
        .iter()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(through_json, json);
    assert_eq!(lines(&cli(spec, &["tail", "t-paused", "--after", &ids[0]])), local[1..].to_vec());
    assert_eq!(lines(&cli(spec, &["tail", "t-done", "--follow"])), done);
    assert_eq!(cli(spec, &["tail", "t-nowhere"]).status.code(), Some(1));
    let past = cli(spec, &["tail", "t-paused", "--after", "99-0"]);
    assert_eq!(past.status.code(), Some(2), "{}", text(&past.stderr));
    assert!(text(&past.stderr).contains("`99-0` is past the newest event"), "{}", text(&past.stderr));
    assert!(lines(&cli(spec, &["tail", "t-paused", "--after", &last])).is_empty(), "nothing after the end");

    // Followed from its last entry, the thread's next run is printed as it goes, up to its end;
    // followed from the middle of the parked run, the end of that run does not end the follow:
    // the run that goes on after it does.
    let follow = |after: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_agentflow"))
            .args(["--store", spec, "tail", "t-paused", "--follow", "--after", after])
            .env_remove("AGENTFLOW_STORE")
            .env_remove("AGENTFLOW_AS")
            .env_remove("AGENTFLOW_ACCESS")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run agentflow tail --follow")
    };
    let (from_end, from_middle) = (follow(&last), follow(&ids[0]));
    let approval = store.list_approvals("t-paused").unwrap().remove(0);
    assert!(cli(spec, &["approve", &approval.id]).status.success());
    let resumed = rt.block_on(app(Arc::clone(&store)).event_log(true).runner(&()).thread("t-paused").resume());
    assert_eq!(resumed.expect("the resumed run").outcome, Outcome::Completed);
    let followed = lines(&from_end.wait_with_output().expect("tail ends with the run"));
    assert!(followed[0].contains(" run.started run "), "{followed:?}");
    assert!(followed.iter().any(|l| l.contains(" step nodes pay; set log, receipt")), "{followed:?}");
    assert!(followed.last().unwrap().contains(" run.finished completed"), "{followed:?}");
    assert!(followed.iter().all(|l| !local.contains(l)), "only what came after: {followed:?}");
    let middle = lines(&from_middle.wait_with_output().expect("tail ends with the next run"));
    assert_eq!(middle[..local.len() - 1], local[1..], "the rest of the parked run first");
    assert_eq!(middle[local.len() - 1..], followed[..], "then the run that went on");

    rt.block_on(server.shutdown());
    drop(store);
    std::fs::remove_dir_all(dir).unwrap();
}
