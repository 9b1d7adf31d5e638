//! What `approve` and `show` tell a person about what happens next: who goes on with a thread
//! after a decision (a worker, for a thread in the run queue, else the app's resume), and what a
//! thread's timer is for (a sleep, or an approval's expiry).

use super::*;

/// Runs a worker until `done` holds of the app (at most a minute), then stops it.
fn work_until(app: &App<Pay>, done: impl Fn(&App<Pay>) -> bool) {
    runtime().block_on(async {
        let stop = CancellationToken::new();
        let worker = Worker::new(app.clone(), Arc::new(())).poll_interval(std::time::Duration::from_millis(10));
        let worker = tokio::spawn(worker.run(stop.clone()));
        let start = std::time::Instant::now();
        while !done(app) {
            assert!(start.elapsed() < std::time::Duration::from_secs(60), "the worker did not get there in time");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        stop.cancel();
        worker.await.unwrap().expect("the worker stops");
    });
}

#[test]
fn approve_says_whether_a_worker_goes_on_with_the_thread_or_the_app_must_resume_it() {
    let dir = temp_dir("approve-next");
    let path = dir.join("runs.redb");
    fill(&path);
    {
        // `t-queued` is submitted to the workers; one runs it until it waits for the approval.
        let store: Arc<dyn Store> = Arc::new(RedbStore::open(&path).unwrap());
        let app = app(store);
        app.submit_as("t-queued", &Pay { order: "A-7".into(), amount: 30, ..Pay::default() }, "agent").unwrap();
        work_until(&app, |app| {
            app.live_runs().unwrap().iter().any(|r| r.thread == "t-queued" && r.wait == RunWait::Approval)
        });
    }
    let approvals = af_json(&path, &["pending"])["approvals"].clone();
    let id_of = |thread: &str| {
        let found = approvals.as_array().unwrap().iter().find(|a| a["thread"] == thread);
        found.unwrap_or_else(|| panic!("no approval of `{thread}` in {approvals}"))["id"].as_str().unwrap().to_string()
    };
    let approve = |id: &str| {
        let out = af(&path, &["approve", id, "--as", "alice", "--role", "irreversible"]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        stdout(&out)
    };

    // The app ran `t-paused` itself: nothing resumes it but the app.
    let said = approve(&id_of("t-paused"));
    assert!(said.contains("resume thread t-paused to go on"), "{said}");
    assert!(said.contains("not in the run queue"), "{said}");

    // A worker parked `t-queued`: it goes on by itself, there is nothing to resume.
    let said = approve(&id_of("t-queued"));
    assert!(said.contains("a worker resumes thread t-queued by itself"), "{said}");
    assert!(!said.contains("resume thread t-queued to go on"), "{said}");

    // And so it does: a worker claims the run again and completes it.
    let app = app(Arc::new(RedbStore::open(&path).unwrap()));
    work_until(&app, |app| {
        app.state("t-queued").unwrap().is_some_and(|s| s.state.receipt.is_some())
            && !app.live_runs().unwrap().iter().any(|r| r.thread == "t-queued")
    });
    assert_eq!(app.state("t-queued").unwrap().unwrap().state.receipt.unwrap()["result"]["refunded"], 30);
}

/// A refund paid by the parent itself next to one delegated to `payments`: the tree waits for
/// two approvals at once, the parent's and its subgraph child's.
#[graph(state = Pay, start = split)]
mod two_refunds {
    use super::*;

    #[node(goto = [pay_here, delegate])]
    async fn split(_s: &Pay) -> Step<Pay> {
        goto!([pay_here, delegate], Pay::update())
    }

    #[node(goto = [END], tools = [refund])]
    async fn pay_here(s: &Pay, cx: &Ctx<()>) -> Result<Step<Pay>, NodeError> {
        cx.run_tool(refund, json!({ "order_id": s.order, "amount": s.amount })).await?;
        Ok(goto!(END, Pay::update().log(vec!["paid here".into()])))
    }

    #[node(goto = [END], subgraphs = [payments])]
    async fn delegate(s: &Pay, cx: &Ctx<()>) -> Result<Step<Pay>, NodeError> {
        let done =
            cx.subgraph(payments::graph(), Pay { order: s.order.clone(), amount: s.amount, ..Pay::default() }).await?;
        Ok(goto!(END, Pay::update().receipt(done.receipt)))
    }
}

/// After a decision, the approvals still waiting anywhere in the thread's tree (the parent's
/// own, a sibling child's) are counted: the thread goes on once they are decided too, whether
/// the app resumes it or a worker does.
#[test]
fn approve_counts_the_approvals_still_waiting_in_the_whole_tree() {
    let dir = temp_dir("approve-tree");
    let path = dir.join("runs.redb");
    {
        let store: Arc<dyn Store> = Arc::new(RedbStore::open(&path).unwrap());
        let app = two_refunds::graph().app().store(store);
        let input = |order: &str| Pay { order: order.into(), amount: 20, ..Pay::default() };
        // `tree-run` is run by the app itself, `tree-queued` submitted to the workers.
        let run = runtime().block_on(app.runner(&()).thread("tree-run").owner("agent").run(input("B-1")));
        assert!(matches!(run.expect("paused run").outcome, Outcome::Interrupted { .. }));
        app.submit_as("tree-queued", &input("B-2"), "agent").unwrap();
        work_until(&app, |app| {
            app.live_runs().unwrap().iter().any(|r| r.thread == "tree-queued" && r.wait == RunWait::Approval)
        });
    }
    let approvals = af_json(&path, &["pending"])["approvals"].clone();
    // The approval of `top`'s own refund, then its child's.
    let ids_of = |top: &str| {
        let all = approvals.as_array().unwrap();
        let own = all.iter().find(|a| a["thread"] == top);
        let child = all.iter().find(|a| a["thread"].as_str().is_some_and(|t| t != top && t.starts_with(top)));
        let id =
            |a: Option<&Value>| a.unwrap_or_else(|| panic!("`{top}`: {approvals}"))["id"].as_str().unwrap().to_string();
        (id(own), id(child))
    };
    let approve = |id: &str| {
        let out = af(&path, &["approve", id, "--as", "alice", "--role", "irreversible"]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        stdout(&out)
    };

    // The child's approval decided, the parent's own still waits.
    let (own, child) = ids_of("tree-run");
    let said = approve(&child);
    assert!(said.contains("resume thread tree-run to go on once the other waiting approval is decided"), "{said}");
    let said = approve(&own);
    assert!(said.contains("resume thread tree-run to go on (it is not in the run queue"), "{said}");
    assert!(!said.contains("once"), "{said}");

    // The parent's own decided first, its child's still waits.
    let (own, child) = ids_of("tree-queued");
    let said = approve(&own);
    assert!(
        said.contains(
            "a worker resumes thread tree-queued by itself (its run is in the run queue) once the other waiting \
             approval is decided"
        ),
        "{said}"
    );
    let said = approve(&child);
    assert!(
        said.contains("a worker resumes thread tree-queued by itself (its run is in the run queue); nothing"),
        "{said}"
    );
}

#[test]
fn show_labels_an_approvals_expiry_timer_apart_from_a_sleep() {
    let dir = temp_dir("show-timer");
    let path = dir.join("runs.redb");
    fill(&path);
    {
        // A thread asleep for three and a half hours.
        let s = RedbStore::open(&path).unwrap();
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
        let mut sleepy = ThreadRecord::new("t-sleepy", "agent", payments::graph().fingerprint(), 1, now);
        sleepy.status = ThreadStatus::Sleeping;
        s.commit_step(StepCommit::new(sleepy).with_wake_at(now + 12_600_000)).unwrap();
    }
    // `t-paused` waits for an approval, and its timer is the approval's expiry (a day).
    let id = af_json(&path, &["pending"])["approvals"][0]["id"].as_str().unwrap().to_string();
    let shown = stdout(&af(&path, &["show", "t-paused"]));
    assert!(shown.contains(&format!("timer:     approval expires in 23h ({id})")), "{shown}");
    assert!(!shown.contains("wakes:"), "{shown}");

    let shown = stdout(&af(&path, &["show", "t-sleepy"]));
    assert!(shown.contains("wakes:     in 3h"), "{shown}");
    assert!(!shown.contains("approval expires"), "{shown}");
    // The JSON keeps the timer as it was: unix millis.
    assert!(af_json(&path, &["show", "t-paused"])["wake_at"].is_u64());
}
