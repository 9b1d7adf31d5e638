//! Personal data in events and streams: a field marked `#[state(pii)]` reaches an app whose
//! actor may not see personal data only as `•••` (values and updates as masked JSON, events
//! with the field left out, every `Display`/`Debug` line without the value), and untouched for
//! an actor who may. A state without personal fields streams as before.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentflow::access::{Actor, Operation, RoleAccess};
use agentflow::prelude::*;
use agentflow::{Event, StreamItem, StreamMode, StreamPart};
use serde::{Deserialize, Serialize};

const GUARD: Duration = Duration::from_secs(10);
const EMAIL: &str = "ada@example.com";

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Contact {
    #[state(pii)]
    email: String,
    #[reduce(add)]
    visits: u32,
}

#[graph(state = Contact, start = greet)]
mod contacts {
    use super::*;

    #[node(goto = [END])]
    async fn greet(_c: &Contact) -> Step<Contact> {
        goto!(END, Contact::update().email(EMAIL.into()).visits(1))
    }
}

/// Every operation to `agent`; seeing personal data to `dpo` as well.
fn policy() -> RoleAccess {
    let ops = Operation::ALL.into_iter().filter(|op| *op != Operation::SeePersonalData);
    ops.fold(RoleAccess::new(), |p, op| p.allow(op, "agent")).allow(Operation::SeePersonalData, "dpo")
}

/// `agent` may do everything but see personal data; `dpo` may see it too.
fn app(roles: &[&str]) -> App<Contact> {
    let app = contacts::graph().app().store(crate::support::stores::store()).access(policy());
    app.acting_as(Actor::new("someone", roles.iter().copied()))
}

async fn stream(app: &App<Contact>, thread: &str) -> Vec<StreamItem<Contact>> {
    let modes = [StreamMode::Values, StreamMode::Updates, StreamMode::Events];
    let stream = app.runner(&()).thread(thread).stream_modes(modes).stream(Contact::default());
    tokio::time::timeout(GUARD, futures_util::StreamExt::collect(stream)).await.expect("no hang")
}

#[tokio::test]
async fn an_actor_without_the_permission_streams_personal_fields_as_dots() {
    let items = stream(&app(&["agent"]), "t-masked").await;
    let (mut values, mut updates, mut events) = (0, 0, 0);
    for item in &items {
        match &item.part {
            StreamPart::Masked { mode: StreamMode::Values, value } => {
                values += 1;
                let email = &value["state"]["email"];
                // The input state is empty; every later one holds the masked value.
                assert!(email == "•••" || email == "", "{value}");
            }
            StreamPart::Masked { mode: StreamMode::Updates, value } => {
                updates += 1;
                assert_eq!(value["update"]["email"], "•••", "{value}");
                assert_eq!(value["update"]["visits"], 1, "{value}");
            }
            StreamPart::Event(e) => {
                events += 1;
                if let Event::NodeFinished { update, .. } = e {
                    assert_eq!(update.email, None, "the event's update leaves the personal field out");
                    assert_eq!(update.visits, Some(1));
                }
            }
            StreamPart::Values { .. } | StreamPart::Update { .. } => panic!("a typed value reached a masked stream"),
            StreamPart::Done(result) => {
                assert!(result.as_ref().is_ok_and(|r| r.outcome.is_completed()), "{result:?}")
            }
            other => panic!("unexpected item {other:?}"),
        }
        assert!(!format!("{:?}", item.part).contains(EMAIL) || matches!(item.part, StreamPart::Done(_)));
    }
    assert!(values >= 1 && updates == 1 && events >= 3, "{values} {updates} {events}");
}

#[tokio::test]
async fn an_actor_with_the_permission_streams_the_values() {
    let items = stream(&app(&["agent", "dpo"]), "t-plain").await;
    let update = items.iter().find_map(|i| match &i.part {
        StreamPart::Update { update, .. } => Some(update.clone()),
        _ => None,
    });
    assert_eq!(update.expect("a typed update").email.as_deref(), Some(EMAIL));
    let last_values = items.iter().rev().find_map(|i| match &i.part {
        StreamPart::Values { state, .. } => Some(state.clone()),
        _ => None,
    });
    assert_eq!(last_values.expect("typed values").email, EMAIL);
    assert!(!items.iter().any(|i| matches!(i.part, StreamPart::Masked { .. })));
}

#[tokio::test]
async fn events_of_a_masked_app_never_carry_the_value() {
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let sink = Arc::clone(&seen);
    let app = app(&["agent"]);
    let run = app
        .runner(&())
        .thread("t-events")
        .on_event(move |e: Event<Contact>| sink.lock().unwrap().push(format!("{e} | {e:?}")))
        .run(Contact::default())
        .await
        .expect("run");
    assert!(run.outcome.is_completed());
    let seen = seen.lock().unwrap();
    assert!(seen.iter().any(|line| line.contains("greet -> END")), "{seen:?}");
    assert!(seen.iter().all(|line| !line.contains(EMAIL)), "{seen:?}");
    // The typed read of a state with personal fields needs the permission.
    let denied = app.state("t-events");
    assert!(denied.as_ref().is_err_and(|e| e.to_string().contains("see personal data")), "{denied:?}");
}

#[tokio::test]
async fn an_allowed_event_line_still_masks_the_value_but_a_read_is_audited() {
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let sink = Arc::clone(&seen);
    let app = app(&["agent", "dpo"]);
    app.runner(&())
        .thread("t-dpo")
        .on_event(move |e: Event<Contact>| sink.lock().unwrap().push(e.to_string()))
        .run(Contact::default())
        .await
        .expect("run");
    // An event's line goes to logs and traces: the update's Debug masks personal fields for all.
    let seen = seen.lock().unwrap();
    assert!(seen.iter().any(|l| l.contains("email: •••")), "{seen:?}");
    assert!(seen.iter().all(|l| !l.contains(EMAIL)), "{seen:?}");
    // Events are not audited; the typed read is, once per read.
    let reads = |app: &App<Contact>| {
        let log = app.audit_log("t-dpo").expect("audit");
        log.into_iter().filter(|e| e.kind == "personal_data.read").map(|e| e.actor).collect::<Vec<_>>()
    };
    assert!(reads(&app).is_empty());
    assert_eq!(app.state("t-dpo").unwrap().unwrap().state.email, EMAIL);
    assert_eq!(reads(&app), ["someone"]);
}

#[test]
fn descriptions_carry_the_marks() {
    let d = contacts::graph().description();
    let fields = d["state"]["fields"].as_array().unwrap();
    assert_eq!(fields[0]["personal"], true);
    assert_eq!(fields[1]["personal"], false);
    assert_eq!(fields[0]["credential"], false);
}

/// A state with a raw credential (stored only by a sealing store) beside a personal field.
#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
struct Login {
    #[state(credential)]
    token: String,
    #[state(pii)]
    email: String,
    #[reduce(add)]
    n: u32,
}

const TOKEN: &str = "tok-raw-41d9";

#[graph(state = Login, start = sign_in)]
mod logins {
    use super::*;

    #[node(goto = [END])]
    async fn sign_in(_l: &Login) -> Step<Login> {
        goto!(END, Login::update().token(TOKEN.into()).email(EMAIL.into()).n(1))
    }
}

fn sealed_store() -> Arc<dyn agentflow::Store> {
    use agentflow::sealed::{Kek, MemoryKeyStore, SealedStore, StaticKeyProvider};
    let provider = StaticKeyProvider::new(Kek::new([7; 32]), vec![]);
    Arc::new(SealedStore::new(agentflow_store::RedbStore::in_memory().unwrap(), MemoryKeyStore::new(), provider))
}

fn login_app(store: &Arc<dyn agentflow::Store>, roles: &[&str]) -> App<Login> {
    let app = logins::graph().app().store(Arc::clone(store)).access(policy());
    app.acting_as(Actor::new("someone", roles.iter().copied()))
}

#[tokio::test]
async fn a_credential_field_is_masked_even_for_an_actor_who_sees_personal_data() {
    let store = sealed_store();
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let sink = Arc::clone(&seen);
    let app = login_app(&store, &["agent", "dpo"]);
    let modes = [StreamMode::Values, StreamMode::Updates, StreamMode::Events];
    let stream = app
        .runner(&())
        .thread("t-login")
        .on_event(move |e: Event<Login>| sink.lock().unwrap().push(format!("{e} | {e:?}")))
        .stream_modes(modes)
        .stream(Login::default());
    let items = tokio::time::timeout(GUARD, futures_util::StreamExt::collect::<Vec<_>>(stream)).await.expect("no hang");
    let mut masked_updates = 0;
    for item in &items {
        match &item.part {
            StreamPart::Masked { mode: StreamMode::Updates, value } => {
                masked_updates += 1;
                assert_eq!(value["update"]["token"], "•••", "{value}");
                assert_eq!(value["update"]["email"], EMAIL, "{value}: the actor may see personal data");
            }
            StreamPart::Masked { mode: StreamMode::Values, value } => {
                assert!(value["state"]["token"] == "•••" || value["state"]["token"] == "", "{value}");
            }
            StreamPart::Event(Event::NodeFinished { update, .. }) => {
                assert_eq!(update.token, None, "the event's update leaves the credential out");
                assert_eq!(update.email.as_deref(), Some(EMAIL));
            }
            StreamPart::Values { .. } | StreamPart::Update { .. } => panic!("a typed value with a credential"),
            _ => {}
        }
        if !matches!(item.part, StreamPart::Done(_)) {
            assert!(!format!("{:?}", item.part).contains(TOKEN), "{:?}", item.part);
        }
    }
    assert_eq!(masked_updates, 1);
    let seen = seen.lock().unwrap();
    assert!(seen.iter().any(|l| l.contains("LoginUpdate { email: ")), "{seen:?}");
    assert!(seen.iter().all(|l| !l.contains(TOKEN)), "{seen:?}");
    assert_eq!(format!("{:?}", Login::update().token(TOKEN.into())), "LoginUpdate { token: ••• }");
}

#[tokio::test]
async fn the_audit_log_masks_updated_values_and_answers_for_an_actor_without_the_permission() {
    let store = sealed_store();
    let dpo = login_app(&store, &["agent", "dpo"]);
    dpo.runner(&()).thread("t-audit").run(Login::default()).await.expect("run");
    dpo.update_state(
        "t-audit",
        Login::update().email("bob@example.com".into()).token("tok-new".into()),
        Actor::new("ops", ["agent"]),
    )
    .unwrap();
    let updated = |log: &[agentflow_store::AuditEntry]| {
        log.iter().find(|e| e.kind == "state.updated").map(|e| e.detail.clone()).expect("a state.updated entry")
    };
    let reads = |log: &[agentflow_store::AuditEntry]| log.iter().filter(|e| e.kind == "personal_data.read").count();

    // Without the permission: both fields masked, nothing to audit.
    let agent = login_app(&store, &["agent"]);
    let log = agent.audit_log("t-audit").unwrap();
    assert_eq!(updated(&log), serde_json::json!({"email": "•••", "token": "•••"}));
    let scanned = agent.scan_audit_log("t-audit").unwrap().items;
    assert_eq!(updated(&scanned), serde_json::json!({"email": "•••", "token": "•••"}));
    let before = reads(&scanned);

    // With it: the personal field shows (an audited read), the credential never does.
    let log = dpo.audit_log("t-audit").unwrap();
    assert_eq!(updated(&log), serde_json::json!({"email": "bob@example.com", "token": "•••"}));
    // The read is recorded after the log is listed: the next listing holds it.
    assert_eq!(reads(&log), before);
    assert_eq!(reads(&dpo.audit_log("t-audit").unwrap()), before + 1, "the unmasked read is audited");
}
