//! The settle of a run on `PostgresStore` racing an `interrupt` follow-up: the follow-up put at
//! the front after the settle's statement read the thread's follow-ups, committed while the
//! settle waits for the run's row, is the one that takes the run's place (not the one the
//! statement read first). Against the server at `AGENTFLOW_PG_URL` (skipped when it is unset).

#![cfg(feature = "postgres")]

use crate::pg_common;

use std::time::{Duration, Instant};

use agentflow_store::{FollowUpPlace, NewAuditEntry, NewRun, RunControl, Settle, Store};
use pg_common::Schema;
use serde_json::json;

const NOW: u64 = 1_700_000_000_000;

fn submitted(at: u64) -> NewAuditEntry {
    NewAuditEntry::new(at, "ada", "run.submitted", json!({ "follow_up": true }))
}

/// Polls the server until a statement waits for a row lock (10 s at most).
async fn until_a_statement_waits(client: &tokio_postgres::Client) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let row = client
            .query_one("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'", &[])
            .await
            .unwrap();
        if row.get::<_, i64>(0) > 0 {
            return;
        }
        assert!(Instant::now() < deadline, "the settle never waited for the run's row");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[test]
fn a_settle_racing_an_interrupt_follow_up_hands_the_run_to_the_interrupt_not_the_follow_up_it_read() {
    let Some(url) = pg_common::url() else { return };
    let schema = Schema::new(&url, "settle_race");
    let store = schema.open();
    store.enqueue_run(NewRun::new("t", "g", None, "ada", NOW)).unwrap();
    assert_eq!(store.claim_runs("g", "w1", 60_000, NOW, 1).unwrap().len(), 1);
    let back = NewRun::new("t", "g", Some(b"back".to_vec()), "ada", NOW + 1).as_follow_up(None);
    store.enqueue_follow_up(back, submitted(NOW + 1), FollowUpPlace::Back).unwrap();
    // The worker stops the run as a cancel asked.
    assert!(store.control_run("t", RunControl::Cancel).unwrap());

    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let connect = || async {
            let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
            tokio::spawn(connection);
            client
        };
        let (interrupt, watch) = (connect().await, connect().await);
        // An interrupt follow-up, as the store queues one, its transaction left open.
        interrupt.batch_execute(&format!("SET search_path TO \"{}\"; BEGIN", schema.name)).await.unwrap();
        interrupt
            .batch_execute(
                "UPDATE run_queue SET follow_ups = follow_ups + 1, control = 'CANCEL' WHERE thread = 't'; \
                 INSERT INTO follow_ups (thread, pos, graph, input, owner, enqueued_at, tenant, fork_from, webhook) \
                 VALUES ('t', -4611686018427387904, 'g', 'front'::bytea, 'ada', 1700000000002, NULL, NULL, NULL)",
            )
            .await
            .unwrap();
        // The settle reads the follow-ups now, then waits for the run's row.
        let settle = std::thread::spawn(move || {
            let settle = Settle::remove().handled(Some(RunControl::Cancel));
            let settled = store.settle_run("t", "w1", &settle).unwrap();
            (store, settled)
        });
        until_a_statement_waits(&watch).await;
        interrupt.batch_execute("COMMIT").await.unwrap();
        let (store, settled) = tokio::task::spawn_blocking(move || settle.join().unwrap()).await.unwrap();
        assert!(settled);
        let run = store.list_runs().unwrap().into_iter().find(|r| r.thread == "t").expect("a follow-up took its place");
        assert_eq!(run.input.as_deref(), Some(&b"front"[..]), "the interrupt's follow-up runs first");
        let waiting: Vec<_> = store.list_follow_ups("t").unwrap().into_iter().map(|r| r.input).collect();
        assert_eq!(waiting, vec![Some(b"back".to_vec())]);
    });
}
