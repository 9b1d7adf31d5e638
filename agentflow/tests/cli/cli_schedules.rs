//! `agentflow schedules`: the store's cron schedules listed (those of the `--tenant`s given
//! only) and removed (`schedules delete ID`, exit 1 for one not there or of another tenant), on
//! the file itself and through the socket of a server that holds it.

use std::sync::Arc;

use agentflow::Store;
use agentflow::schedule::ScheduleRecord;
use serde_json::Value;

use crate::cli_common::{af, stderr, stdout};
use crate::inbox_common::{temp_dir, with_redb};

#[test]
fn schedules_are_listed_for_the_actors_tenants_and_removed_by_id() {
    let dir = temp_dir("cli-schedules");
    let path = dir.join("store.redb");
    with_redb(&path, |s: &Arc<dyn Store>| {
        let mut acme = ScheduleRecord::new("acme-nightly", "payments", "30 2 * * *", b"{}".to_vec(), "ann", 9_000, 1);
        acme.tenant = Some("acme".to_string());
        s.put_schedule(acme).unwrap();
        s.put_schedule(ScheduleRecord::new("hourly", "payments", "0 * * * *", b"{}".to_vec(), "ops", 7_000, 1))
            .unwrap();
    });
    let json = |args: &[&str]| -> Value {
        let out = af(&path, args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
        serde_json::from_str(&stdout(&out)).unwrap()
    };
    let all = json(&["--json", "schedules"]);
    let ids: Vec<&str> = all.as_array().unwrap().iter().map(|s| s["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["acme-nightly", "hourly"]);
    assert_eq!(all[0]["cron"], "30 2 * * *");
    assert_eq!(all[0]["next_at"], 9_000);
    assert!(all[0].get("input").is_none(), "the input reads with the graph's types: not shown");
    let acme = json(&["--json", "--tenant", "acme", "schedules"]);
    assert_eq!(acme.as_array().map(Vec::len), Some(1), "{acme}");
    let table = stdout(&af(&path, &["schedules"]));
    assert!(table.starts_with("ID") && table.contains("hourly") && table.contains("0 * * * *"), "{table}");

    // Another tenant's is not there for an actor of acme; its own is removed once.
    let out = af(&path, &["--tenant", "acme", "schedules", "delete", "hourly"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("no schedule `hourly`"), "{}", stderr(&out));
    let removed = json(&["--json", "--tenant", "acme", "schedules", "delete", "acme-nightly"]);
    assert_eq!(removed["unscheduled"], true);
    assert_eq!(af(&path, &["schedules", "delete", "acme-nightly"]).status.code(), Some(1));
    let left = json(&["--json", "schedules"]);
    assert_eq!(left.as_array().map(Vec::len), Some(1), "{left}");
    std::fs::remove_dir_all(&dir).ok();
}

/// The redb file held by a server: `schedules` and `schedules delete` go through its socket, as
/// the person its users file maps this OS user to.
#[test]
fn schedules_of_a_file_a_server_holds_go_through_its_socket() {
    use agentflow::RedbStore;
    use agentflow::server::Server;

    use crate::inbox_common::{app, cli, os_user};

    let dir = temp_dir("cli-schedules-held");
    let path = dir.join("runs.redb");
    let users = dir.join("users.json");
    let alice = serde_json::json!({ "name": "alice", "token": "alice-token", "roles": [], "os_user": os_user() });
    std::fs::write(&users, serde_json::json!({ "users": [alice] }).to_string()).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let store: Arc<dyn Store> = Arc::new(RedbStore::open(&path).unwrap());
    // Yearly, from the first of January: it does not fire while the test runs.
    let yearly = ScheduleRecord::new("yearly", "payments", "0 0 1 1 *", b"{}".to_vec(), "ops", u64::MAX / 2, 1);
    store.put_schedule(yearly).unwrap();
    let server = Server::new().users_file(&users).unwrap().app(app(Arc::clone(&store)), ());
    let server = rt.block_on(server.start()).unwrap();
    let spec = path.to_str().unwrap();

    let out = cli(spec, &["--json", "schedules"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let listed: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(listed[0]["id"], "yearly", "{listed}");
    assert_eq!(listed[0]["input"], serde_json::json!({}), "the server shows the input, masked");
    assert!(stderr(&out).contains("as `alice`"), "{}", stderr(&out));
    let out = cli(spec, &["schedules", "delete", "yearly"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("removed schedule `yearly`"), "{}", stdout(&out));
    let out = cli(spec, &["schedules", "delete", "yearly"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(store.scan_schedules().unwrap().items.is_empty());
    rt.block_on(server.shutdown());
    std::fs::remove_dir_all(&dir).ok();
}
