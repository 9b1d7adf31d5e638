//! What the access tests share: a role-access policy that gives every operation the role
//! `ok`, an actor who holds it and one who does not (both of tenant `acme`, both able to
//! decide irreversible calls as far as the authorizer goes), and a store with a thread of
//! `acme` for each operation and one of another tenant, `globex`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentflow::access::{Actor, Operation, RoleAccess};
use agentflow::approval::{ApprovalDesk, RoleAuthorizer};
use agentflow::prelude::*;
use agentflow::tool::Risk;
use agentflow::{RedbStore, Store};
use serde_json::json;

use crate::cli_common::{Ask, Pay, asking, payments};

/// The role every operation needs.
pub const ROLE: &str = "ok";
/// The tenant of every thread the actors act on.
pub const TENANT: &str = "acme";
/// A thread of another tenant.
pub const OTHER: &str = "t-other";

/// Who performs a cell's operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Who {
    /// Holds the role the policy asks for.
    Allowed,
    /// Holds other roles only.
    Denied,
}

impl Who {
    /// The actor: `olga` holds `ok`, `dan` does not; both act for `acme` only.
    pub fn actor(self) -> Actor {
        let (name, role) = self.parts();
        Actor::new(name, [role, "irreversible"]).for_tenants([TENANT])
    }

    /// The actor's name and the role that tells them apart.
    pub fn parts(self) -> (&'static str, &'static str) {
        match self {
            Who::Allowed => ("olga", ROLE),
            Who::Denied => ("dan", "viewer"),
        }
    }

    /// The CLI flags naming the actor under the policy file `access`.
    pub fn flags(self, access: &Path) -> Vec<String> {
        let (name, role) = self.parts();
        ["--as", name, "--role", role, "--role", "irreversible", "--tenant", TENANT, "--access"]
            .iter()
            .map(|s| s.to_string())
            .chain([access.display().to_string()])
            .collect()
    }
}

/// The role that may read a thread's state but not see personal data: held only by
/// [`READER`], the actor the denied cells of [`Operation::SeePersonalData`] use (the denied
/// actor of the other cells may not read the state at all).
pub const READER_ROLE: &str = "reader";
/// The actor holding [`READER_ROLE`].
pub const READER: &str = "vic";

/// `vic`: may read thread state (of `acme`) and nothing else.
pub fn reader() -> Actor {
    Actor::new(READER, [READER_ROLE]).for_tenants([TENANT])
}

/// The roles each operation needs: `ok`, and for [`Operation::ReadState`] [`READER_ROLE`] too.
fn roles(op: Operation) -> Vec<&'static str> {
    if op == Operation::ReadState { vec![ROLE, READER_ROLE] } else { vec![ROLE] }
}

/// Every operation to the role `ok` (and reading state to [`READER_ROLE`]), and no other role.
pub fn policy() -> RoleAccess {
    Operation::ALL.iter().fold(RoleAccess::new(), |p, op| roles(*op).into_iter().fold(p, |p, r| p.allow(*op, r)))
}

/// [`policy`] as the JSON file `--access` reads.
pub fn policy_file(dir: &Path) -> PathBuf {
    let map: serde_json::Map<String, serde_json::Value> =
        Operation::ALL.iter().map(|op| (op.as_str().to_string(), json!(roles(*op)))).collect();
    let path = dir.join("access.json");
    std::fs::write(&path, serde_json::Value::Object(map).to_string()).expect("access file");
    path
}

/// The authorizer the library cells decide with (the CLI's default: `irreversible` decides
/// irreversible calls).
pub fn authorizer() -> RoleAuthorizer {
    RoleAuthorizer::new().role_for(Risk::Irreversible, "irreversible")
}

/// A thread whose state has a personal field: `email` holds [`EMAIL`].
pub const PERSONAL: &str = "t-pii";
/// The personal value of [`PERSONAL`].
pub const EMAIL: &str = "ada@example.com";

/// A contact: `email` is personal data.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize, State)]
pub struct Contact {
    #[state(pii)]
    pub email: String,
    #[reduce(add)]
    pub visits: u32,
}

/// One node that counts a visit.
#[graph(state = Contact, start = visit)]
pub mod contacts {
    use super::*;

    #[node(goto = [END])]
    async fn visit(_c: &Contact) -> Step<Contact> {
        goto!(END, Contact::update().visits(1))
    }
}

/// Fills `store`, every thread of `acme` but [`OTHER`]:
/// - [`PERSONAL`] completed, its state holding a personal field (see personal data);
/// - `t-pay` waits for the approval of a refund requested by `agent` (decide);
/// - `t-ask` waits in `cx.interrupt` for an answer (answer);
/// - `t-res` waits there too, answered already (resume);
/// - `t-done` completed (read, update, fork); `t-old` completed (compact);
/// - `t-q1`, `t-q2` completed and queued for a worker (cancel, pause);
/// - [`OTHER`], of `globex`, waits for the approval of a refund.
pub async fn seed(store: Arc<dyn Store>) {
    let pay = payments::graph().app().store(Arc::clone(&store));
    let ask = asking::graph().app().store(Arc::clone(&store));
    for (thread, tenant, amount) in [
        ("t-pay", TENANT, 40),
        (OTHER, "globex", 40),
        ("t-done", TENANT, 0),
        ("t-old", TENANT, 0),
        ("t-q1", TENANT, 0),
        ("t-q2", TENANT, 0),
    ] {
        let input = Pay { order: format!("O-{thread}"), amount, ..Pay::default() };
        let run = pay.runner(&()).thread(thread).tenant(tenant).owner("agent").run(input).await.expect("run");
        let want_done = amount == 0;
        assert_eq!(run.outcome == Outcome::Completed, want_done, "{thread}: {:?}", run.outcome);
    }
    for thread in ["t-ask", "t-res"] {
        let input = Ask { question: "how many?".into(), answer: None };
        let run = ask.runner(&()).thread(thread).tenant(TENANT).run(input).await.expect("run");
        assert!(matches!(run.outcome, Outcome::Interrupted { .. }), "{thread}: {:?}", run.outcome);
    }
    let desk = ApprovalDesk::for_store(Arc::clone(&store), RoleAuthorizer::new());
    let seq = desk.waiting_interrupt("t-res").expect("t-res waits").0;
    desk.answer_interrupt("t-res", seq, json!(7), &Actor::from("setup")).expect("answer t-res");
    for thread in ["t-q1", "t-q2"] {
        pay.submit_resume(thread).expect("queue");
    }
    let contact = contacts::graph().app().store(Arc::clone(&store));
    let input = Contact { email: EMAIL.into(), visits: 0 };
    let run = contact.runner(&()).thread(PERSONAL).tenant(TENANT).run(input).await.expect("run t-pii");
    assert_eq!(run.outcome, Outcome::Completed);
}

/// The `personal_data.read` entries of `thread`'s audit log, as (actor, surface).
pub fn personal_reads(store: &dyn Store, thread: &str) -> Vec<(String, String)> {
    let entries = store.list_audit(thread).expect("audit log");
    entries
        .into_iter()
        .filter(|e| e.kind == agentflow::access::personal::PERSONAL_DATA_READ)
        .map(|e| (e.actor, e.detail["surface"].as_str().unwrap_or_default().to_string()))
        .collect()
}

/// A redb file at `path` filled by [`seed`], closed again.
pub async fn seeded_file(path: &Path) {
    seed(Arc::new(RedbStore::open(path).expect("open store"))).await;
}

/// What a cell looks at to tell whether its operation happened.
pub mod look {
    use agentflow::Store;
    use agentflow::approval::{ApprovalDesk, ApprovalStatus, RoleAuthorizer};
    use agentflow_store::RunControl;
    use std::sync::Arc;

    /// The newest checkpoint of `thread`.
    pub fn head(store: &dyn Store, thread: &str) -> u64 {
        store.latest_checkpoint(thread).unwrap().map(|c| c.seq).unwrap_or_default()
    }

    /// The first checkpoint of `thread`.
    pub fn first(store: &dyn Store, thread: &str) -> u64 {
        store.list_checkpoints(thread).unwrap().first().map(|c| c.seq).expect("a checkpoint")
    }

    /// How many checkpoints `thread` keeps.
    pub fn checkpoints(store: &dyn Store, thread: &str) -> usize {
        store.list_checkpoints(thread).unwrap().len()
    }

    /// Whether thread `thread` exists.
    pub fn exists(store: &dyn Store, thread: &str) -> bool {
        store.thread(thread).unwrap().is_some()
    }

    /// Whether `thread` is in the run queue.
    pub fn queued(store: &dyn Store, thread: &str) -> bool {
        store.list_runs().unwrap().iter().any(|r| r.thread == thread)
    }

    /// The control asked of `thread`'s queued run.
    pub fn control(store: &dyn Store, thread: &str) -> Option<RunControl> {
        store.list_runs().unwrap().into_iter().find(|r| r.thread == thread).and_then(|r| r.control)
    }

    /// The one approval of `thread`.
    pub fn approval(store: &dyn Store, thread: &str) -> (String, ApprovalStatus) {
        let a = store.list_approvals(thread).unwrap().into_iter().next().expect("an approval");
        (a.id, a.status)
    }

    /// Whether `thread`'s question has an answer recorded.
    pub fn answered(store: &Arc<dyn Store>, thread: &str) -> bool {
        let desk = ApprovalDesk::for_store(Arc::clone(store), RoleAuthorizer::new());
        desk.recorded_answer(thread).unwrap().is_some()
    }

    /// The status of `thread`.
    pub fn status(store: &dyn Store, thread: &str) -> String {
        store.thread(thread).unwrap().expect("thread").status.as_str().to_string()
    }

    /// The `log` of `thread`'s state at its head, read with the graph's types.
    pub fn log(store: &Arc<dyn Store>, thread: &str) -> Vec<String> {
        let app = crate::cli_common::payments::graph().app().store(Arc::clone(store));
        app.state(thread).unwrap().expect("a state").state.log
    }
}
