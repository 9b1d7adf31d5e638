//! Completion webhooks, on a redb file: a run's settle writes its delivery, the dispatcher sends
//! it to a receiver on 127.0.0.1, signed, tries it again after the receiver failed first, and
//! gives up (audited) a delivery whose receiver keeps failing or whose URL is not allowed.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;

use crate::support::stores::open_redb;
use crate::support::temp::temp_dir;
use crate::support::worker_graph::{Job, job, wait_until};
use agentflow::prelude::*;
use agentflow::webhook::{WebhookConfig, WebhookDispatcher, verify};
use agentflow::{CancellationToken, Store, Submission, Worker};
use agentflow_store::{DeliveryStatus, NewAuditEntry, NewRun, WebhookDelivery};
use serde_json::Value;

const LIMIT: Duration = Duration::from_secs(60);
const SECRET: &[u8] = b"a long random webhook secret";

/// What the receiver saw: each request's headers and body.
type Seen = Arc<Mutex<Vec<(HeaderMap, Bytes)>>>;

/// A receiver on 127.0.0.1 that answers 500 to the first `failures` requests, then 204. Answers
/// its base URL and what it saw.
async fn receiver(failures: usize) -> (String, Seen) {
    let seen: Seen = Arc::default();
    async fn hook(State((seen, failures)): State<(Seen, usize)>, headers: HeaderMap, body: Bytes) -> StatusCode {
        let mut seen = seen.lock().unwrap();
        seen.push((headers, body));
        if seen.len() <= failures { StatusCode::INTERNAL_SERVER_ERROR } else { StatusCode::NO_CONTENT }
    }
    let app = Router::new().route("/hooks/done", post(hook)).with_state((Arc::clone(&seen), failures));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (base, seen)
}

/// The jobs' app on a new redb file.
fn app(tag: &str) -> App<Job, ()> {
    let store = open_redb(temp_dir(tag).join("webhooks.redb")).expect("open the redb file");
    job::graph().app().store(Arc::new(store) as Arc<dyn Store>)
}

/// Queues a two-step job on `thread` telling `url` when it stops, and runs it to its end.
async fn run_with_webhook(app: &App<Job, ()>, thread: &str, url: &str) {
    let store = app.backing_store().unwrap();
    let input = serde_json::to_vec(&Job::new(2, false, 0)).unwrap();
    let run = NewRun::new(thread, job::graph().name(), Some(input), "agent:jobs", 1).with_webhook(url);
    store.enqueue_run_audited(run, NewAuditEntry::new(1, "test", "run.submitted", Value::Null)).unwrap();
    let stop = CancellationToken::new();
    let worker =
        tokio::spawn(Worker::new(app.clone(), Arc::new(())).poll_interval(Duration::from_millis(10)).run(stop.clone()));
    wait_until("the run settles", LIMIT, || app.live_runs().unwrap().is_empty()).await;
    stop.cancel();
    assert_eq!(worker.await.unwrap().unwrap().completed, 1);
}

fn deliveries(app: &App<Job, ()>, thread: &str) -> Vec<WebhookDelivery> {
    app.backing_store().unwrap().list_webhooks(thread).unwrap()
}

/// Runs a dispatcher of `app`'s store under `config` until `done` holds.
async fn dispatch_until(app: &App<Job, ()>, config: WebhookConfig, what: &str, done: impl FnMut() -> bool) {
    let store = Arc::clone(app.backing_store().unwrap());
    let dispatcher = WebhookDispatcher::new(store, config).unwrap().poll_interval(Duration::from_millis(20));
    let stop = CancellationToken::new();
    let running = tokio::spawn(dispatcher.run(stop.clone()));
    wait_until(what, LIMIT, done).await;
    stop.cancel();
    running.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_is_tried_again_after_its_receiver_failed_and_its_signature_verifies() {
    let (base, seen) = receiver(1).await;
    let app = app("webhook-retry");
    let url = format!("{base}/hooks/done");
    run_with_webhook(&app, "hooked", &url).await;
    let written = deliveries(&app, "hooked");
    assert_eq!(written.len(), 1, "one delivery, written by the settle that ended the run: {written:?}");
    assert_eq!(
        (written[0].url.as_str(), written[0].status, written[0].attempts),
        (url.as_str(), DeliveryStatus::Pending, 0)
    );

    let config = WebhookConfig::new(SECRET)
        .allow(format!("{base}/hooks/"))
        .backoff(Duration::from_millis(20), Duration::from_millis(100));
    dispatch_until(&app, config, "the delivery is delivered", || {
        deliveries(&app, "hooked")[0].status == DeliveryStatus::Delivered
    })
    .await;
    let delivered = &deliveries(&app, "hooked")[0];
    assert_eq!(delivered.attempts, 2, "{delivered:?}");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "the failed attempt, then the one delivered");
    for (headers, body) in &seen {
        let header = |name: &str| headers.get(name).unwrap().to_str().unwrap().to_string();
        assert_eq!(header("content-type"), "application/json");
        assert_eq!(header("x-agentflow-delivery"), delivered.id.to_string());
        let (timestamp, signature) = (header("x-agentflow-timestamp"), header("x-agentflow-signature"));
        assert!(verify(SECRET, &timestamp, body, &signature), "{signature} verifies");
        assert!(!verify(b"another secret", &timestamp, body, &signature));
        let sent: Value = serde_json::from_slice(body).unwrap();
        assert_eq!((sent["thread_id"].as_str(), sent["status"].as_str()), (Some("hooked"), Some("completed")));
        assert_eq!(sent["graph"], job::graph().name());
        assert_eq!(sent["values"]["counter"], 2);
        assert!(sent["finished_at"].as_u64().is_some());
    }
    assert_eq!(seen[0].1, seen[1].1, "the same body both times");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_is_given_up_after_its_last_attempt_or_at_once_outside_the_allow_list() {
    let (base, seen) = receiver(usize::MAX).await;
    let app = app("webhook-give-up");
    // Each URL carries a token: the audit entries name them masked.
    run_with_webhook(&app, "failing", &format!("{base}/hooks/done?token=s3cret-1")).await;
    // A URL the operator does not allow (any more): never sent, given up at its first attempt.
    run_with_webhook(&app, "elsewhere", "http://127.0.0.1:9/not-allowed?token=s3cret-2").await;
    let config = WebhookConfig::new(SECRET)
        .allow(format!("{base}/hooks/"))
        .attempts(3)
        .backoff(Duration::from_millis(10), Duration::from_millis(40));
    assert!(config.check("http://127.0.0.1:9/not-allowed").is_err());
    dispatch_until(&app, config, "both are given up", || {
        [deliveries(&app, "failing"), deliveries(&app, "elsewhere")]
            .iter()
            .all(|d| d[0].status == DeliveryStatus::Failed)
    })
    .await;
    assert_eq!(seen.lock().unwrap().len(), 3, "three attempts, all at the allowed receiver");
    assert_eq!(deliveries(&app, "failing")[0].attempts, 3);
    assert_eq!(deliveries(&app, "elsewhere")[0].attempts, 1);
    for (thread, error) in [("failing", "500"), ("elsewhere", "not allowed")] {
        let audit = app.audit_log(thread).unwrap();
        let failed: Vec<_> = audit.iter().filter(|e| e.kind == "webhook.failed").collect();
        assert_eq!(failed.len(), 1, "{thread}: {audit:?}");
        let said = failed[0].detail["error"].as_str().unwrap();
        assert!(said.contains(error), "{thread}: {said}");
        let url = failed[0].detail["url"].as_str().unwrap();
        assert!(url.ends_with("?token=***"), "{thread}: {url}");
        assert!(!failed[0].detail.to_string().contains("s3cret"), "{thread}: {}", failed[0].detail);
    }
}

#[test]
fn a_submitted_runs_audit_entry_names_its_webhook_masked() {
    let app = app("webhook-masked");
    let url = "https://ops:pa55@hooks.example.com/done?token=s3cret&v=2";
    let submission = Submission::new().owner("agent:jobs").webhook(url);
    app.submit_with("masked", &Job::new(1, false, 0), submission).unwrap();
    let store = app.backing_store().unwrap();
    let audit = store.list_audit("masked").unwrap();
    let submitted = audit.iter().find(|e| e.kind == "run.submitted").expect("the submit is audited");
    assert_eq!(submitted.detail["webhook"], "https://***@hooks.example.com/done?token=***&v=***");
    assert!(!submitted.detail.to_string().contains("s3cret"), "{}", submitted.detail);
    // The run itself keeps the URL as given: the delivery goes there.
    assert_eq!(store.list_runs().unwrap()[0].webhook.as_deref(), Some(url));
}
