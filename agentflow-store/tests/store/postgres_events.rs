//! The event log on `PostgresStore` beyond the conformance suite: retention with a small bound,
//! wakes told of another process's commits, and the listening connection coming back after the
//! server ended it. Against the server at `AGENTFLOW_PG_URL` (skipped when it is unset).

#![cfg(feature = "postgres")]

use crate::pg_common;

use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentflow_store::conformance::{self, thread};
use agentflow_store::{EventWake, NewEvent, PostgresStore, StepCommit, Store};
use pg_common::Schema;

/// A wake that sends each thread it is told of on the returned channel.
fn wake() -> (EventWake, Receiver<String>) {
    let (tx, rx) = channel();
    let tx = Mutex::new(tx);
    let wake: EventWake = Arc::new(move |t: &str| {
        let _ = tx.lock().unwrap().send(t.to_string());
    });
    (wake, rx)
}

fn commit_events(store: &PostgresStore, id: &str) {
    store.commit_step(StepCommit::new(thread(id)).with_events(vec![NewEvent::new("step", b"{}".to_vec())])).unwrap();
}

#[test]
fn a_log_keeps_the_bound_its_store_was_built_with() {
    let Some(url) = pg_common::url() else { return };
    let schema = Schema::new(&url, "evkeep");
    let store = PostgresStore::builder().schema(&schema.name).event_log_keep(3).open(&url).unwrap();
    conformance::event_log_keeps_the_newest_commits(&store, 3);
}

#[test]
fn a_wake_hears_the_commits_of_another_process_on_the_schema() {
    let Some(url) = pg_common::url() else { return };
    let schema = Schema::new(&url, "evwake");
    let (reader, writer) = (schema.open(), schema.open());
    let (wake, woken) = wake();
    assert!(reader.on_events(wake));
    commit_events(&writer, "from-the-writer");
    assert_eq!(woken.recv_timeout(Duration::from_secs(60)).unwrap(), "from-the-writer");
    // Another schema's commits are not heard.
    let other = Schema::new(&url, "evother");
    commit_events(&other.open(), "elsewhere");
    commit_events(&writer, "again");
    assert_eq!(woken.recv_timeout(Duration::from_secs(60)).unwrap(), "again");
}

#[test]
fn the_listening_connection_comes_back_after_the_server_ends_it() {
    let Some(url) = pg_common::url() else { return };
    let schema = Schema::new(&url, "evback");
    let store = schema.open();
    let (wake, woken) = wake();
    assert!(store.on_events(wake));
    let listening = format!("LISTEN \"agentflow_events_{}\"", schema.name);
    let ended = pg_common::sql(
        &url,
        &format!("SELECT pg_terminate_backend(pid)::text FROM pg_stat_activity WHERE query = '{listening}'"),
    );
    assert_eq!(ended, [Some("true".to_string())], "one connection listens");
    // Commits made while it is away are not heard; once it is back, they are.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        commit_events(&store, "after");
        match woken.recv_timeout(Duration::from_millis(200)) {
            Ok(thread) => {
                assert_eq!(thread, "after");
                break;
            }
            Err(_) => assert!(Instant::now() < deadline, "the listener did not come back"),
        }
    }
}
