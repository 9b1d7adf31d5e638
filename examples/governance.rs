//! What a support thread keeps, who sees it, and how it is erased: secrets by reference,
//! personal data, a refused credential, encryption at rest, a legal hold and a purge.
//!
//! `cargo run --example governance`
//!
//! A support graph signs in to a (pretend) order system, keeps the session token in a secret
//! store and only its reference in the state, and notes what it found about a customer whose
//! address is marked as personal data (`#[state(pii)]`). The store is a redb file wrapped in a
//! `SealedStore`: every payload is sealed with the thread's data key, kept in a key store file
//! apart from the data and wrapped by a key-encryption key from a key file. The run shows:
//! - the data file holds neither the customer's address nor the token, while thread ids and
//!   statuses stay readable;
//! - a support person without `see_personal_data` may not read the address; the privacy officer
//!   may, and her read is in the thread's audit log;
//! - a careless node that copies a token into the state fails before anything is written,
//!   the error naming the JSON pointer, not the value;
//! - counsel's legal hold refuses the purge; once lifted, the purge removes the thread's data,
//!   destroys its data key, and a copy of the data file taken before no longer opens it.
//!
//! No model is involved. Everything lives in a temp folder, deleted at the end.

use std::process::ExitCode;
use std::sync::Arc;

use agentflow::access::{Actor, RoleAccess};
use agentflow::prelude::*;
use agentflow::sealed::{FileKeyProvider, RedbKeyStore, SealedStore};
use agentflow::secret::{Exposed, FileSecrets, Secret, SecretStore, Secrets};
use agentflow::{RedbStore, Store};
use serde::{Deserialize, Serialize};

/// The graph's deps: where secrets are read and kept.
pub struct Vault {
    secrets: Secrets,
}

impl Vault {
    /// Secrets kept as files in `dir` (`file:NAME`), where new ones are put.
    pub fn in_dir(dir: &std::path::Path) -> Vault {
        Vault { secrets: Secrets::new().with(FileSecrets::new(dir)).writable("file") }
    }
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct SignIn {
    /// The support account to sign in as.
    account: String,
}

/// Signs in to the order system; keeps the session token in the secret store and answers its
/// reference (the token itself is never returned, so it is never journaled).
#[tool(risk = reversible)]
async fn sign_in(args: SignIn, cx: &ToolCx<Vault>) -> Result<Secret, ToolError> {
    // What an identity provider would answer: made up, shaped like a GitHub token.
    let token = Exposed::new(format!("ghp_{}", "Q3w8Zr5Tn1Vb7Xk2Lm9Pd4Hs6Fj0Ya3Ce8Ug1"));
    let name = format!("session-{}", args.account);
    let reference = cx.deps().secrets.put(&name, token).await.map_err(|e| ToolError::Fatal(e.to_string()))?;
    Ok(Secret::from_ref(reference))
}

/// A support case.
#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
pub struct Case {
    /// The customer's address: personal data.
    #[state(pii)]
    pub customer: String,
    /// The order system's session: a reference only.
    pub session: Option<Secret>,
    #[reduce(append)]
    pub notes: Vec<String>,
}

#[graph(state = Case, deps = Vault, start = open_case)]
pub mod support {
    use super::*;

    #[node(goto = [look_up], tools = [sign_in])]
    async fn open_case(_c: &Case, cx: &Ctx<Vault>) -> Result<Step<Case>, NodeError> {
        let seen = cx.run_tool(sign_in, serde_json::json!({ "account": "desk-7" })).await?;
        let session: Secret = serde_json::from_value(seen.body["result"].clone()).fatal()?;
        Ok(goto!(look_up, Case::update().session(Some(session))))
    }

    #[node(goto = [END])]
    async fn look_up(c: &Case, cx: &Ctx<Vault>) -> Result<Step<Case>, NodeError> {
        let session = c.session.as_ref().ok_or_else(|| NodeError::fatal("not signed in"))?;
        // The token is read here, for the request's header, and never written anywhere.
        let token = session.resolve(&cx.deps().secrets).await.fatal()?;
        let orders = if token.expose().starts_with("ghp_") { 2 } else { 0 };
        Ok(goto!(END, Case::update().notes(vec![format!("{orders} open orders, looked up with {session}")])))
    }
}

#[graph(state = Case, deps = Vault, start = careless)]
pub mod careless {
    use super::*;

    /// Copies the token into a note: the credential scan refuses the write.
    #[node(goto = [END])]
    async fn careless(c: &Case, cx: &Ctx<Vault>) -> Result<Step<Case>, NodeError> {
        let session = c.session.as_ref().ok_or_else(|| NodeError::fatal("not signed in"))?;
        let token = session.resolve(&cx.deps().secrets).await.fatal()?;
        Ok(goto!(END, Case::update().notes(vec![format!("debug: token={}", token.expose())])))
    }
}

/// The access policy, as an operator keeps it in a file: which roles may do what.
pub const POLICY: &str = r#"{
    "start": ["agent"],
    "read_state": ["agent", "support", "privacy"],
    "read_history": ["privacy", "counsel"],
    "see_personal_data": ["privacy"],
    "purge": ["privacy", "counsel"]
}"#;

/// Whether `needle` occurs in the file at `path`.
fn file_holds(path: &std::path::Path, needle: &str) -> std::io::Result<bool> {
    let bytes = std::fs::read(path)?;
    Ok(bytes.windows(needle.len()).any(|w| w == needle.as_bytes()))
}

/// A fresh key-encryption key, written to a 0600 file as an operator would keep it
/// (`openssl rand -hex 32 > kek`): 32 bytes from the operating system.
fn write_kek(path: &std::path::Path) -> std::io::Result<()> {
    use std::io::Read;
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    std::fs::write(path, hex + "\n")?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    rt.block_on(run_with_args(std::env::args().skip(1).collect()))
}

/// The example's `main` with these command-line arguments.
pub async fn run_with_args(args: Vec<String>) -> ExitCode {
    let dir = std::env::temp_dir().join(format!("agentflow-governance-{}", std::process::id()));
    let result = if args.is_empty() { run(&dir).await } else { Err("usage: governance".into()) };
    std::fs::remove_dir_all(&dir).ok();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("governance: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(dir: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
    std::fs::create_dir_all(dir.join("secrets"))?;
    let (data, key_file, kek) = (dir.join("cases.redb"), dir.join("keys.redb"), dir.join("kek"));
    write_kek(&kek)?;
    let keys = Arc::new(RedbKeyStore::open(&key_file)?);
    let provider = Arc::new(FileKeyProvider::open(&kek)?);
    let sealed = SealedStore::new(RedbStore::open(&data)?, Arc::clone(&keys), Arc::clone(&provider));
    let store: Arc<dyn Store> = Arc::new(sealed);
    let vault = Vault::in_dir(&dir.join("secrets"));
    let app = support::graph().app().store(Arc::clone(&store)).access(RoleAccess::from_json(POLICY)?);
    let customer = "ada.lovelace@example.com";

    println!("1. the agent opens a case for {customer}");
    let agent = app.acting_as(Actor::new("agent-7", ["agent"]));
    let run = agent.runner(&vault).thread("case-1").run(Case { customer: customer.into(), ..Case::default() }).await?;
    println!("   case-1: {}; notes: {:?}", run.outcome, run.state.notes);
    store.flush()?;
    let token_prefix = "ghp_Q3w8";
    println!(
        "   the data file holds the address: {}; the token: {}; the thread id: {}",
        file_holds(&data, customer)?,
        file_holds(&data, token_prefix)?,
        file_holds(&data, "case-1")?
    );
    let before_purge = dir.join("cases-backup.redb");
    std::fs::copy(&data, &before_purge)?;

    println!("2. who may read the customer's address");
    let sam = app.acting_as(Actor::new("sam", ["support"]));
    match sam.state("case-1") {
        Ok(_) => return Err("support read personal data".into()),
        Err(e) => println!("   sam (support): refused: {e}"),
    }
    let pia = app.acting_as(Actor::new("pia", ["privacy"]));
    let case = pia.state("case-1")?.ok_or("case-1 is missing")?;
    println!("   pia (privacy): {}", case.state.customer);
    let last = pia.audit_log("case-1")?.pop().ok_or("no audit entry")?;
    println!("   audit log: {} by {}", last.kind, last.actor);

    println!("3. a careless node copies the token into a note");
    let careless = careless::graph().app().store(Arc::clone(&store));
    let start = Case { customer: customer.into(), session: case.state.session.clone(), ..Case::default() };
    match careless.runner(&vault).thread("case-2").run(start).await {
        Ok(run) => return Err(format!("the token was accepted: {}", run.outcome).into()),
        Err(e) => println!("   case-2: refused: {e}"),
    }
    println!("   the data file holds the token: {}", file_holds(&data, token_prefix)?);

    println!("4. counsel holds case-1; the privacy officer asks to erase it");
    let counsel = Actor::new("cole", ["counsel"]);
    app.hold_thread("case-1", "dispute 2026-114", counsel.clone())?;
    match app.purge_thread("case-1", Actor::new("pia", ["privacy"])) {
        Ok(_) => return Err("a held thread was purged".into()),
        Err(e) => println!("   purge refused: {e}"),
    }
    app.release_hold("case-1", counsel)?;
    let report = app.purge_thread("case-1", Actor::new("pia", ["privacy"]))?;
    println!(
        "   purged {:?}: {} checkpoints, {} pending writes, {} effects, {} audit details",
        report.threads, report.checkpoints, report.pending_writes, report.effects, report.audit_details
    );
    let record = store.thread("case-1")?.ok_or("the tombstone is missing")?;
    println!("   case-1 is now {}; its audit log verifies: {}", record.status, pia.verify_audit("case-1")?.is_ok());

    println!("5. the copy of the data file taken before the purge, with today's key store");
    let backup = SealedStore::new(RedbStore::open(&before_purge)?, Arc::clone(&keys), provider);
    match backup.latest_checkpoint("case-1") {
        Ok(_) => return Err("the purged thread still opens in the copy".into()),
        Err(e) => println!("   case-1: {e}"),
    }
    Ok(())
}
