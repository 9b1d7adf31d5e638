//! A thread of a tenant the user does not act for reads exactly like a missing one, on the
//! CLI (`--tenant`) and in the inbox (`tenants` in the users file): listing leaves it out,
//! reading it and deciding its approval say "not found", with the same message and status.

use serde_json::Value;

use crate::access_fixture::{self as fx, OTHER, TENANT, look};
use crate::access_matrix::{login, users_file};
use crate::cli_common::{af, af_json, stderr};
use crate::inbox_common::http;
use crate::inbox_common::{Serve, temp_dir, with_redb};

/// The message with the thread or approval id put back as `ID`.
fn said(text: &str, id: &str) -> String {
    text.replace(id, "ID")
}

#[test]
fn another_tenants_thread_reads_like_a_missing_one_on_the_cli() {
    let dir = temp_dir("tenants-cli");
    let store = dir.join("cli.redb");
    crate::inbox_common::runtime().block_on(fx::seeded_file(&store));
    let acme = ["--as", "olga", "--role", "irreversible", "--tenant", TENANT];
    let run = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend_from_slice(&acme);
        af(&store, &all)
    };
    // Listing: only acme's threads; without --tenant, every tenant's.
    let mut args = vec!["threads"];
    args.extend_from_slice(&acme);
    let listed = af_json(&store, &args);
    let ids: Vec<&str> = listed.as_array().unwrap().iter().filter_map(|t| t["id"].as_str()).collect();
    assert!(ids.contains(&"t-done") && !ids.contains(&OTHER), "{ids:?}");
    let all = af_json(&store, &["threads"]);
    assert!(all.as_array().unwrap().iter().any(|t| t["id"] == OTHER));
    let mut args = vec!["pending"];
    args.extend_from_slice(&acme);
    let pending = af_json(&store, &args);
    assert!(!pending.to_string().contains(OTHER), "{pending}");
    // Reading it: exit 1, the message of a thread that is not there.
    for command in ["show", "history", "graph", "export"] {
        let theirs = run(&[command, OTHER]);
        let missing = run(&[command, "t-nowhere"]);
        assert_eq!(theirs.status.code(), Some(1), "{command}: {}", stderr(&theirs));
        assert_eq!(missing.status.code(), Some(1));
        assert_eq!(said(&stderr(&theirs), OTHER), said(&stderr(&missing), "t-nowhere"), "{command}");
    }
    // Deciding its approval: not found, as an approval that does not exist; nothing decided.
    let (id, _) = with_redb(&store, |s| look::approval(s.as_ref(), OTHER));
    let theirs = run(&["approve", &id]);
    let missing = run(&["approve", "a-nowhere"]);
    assert_eq!(theirs.status.code(), Some(1), "{}", stderr(&theirs));
    assert_eq!(said(&stderr(&theirs), &id), said(&stderr(&missing), "a-nowhere"));
    let (_, status) = with_redb(&store, |s| look::approval(s.as_ref(), OTHER));
    assert!(status.is_waiting(), "{status:?}");
    // Forking or cancelling it: as for a thread that is not there.
    for args in [&["fork", OTHER, "1"][..], &["run", "cancel", OTHER]] {
        let theirs = run(args);
        let nowhere: Vec<&str> = args.iter().map(|a| if *a == OTHER { "t-nowhere" } else { a }).collect();
        let missing = run(&nowhere);
        assert_eq!(theirs.status.code(), Some(1), "{args:?}: {}", stderr(&theirs));
        assert_eq!(missing.status.code(), Some(1));
        assert_eq!(said(&stderr(&theirs), OTHER), said(&stderr(&missing), "t-nowhere"), "{args:?}");
    }
}

#[test]
fn another_tenants_thread_reads_like_a_missing_one_in_the_inbox() {
    crate::inbox_common::runtime().block_on(async {
        let dir = temp_dir("tenants-inbox");
        let store = dir.join("inbox.redb");
        fx::seeded_file(&store).await;
        let (id, _) = with_redb(&store, |s| look::approval(s.as_ref(), OTHER));
        // No --access: every operation allowed, the users' tenants still apply.
        let serve = Serve::start(store.to_str().unwrap(), &users_file(&dir), &[]);
        let olga = login(&serve.base, "olga-token").await;
        let base = serve.base.as_str();
        for path in ["/threads", "/", "/audit", "/stuck"] {
            let (status, page) = http::get(base, Some(&olga), path).await;
            assert_eq!(status.as_u16(), 200, "{path}: {page}");
            assert!(!page.contains(OTHER), "{path} shows another tenant's thread");
        }
        let (status, live) = http::get(base, Some(&olga), "/live").await;
        assert_eq!(status.as_u16(), 200);
        let live: Value = serde_json::from_str(&live).unwrap();
        // t-pay waits for its approval; t-other's is not counted.
        assert_eq!(live["approvals"], 1, "{live}");
        for (theirs, missing) in [
            (format!("/threads/{OTHER}"), "/threads/t-nowhere".to_string()),
            (format!("/threads/{OTHER}/at/1"), "/threads/t-nowhere/at/1".to_string()),
        ] {
            let (a, page_a) = http::get(base, Some(&olga), &theirs).await;
            let (b, page_b) = http::get(base, Some(&olga), &missing).await;
            assert_eq!((a.as_u16(), b.as_u16()), (404, 404), "{theirs}: {page_a}");
            assert_eq!(said(&page_a, OTHER), said(&page_b, "t-nowhere"));
        }
        let (a, page_a) = http::post(base, Some(&olga), &format!("/approvals/{id}/approve"), &[]).await;
        let (b, page_b) = http::post(base, Some(&olga), "/approvals/a-nowhere/approve", &[]).await;
        assert_eq!((a.as_u16(), b.as_u16()), (404, 404), "{page_a}");
        assert_eq!(said(&page_a, &id), said(&page_b, "a-nowhere"));
        for action in ["resume", "cancel", "pause"] {
            let (a, page_a) = http::post(base, Some(&olga), &format!("/threads/{OTHER}/{action}"), &[]).await;
            let (b, page_b) = http::post(base, Some(&olga), &format!("/threads/t-nowhere/{action}"), &[]).await;
            assert_eq!((a.as_u16(), b.as_u16()), (404, 404), "{action}: {page_a}");
            assert_eq!(said(&page_a, OTHER), said(&page_b, "t-nowhere"));
        }
        // The store, read once the server is stopped: nothing decided, nothing queued.
        serve.stop();
        let (_, status) = with_redb(&store, |s| look::approval(s.as_ref(), OTHER));
        assert!(status.is_waiting(), "{status:?}");
        assert!(!with_redb(&store, |s| look::queued(s.as_ref(), OTHER)));
    });
}
