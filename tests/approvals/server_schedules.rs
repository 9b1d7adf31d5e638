//! Cron schedules through the server's API: made, listed and removed over HTTP in the caller's
//! name and tenants, refused with a 422 that says the syntax, and fired by the server's
//! scheduler into a run its worker runs to its end; one schedule whose refusals cannot be read
//! is listed saying so, among the others.

use std::time::Duration;

use agentflow::timer::now_ms;
use serde_json::json;

use crate::server_client::{Who, serve, serve_wrapped, user};

fn roles(names: &[&str]) -> Vec<String> {
    names.iter().map(|r| r.to_string()).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_schedule_made_over_http_fires_on_the_servers_scheduler_and_its_run_completes() {
    let people = vec![
        user("agent", &roles(&["start", "list", "cancel", "read_state"]), None),
        user("bob", &roles(&["list"]), None),
        user("ann", &roles(&["start", "list", "cancel"]), Some(&["acme"])),
    ];
    let served = serve(&people).await;
    let (agent, bob, ann) = (Who::Token("agent-token"), Who::Token("bob-token"), Who::Token("ann-token"));
    let client = &served.client;

    // Refused: six fields, a graph not hosted, no `start`.
    let six = json!({ "id": "hourly", "graph": "gated", "cron": "0 0 * * * *", "input": {} });
    let reply = client.post("/api/schedules", &agent, Some(six)).await;
    assert_eq!((reply.status, reply.json["error"]["code"].as_str()), (422, Some("unprocessable")), "{}", reply.json);
    let message = reply.json["error"]["message"].as_str().unwrap();
    assert!(message.contains("it has 6 fields, not 5") && message.contains("minute hour"), "{message}");
    let elsewhere = json!({ "id": "x", "graph": "nothing", "cron": "* * * * *", "input": {} });
    assert_eq!(client.post("/api/schedules", &agent, Some(elsewhere)).await.status, 404);
    let made = json!({ "id": "hourly", "graph": "gated", "cron": "0 * * * *", "input": { "passed": false } });
    assert_eq!(client.post("/api/schedules", &bob, Some(made.clone())).await.status, 403);

    let reply = client.post("/api/schedules", &agent, Some(made)).await;
    assert_eq!(reply.status, 201, "{}", reply.json);
    let schedule = &reply.json;
    assert_eq!((schedule["id"].as_str(), schedule["owner"].as_str()), (Some("hourly"), Some("agent")));
    assert_eq!(schedule["input"], json!({ "passed": false }));
    let next_at = schedule["next_at"].as_u64().unwrap();
    assert!(next_at > now_ms() && next_at.is_multiple_of(3_600_000), "the next whole hour: {schedule}");
    assert!(schedule["last_thread"].is_null());

    // Listed for who may list and acts for its tenant (none); another tenant's caller sees
    // nothing, and removing it is a 404 for them.
    let listed = client.get("/api/schedules", &bob).await;
    assert_eq!(listed.status, 200, "{}", listed.json);
    assert_eq!(listed.json.as_array().map(Vec::len), Some(1), "{}", listed.json);
    assert_eq!(client.get("/api/schedules", &ann).await.json, json!([]));
    let delete = |who| client.send(reqwest::Method::DELETE, "/api/schedules/hourly", who, None, None);
    assert_eq!(delete(&ann).await.status, 404);
    assert_eq!(delete(&bob).await.status, 403, "removing needs `cancel`");
    // Its id is taken for ann's tenant, without saying whose it is.
    let taken = json!({ "id": "hourly", "graph": "gated", "cron": "0 * * * *", "input": {} });
    let reply = client.post("/api/schedules", &ann, Some(taken)).await;
    assert_eq!(reply.status, 409, "{}", reply.json);
    assert!(!reply.json.to_string().contains("agent"), "{}", reply.json);

    // The clock moves past its time (as after a restart): the server's scheduler fires it
    // once, and its worker runs the run to its end.
    let mut record = served.store.schedule("hourly").unwrap().unwrap();
    record.next_at = now_ms() - 3 * 3_600_000 - 1_800_000;
    served.store.put_schedule(record).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let thread = loop {
        let listed = client.get("/api/schedules", &agent).await.json;
        if let Some(thread) = listed[0]["last_thread"].as_str() {
            assert!(listed[0]["next_at"].as_u64().unwrap() > now_ms(), "{listed}");
            break thread.to_string();
        }
        assert!(tokio::time::Instant::now() < deadline, "the schedule never fired: {listed}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(thread.starts_with("hourly-") && thread.ends_with('Z'), "{thread}");
    served.gate.add_permits(1);
    let view = served.until_settled(&agent, &thread, "completed").await;
    assert_eq!(view["owner"], "agent", "{view}");
    let submitted = served.audit(&thread, "run.submitted");
    assert_eq!(submitted.len(), 1, "fired once: {submitted:?}");
    assert_eq!(submitted[0].actor, "schedule:hourly");
    let threads = served.store.list_threads().unwrap();
    assert_eq!(threads.iter().filter(|t| t.id.starts_with("hourly-")).count(), 1);

    let reply = delete(&agent).await;
    assert_eq!((reply.status, &reply.json), (200, &json!({ "unscheduled": true })));
    assert_eq!(delete(&agent).await.status, 404);
    assert_eq!(client.get("/api/schedules", &agent).await.json, json!([]));
    served.stop().await;
}

/// A schedule is checked again at each fire, for its owner as the users file names them now:
/// one whose owner lost `start` (the file changed since it was made), or is no longer in the
/// file, starts nothing, is kept as it was, and its refusal is audited once, naming why; the
/// schedule of an owner who may still start runs fires.
#[tokio::test(flavor = "multi_thread")]
async fn a_schedule_whose_owner_lost_the_right_to_start_runs_is_refused_at_its_fire() {
    use agentflow::schedule::{SCHEDULE_REFUSED_KIND, ScheduleRecord, refusal_stream};
    let people = vec![user("agent", &roles(&["start", "list"]), None), user("bob", &roles(&["list"]), None)];
    let served = serve(&people).await;
    // Made when their owners could start runs, due long ago (2024-03-10 12:00 UTC).
    const DUE: u64 = 1_710_072_000_000;
    for (id, owner) in [("by-agent", "agent"), ("by-bob", "bob"), ("by-gone", "gone")] {
        let record = ScheduleRecord::new(id, "gated", "0 * * * *", br#"{"passed": false}"#.to_vec(), owner, DUE, 1);
        served.store.put_schedule(record).unwrap();
    }
    // Audited in the schedule's own stream, never in a thread of the due minute's name (which
    // another tenant's thread may have).
    let refusals = |id: &str| served.audit(&refusal_stream(id), SCHEDULE_REFUSED_KIND);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let fired = served.store.schedule("by-agent").unwrap().unwrap().last_thread.is_some();
        if fired && refusals("by-bob").len() == 1 && refusals("by-gone").len() == 1 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the scheduler never looked");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A later look of the scheduler (it fires a schedule made since): still refused, still
    // audited once.
    let later = ScheduleRecord::new("later", "gated", "0 * * * *", br#"{"passed": false}"#.to_vec(), "agent", DUE, 1);
    served.store.put_schedule(later).unwrap();
    while served.store.schedule("later").unwrap().unwrap().last_thread.is_none() {
        assert!(tokio::time::Instant::now() < deadline, "the scheduler never looked again");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for (id, why) in [("by-bob", "`bob` may not start"), ("by-gone", "`gone` is no longer a known user")] {
        let kept = served.store.schedule(id).unwrap().unwrap();
        assert_eq!((kept.next_at, kept.last_thread.as_deref()), (DUE, None), "{id}: kept as it was");
        let audited = refusals(id);
        assert_eq!(audited.len(), 1, "{id}: {audited:?}");
        assert_eq!(audited[0].actor, format!("schedule:{id}"));
        let reason = audited[0].detail["reason"].as_str().unwrap();
        assert!(reason.contains(why), "{id}: {reason}");
        assert!(served.audit(&format!("{id}-20240310T1200Z"), SCHEDULE_REFUSED_KIND).is_empty());
    }
    // The listing says why, to who may list the schedule.
    let listed = served.client.get("/api/schedules", &Who::Token("bob-token")).await.json;
    let by_bob = listed.as_array().unwrap().iter().find(|s| s["id"] == "by-bob").unwrap();
    assert!(by_bob["refused"].as_str().unwrap().contains("`bob` may not start"), "{by_bob}");
    let by_agent = listed.as_array().unwrap().iter().find(|s| s["id"] == "by-agent").unwrap();
    assert!(by_agent["refused"].is_null(), "{by_agent}");
    // A new thread may not take a schedule's stream.
    let taken = json!({ "graph": "gated", "input": {}, "thread": "schedule:by-bob" });
    let reply = served.client.post("/api/threads", &Who::Token("agent-token"), Some(taken)).await;
    assert_eq!(reply.status, 422, "{}", reply.json);
    let runs = served.store.list_runs().unwrap();
    assert!(runs.iter().all(|r| r.owner == "agent"), "only the allowed owner's run was queued: {runs:?}");
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_schedule_whose_refusals_cannot_be_read_is_listed_saying_so_among_the_others() {
    use std::sync::Arc;

    use crate::support::hooked_store::Hooked;
    use agentflow::Store;
    use agentflow::schedule::{ScheduleRecord, refusal_stream};
    use agentflow_store::ReadError;

    let people = vec![user("agent", &roles(&["start", "list"]), None)];
    let wrap = |inner: Arc<dyn Store>| {
        let mut hooked = Hooked::new(inner);
        hooked.fail_list_audit = Some(Box::new(|stream: &str| {
            (stream == refusal_stream("broken")).then(|| ReadError::BrokenChain {
                path: "store".into(),
                thread: stream.to_string(),
                seq: 1,
                missing: 0,
            })
        }));
        Arc::new(hooked) as Arc<dyn Store>
    };
    let served = serve_wrapped(&people, wrap, |server, _| server).await;
    // Not due for a day: the scheduler leaves them alone.
    let later = now_ms() + 86_400_000;
    for id in ["broken", "fine"] {
        let record = ScheduleRecord::new(id, "gated", "0 * * * *", br#"{"passed": false}"#.to_vec(), "agent", later, 1);
        served.store.put_schedule(record).unwrap();
    }
    let reply = served.client.get("/api/schedules", &Who::Token("agent-token")).await;
    assert_eq!(reply.status, 200, "{}", reply.json);
    let listed = reply.json.as_array().unwrap();
    let ids: Vec<&str> = listed.iter().map(|s| s["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["broken", "fine"]);
    let unread = listed[0]["refused_unread"].as_str().unwrap();
    assert!(unread.contains("cannot be rebuilt"), "{unread}");
    assert!(listed[0]["refused"].is_null());
    assert!(listed[1].get("refused_unread").is_none(), "{}", listed[1]);
    served.stop().await;
}
