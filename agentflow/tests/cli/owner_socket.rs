//! One process owns a redb file: a `Server` holds its store file, names itself in the sidecar
//! and answers on the Unix socket beside the file; the `agentflow` tool, finding the file held,
//! runs `pending`, `show`, `approve` through that socket as the person the users file maps its
//! OS user to, and refuses every other command naming the server. A sidecar and socket left by
//! a killed server stop nobody.

use std::io::Read;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentflow::server::{RunningServer, Server};
use agentflow::{RedbStore, Store};
use agentflow_store::redb_owner::{self, Owner};
use agentflow_store::{ApprovalStatus, OpenError};
use serde_json::{Value, json};

use super::inbox_common::{app, cli, fill, os_user, temp_dir};

/// A users file with `alice` (who may decide irreversible calls), mapped to the OS user running
/// the tests when `mapped`.
fn users_file(dir: &Path, mapped: bool) -> PathBuf {
    let mut alice = json!({ "name": "alice", "token": "alice-token", "roles": ["irreversible"] });
    if mapped {
        alice["os_user"] = json!(os_user());
    }
    let path = dir.join("users.json");
    std::fs::write(&path, json!({ "users": [alice] }).to_string()).expect("users file");
    path
}

/// A runtime whose tasks (the server's) go on while the test waits for a command.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime")
}

/// A store filled with `t-paused` (a refund waiting for approval) and `t-done`, kept open.
fn filled(rt: &tokio::runtime::Runtime, path: &Path) -> Arc<dyn Store> {
    let store: Arc<dyn Store> = Arc::new(RedbStore::open(path).expect("open store"));
    rt.block_on(fill(Arc::clone(&store)));
    store
}

/// A server hosting the payments graph on `store`, with the users of `users`.
fn start(rt: &tokio::runtime::Runtime, store: &Arc<dyn Store>, users: &Path) -> RunningServer {
    let server = Server::new().users_file(users).expect("users file").app(app(Arc::clone(store)), ());
    rt.block_on(server.start()).expect("start the server")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn the_cli_reaches_the_server_that_holds_the_file() {
    let dir = temp_dir("owner-socket");
    let path = dir.join("runs.redb");
    let rt = runtime();
    let store = filled(&rt, &path);
    let approval = store.list_approvals("t-paused").unwrap().remove(0);
    let server = start(&rt, &store, &users_file(&dir, true));
    let spec = path.to_str().unwrap();

    // The socket is beside the file, reachable by its OS user alone; the sidecar names it.
    let file = std::fs::canonicalize(&path).unwrap();
    let socket = server.socket().expect("a redb store has an owner socket").to_path_buf();
    assert_eq!(socket, redb_owner::with_suffix(&file, ".sock"));
    let meta = std::fs::metadata(&socket).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    let owner = redb_owner::read(&path).expect("the sidecar names the server");
    assert_eq!(owner.pid, std::process::id());
    assert_eq!(owner.socket, socket);
    let names: Vec<String> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    assert!(names.iter().all(|n| !n.starts_with(".af-")), "no private directory is left beside the file: {names:?}");

    // An app that opens the held file is told which server holds it.
    match RedbStore::open(&path) {
        Err(e @ OpenError::AlreadyOpen { .. }) => {
            let message = e.to_string();
            assert!(message.contains("held by the agentflow server"), "{message}");
            assert!(message.contains(&format!("pid {}", std::process::id())), "{message}");
            assert!(message.contains("reach it through its socket"), "{message}");
        }
        other => panic!("expected AlreadyOpen, got {other:?}"),
    }

    // `pending` through the socket prints the table it prints locally.
    let out = cli(spec, &["pending"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    assert!(table.starts_with("KIND"), "{table}");
    assert!(
        table.contains(&approval.id) && table.contains("t-paused") && table.contains("refund (irreversible)"),
        "{table}"
    );
    assert!(text(&out.stderr).contains("answered through its socket as `alice`"), "{}", text(&out.stderr));
    let out = cli(spec, &["pending", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let listed: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(listed["approvals"][0]["id"], json!(approval.id));

    // `show` too.
    let out = cli(spec, &["show", "t-paused"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(shown.contains("thread:    t-paused"), "{shown}");
    assert!(shown.contains(&format!("approval:  {} PENDING `refund`", approval.id)), "{shown}");
    assert!(shown.contains("\"order\": \"A-1\""), "{shown}");
    assert!(shown.contains("the `timer`, `limits` and `used` lines are not shown through the server"), "{shown}");
    let out = cli(spec, &["show", "t-nowhere"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let missing = text(&out.stderr);
    assert!(missing.contains("no thread `t-nowhere`") && missing.contains("`agentflow pending`"), "{missing}");
    assert!(!missing.contains("/api/"), "said in the tool's terms: {missing}");

    // A command that needs the file itself is busy, naming the server and what works.
    let out = cli(spec, &["threads"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stdout));
    let busy = text(&out.stderr);
    assert!(
        busy.contains("held by the agentflow server") && busy.contains(&format!("pid {}", std::process::id())),
        "{busy}"
    );
    assert!(
        busy.contains("`agentflow pending`, `show`, `tail`, `approve`, `reject`, `edit` and `schedules`"),
        "{busy}"
    );

    // The server decides as the person the OS user is mapped to, not as anyone `--as` names.
    let out = cli(spec, &["approve", &approval.id, "--as", "mallory"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    assert!(text(&out.stderr).contains("acts as `alice`"), "{}", text(&out.stderr));
    assert_eq!(store.approval(&approval.id).unwrap().unwrap().status, ApprovalStatus::Pending);
    let out = cli(spec, &["approve", &approval.id]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(said.contains(&format!("approval {} is APPROVED (by alice)", approval.id)), "{said}");
    let decided = store.approval(&approval.id).unwrap().unwrap();
    assert_eq!(decided.status, ApprovalStatus::Approved);
    assert_eq!(decided.decided_by.as_deref(), Some("alice"));
    let audit = store.list_audit("t-paused").unwrap();
    assert!(
        audit.iter().any(|e| e.actor == "alice" && e.detail.get("approval") == Some(&json!(approval.id))),
        "the decision is audited in alice's name: {audit:?}"
    );
    // Decided: nothing waits for it any more.
    let out = cli(spec, &["reject", &approval.id, "--reason", "late"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));

    // Stopped, the server leaves neither socket nor sidecar, and the file opens again.
    rt.block_on(server.shutdown());
    assert!(!socket.exists(), "the socket is removed");
    assert!(!redb_owner::sidecar_path(&path).exists(), "the sidecar is removed");
    drop(store);
    let out = cli(spec, &["threads"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn an_os_user_no_person_has_is_refused_saying_how_to_map_it() {
    let dir = temp_dir("owner-socket-unmapped");
    let path = dir.join("runs.redb");
    let rt = runtime();
    let store = filled(&rt, &path);
    let approval = store.list_approvals("t-paused").unwrap().remove(0);
    let server = start(&rt, &store, &users_file(&dir, false));
    let spec = path.to_str().unwrap();
    for args in [vec!["pending"], vec!["show", "t-paused"], vec!["approve", approval.id.as_str()]] {
        let out = cli(spec, &args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", text(&out.stdout));
        let refused = text(&out.stderr);
        assert!(refused.contains(&format!("\"os_user\": \"{}\"", os_user())), "{args:?}: {refused}");
        assert!(refused.contains("users file"), "{refused}");
    }
    assert_eq!(store.approval(&approval.id).unwrap().unwrap().status, ApprovalStatus::Pending);
    rt.block_on(server.shutdown());
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_killed_owner_leaves_nothing_that_blocks_the_next_server() {
    let dir = temp_dir("owner-socket-stale");
    let path = dir.join("runs.redb");
    let rt = runtime();
    drop(filled(&rt, &path));
    // What a killed server leaves: its socket file, no longer listened on, and its sidecar,
    // naming a process that is gone.
    let socket = redb_owner::with_suffix(&std::fs::canonicalize(&path).unwrap(), ".sock");
    drop(std::os::unix::net::UnixListener::bind(&socket).expect("bind"));
    assert!(socket.exists());
    let mut gone = std::process::Command::new("true").spawn().expect("run `true`");
    let dead = gone.id();
    gone.wait().unwrap();
    let mut stale = Owner::new("killed-server", &socket, 1);
    stale.pid = dead;
    redb_owner::write(&path, &stale).unwrap();
    assert_eq!(redb_owner::read(&path), None, "a dead process's sidecar is stale");

    // Nobody holds the file: the tool opens it itself.
    let spec = path.to_str().unwrap();
    let out = cli(spec, &["pending"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!text(&out.stderr).contains("socket"), "{}", text(&out.stderr));

    // The next server replaces both, and answers on the socket.
    let store: Arc<dyn Store> = Arc::new(RedbStore::open(&path).unwrap());
    let server = start(&rt, &store, &users_file(&dir, true));
    assert_eq!(server.socket(), Some(socket.as_path()));
    assert_eq!(redb_owner::read(&path).map(|o| o.pid), Some(std::process::id()));
    let out = cli(spec, &["pending"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("answered through its socket"), "{}", text(&out.stderr));
    rt.block_on(server.shutdown());
    assert!(!socket.exists());
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_path_too_long_for_a_socket_gets_a_private_directory() {
    let dir = temp_dir("owner-socket-long");
    let deep = dir.join("d".repeat(60)).join("e".repeat(60));
    std::fs::create_dir_all(&deep).unwrap();
    let path = deep.join("runs.redb");
    let rt = runtime();
    let store = filled(&rt, &path);
    let server = start(&rt, &store, &users_file(&dir, true));
    let socket = server.socket().expect("an owner socket").to_path_buf();
    assert_ne!(socket.parent(), Some(deep.as_path()));
    let private = socket.parent().unwrap().to_path_buf();
    assert_eq!(std::fs::metadata(&private).unwrap().permissions().mode() & 0o777, 0o700);
    assert_eq!(redb_owner::read(&path).map(|o| o.socket), Some(socket.clone()));
    let out = cli(path.to_str().unwrap(), &["pending"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("t-paused"), "{}", text(&out.stdout));
    rt.block_on(server.shutdown());
    assert!(!socket.exists() && !private.exists(), "the private directory is removed with the socket");
    std::fs::remove_dir_all(dir).unwrap();
}

/// Everything the listener's first waiting connection sent, if one is waiting (`None`: nobody
/// connected).
fn received(listener: &UnixListener) -> Option<Vec<u8>> {
    let (mut conn, _) = match listener.accept() {
        Ok(accepted) => accepted,
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return None,
        Err(e) => panic!("accept: {e}"),
    };
    conn.set_nonblocking(false).unwrap();
    conn.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
    let mut bytes = Vec::new();
    conn.read_to_end(&mut bytes).expect("the client closed its connection");
    Some(bytes)
}

#[test]
fn a_sidecar_pointing_at_a_socket_of_another_process_is_refused_and_nothing_is_sent() {
    let dir = temp_dir("owner-socket-decoy");
    let path = dir.join("runs.redb");
    let rt = runtime();
    let store = filled(&rt, &path);
    let approval = store.list_approvals("t-paused").unwrap().remove(0);
    let spec = path.to_str().unwrap();
    // A socket this test answers on, and a sidecar naming it as another live process's.
    let decoy = dir.join("decoy.sock");
    let listener = UnixListener::bind(&decoy).expect("bind");
    listener.set_nonblocking(true).unwrap();
    let mut other = std::process::Command::new("sleep").arg("60").spawn().expect("run `sleep`");
    let mut sidecar = Owner::new("billing-server", &decoy, 1);
    sidecar.pid = other.id();
    redb_owner::write(&path, &sidecar).unwrap();

    for args in [vec!["pending"], vec!["show", "t-paused"], vec!["approve", approval.id.as_str()]] {
        let out = cli(spec, &args);
        assert_eq!(out.status.code(), Some(3), "{args:?}: {}", text(&out.stdout));
        assert!(out.stdout.is_empty(), "{args:?} printed nothing of the decoy's: {}", text(&out.stdout));
        let refused = text(&out.stderr);
        assert!(
            refused.contains(&format!("is pid {}, not pid {}", std::process::id(), other.id())),
            "{args:?}: {refused}"
        );
        assert!(refused.contains("nothing was sent"), "{refused}");
        assert_eq!(received(&listener), Some(Vec::new()), "{args:?}: the CLI connected and sent nothing");
    }
    assert_eq!(store.approval(&approval.id).unwrap().unwrap().status, ApprovalStatus::Pending);

    // What the sidecar names as a socket must be one: a regular file is refused before connecting.
    let not_a_socket = dir.join("plain");
    std::fs::write(&not_a_socket, b"").unwrap();
    let mut plain = sidecar.clone();
    plain.socket = not_a_socket;
    redb_owner::write(&path, &plain).unwrap();
    let out = cli(spec, &["pending"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stdout));
    assert!(text(&out.stderr).contains("is not a socket"), "{}", text(&out.stderr));

    // Only root can make files of another account: then a socket, or a sidecar, of another uid
    // than the store file's is refused before anything is sent.
    // SAFETY: `geteuid` has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        redb_owner::write(&path, &sidecar).unwrap();
        std::os::unix::fs::chown(&decoy, Some(4242), None).unwrap();
        let out = cli(spec, &["pending"]);
        assert_eq!(out.status.code(), Some(3), "{}", text(&out.stdout));
        assert!(text(&out.stderr).contains("belongs to uid 4242, not to uid 0"), "{}", text(&out.stderr));
        assert_eq!(received(&listener), None, "refused before connecting");
        std::os::unix::fs::chown(&decoy, Some(0), None).unwrap();
        std::os::unix::fs::chown(redb_owner::sidecar_path(&path), Some(4242), None).unwrap();
        let out = cli(spec, &["pending"]);
        assert_eq!(out.status.code(), Some(3), "{}", text(&out.stdout));
        let refused = text(&out.stderr);
        assert!(refused.contains("belongs to uid 4242, not to uid 0") && refused.contains("not believed"), "{refused}");
        assert_eq!(received(&listener), None, "refused before connecting");
        match RedbStore::open(&path) {
            Err(OpenError::AlreadyOpen { held_by, .. }) => assert_eq!(held_by, None, "the sidecar names no holder"),
            other => panic!("expected AlreadyOpen, got {other:?}"),
        }
    }
    other.kill().ok();
    other.wait().ok();
    drop(store);
    std::fs::remove_dir_all(dir).unwrap();
}
