//! Secrets by reference and the credential scan on durable writes:
//!
//! - a node that writes an API key into its state fails the run before anything of it is
//!   written, the error naming the JSON pointer and the kind, never the value;
//! - a tool that obtains a token keeps it in a writable secret store and returns its reference:
//!   the run completes, the state holds only `{"secretRef": ..}`, and the store's file has no
//!   trace of the token; a later node resolves the reference through the graph's deps;
//! - a state field marked `#[state(credential)]` needs a store that seals payloads;
//! - an update written without the graph (`update_thread`) is scanned the same way;
//! - the thread's status line never quotes a credential or a wrongly shaped answer.

use crate::support::stores::open_redb;
use crate::support::temp::temp_dir;

use std::sync::Arc;

use agentflow::persist::PersistError;
use agentflow::prelude::*;
use agentflow::secret::{CredentialKind, Exposed, FileSecrets, Secret, SecretStore, Secrets};
use agentflow::{RunError, Store};
use serde::{Deserialize, Serialize};

/// Shaped like an OpenAI key; made up.
const API_KEY: &str = "sk-proj-Q7vN1cB8zR5kW3yH6jD0sA2eG9uP4iO7tY1rE5wQ4fT9xL2m";
/// Shaped like a GitHub token; made up.
const TOKEN: &str = "ghp_Zx81kQm4T7pLw2Vn9Rb5Yc3Hd6Jf0Gs1Ae7K";

fn redb_file(name: &str) -> (std::path::PathBuf, Arc<dyn Store>) {
    let path = temp_dir(name).join("store.redb");
    let store: Arc<dyn Store> = Arc::new(open_redb(&path).expect("open the redb file"));
    (path, store)
}

fn file_holds(path: &std::path::Path, needle: &str) -> bool {
    let bytes = std::fs::read(path).expect("read the store file");
    bytes.windows(needle.len()).any(|w| w == needle.as_bytes())
}

// ---------------------------------------------------------------- a key written into state

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
pub struct Notes {
    #[reduce(append)]
    messages: Vec<String>,
}

#[graph(state = Notes, start = careless)]
mod leaky {
    use super::*;

    #[node(goto = [END])]
    async fn careless(_s: &Notes) -> Step<Notes> {
        goto!(END, Notes::update().messages(vec!["hello".into(), format!("my key is {API_KEY}, keep it safe")]))
    }
}

#[tokio::test]
async fn a_key_written_into_the_state_fails_the_run_and_is_not_stored() {
    let (path, store) = redb_file("secret-leak");
    let graph = leaky::graph().app().store(Arc::clone(&store));
    let result = graph.runner(&()).thread("leak").run(Notes::default()).await;
    let err = result.expect_err("the run must fail");
    match &err {
        RunError::Persist(PersistError::Credential { pointer, kind, .. }) => {
            assert_eq!(pointer, "/messages/1");
            assert_eq!(*kind, CredentialKind::OpenAi);
        }
        other => panic!("expected a credential refusal, got {other:?}"),
    }
    let message = err.to_string();
    assert!(message.contains("/messages/1") && message.contains("OpenAI"), "{message}");
    assert!(!message.contains(API_KEY), "the error must not carry the value: {message}");
    // The input checkpoint is there; nothing of the step is.
    let latest = graph.state("leak").unwrap().expect("the thread exists");
    assert!(latest.state.messages.is_empty(), "{:?}", latest.state);
    drop(graph);
    drop(store);
    assert!(!file_holds(&path, "sk-proj-"), "the key reached the store file");
}

// ---------------------------------------------------------------- a token kept by reference

/// The graph's deps: where secrets are read and kept.
pub struct Vault {
    secrets: Secrets,
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct Login {
    user: String,
}

/// Logs in and keeps the session token in the secret store; answers its reference.
#[tool(risk = reversible)]
async fn login(args: Login, cx: &ToolCx<Vault>) -> Result<Secret, ToolError> {
    // The token an identity provider would answer.
    let token = Exposed::new(TOKEN.to_string());
    let reference = cx
        .deps()
        .secrets
        .put(&format!("session-{}", args.user), token)
        .await
        .map_err(|e| ToolError::Fatal(e.to_string()))?;
    Ok(Secret::from_ref(reference))
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
pub struct Session {
    token: Option<Secret>,
    #[reduce(append)]
    log: Vec<String>,
}

#[graph(state = Session, deps = Vault, start = sign_in)]
mod signed {
    use super::*;

    #[node(goto = [call_api], tools = [login])]
    async fn sign_in(_s: &Session, cx: &Ctx<Vault>) -> Result<Step<Session>, NodeError> {
        let seen = cx.run_tool(login, serde_json::json!({ "user": "ada" })).await?;
        let token: Secret = serde_json::from_value(seen.body["result"].clone()).fatal()?;
        Ok(goto!(call_api, Session::update().token(Some(token))))
    }

    #[node(goto = [END])]
    async fn call_api(s: &Session, cx: &Ctx<Vault>) -> Result<Step<Session>, NodeError> {
        let token = s.token.as_ref().ok_or_else(|| NodeError::fatal("no token"))?;
        let value = token.resolve(&cx.deps().secrets).await.fatal()?;
        // The header a request would carry is built here and never stored.
        let ok = value.expose() == TOKEN;
        Ok(goto!(END, Session::update().log(vec![format!("called the API with {token}: {ok}")])))
    }
}

#[tokio::test]
async fn a_token_a_tool_obtains_is_kept_by_reference_only() {
    let (path, store) = redb_file("secret-ref");
    let dir = temp_dir("secret-files");
    let vault = Vault { secrets: Secrets::new().with(FileSecrets::new(&dir)).writable("file") };
    let graph = signed::graph().app().store(Arc::clone(&store));
    let run = graph.runner(&vault).thread("s1").run(Session::default()).await.unwrap();
    assert_eq!(run.outcome, Outcome::Completed);
    assert_eq!(run.state.log, ["called the API with •••(file:session-ada): true"]);
    let stored = graph.state("s1").unwrap().unwrap().state;
    let reference = stored.token.expect("the reference is stored");
    assert_eq!(reference.secret_ref().as_str(), "file:session-ada");
    assert_eq!(serde_json::to_value(&reference).unwrap(), serde_json::json!({ "secretRef": "file:session-ada" }));
    // The token is in the secret file, readable by its owner only.
    let file = dir.join("session-ada");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), TOKEN);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
    }
    drop(graph);
    drop(store);
    assert!(file_holds(&path, "file:session-ada"), "the reference is in the store");
    assert!(!file_holds(&path, TOKEN), "the token reached the store file");
}

// ---------------------------------------------------------------- a tool result holding a token

/// Answers a token in clear: the journal refuses it.
#[tool(risk = reversible)]
async fn leaky_login(args: Login) -> Result<String, ToolError> {
    Ok(format!("{}: {TOKEN}", args.user))
}

#[graph(state = Session, deps = Vault, start = sign_in)]
mod careless_login {
    use super::*;

    #[node(goto = [END], tools = [leaky_login])]
    async fn sign_in(_s: &Session, cx: &Ctx<Vault>) -> Result<Step<Session>, NodeError> {
        cx.run_tool(leaky_login, serde_json::json!({ "user": "ada" })).await?;
        Ok(goto!(END, Session::update()))
    }
}

#[tokio::test]
async fn a_tool_result_holding_a_token_is_not_journaled() {
    let (path, store) = redb_file("secret-result");
    let vault = Vault { secrets: Secrets::new() };
    let graph = careless_login::graph().app().store(Arc::clone(&store));
    let run = graph.runner(&vault).thread("r1").run(Session::default()).await.unwrap();
    match &run.outcome {
        Outcome::Failed { error, .. } => {
            let text = error.to_string();
            // The journal keeps a tool's answer as `{"Ok": result}`.
            assert!(text.contains("GitHub token") && text.contains("`/Ok`"), "{text}");
            assert!(!text.contains(TOKEN), "{text}");
        }
        other => panic!("expected the run to fail, got {other:?}"),
    }
    drop(graph);
    drop(store);
    assert!(!file_holds(&path, "ghp_"), "the token reached the store file");
}

// ---------------------------------------------------------------- a field allowed to hold one

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
pub struct Keyring {
    #[state(credential)]
    key: String,
}

#[graph(state = Keyring, start = keep)]
mod keyring {
    use super::*;

    #[node(goto = [END])]
    async fn keep(_s: &Keyring) -> Step<Keyring> {
        goto!(END, Keyring::update().key(API_KEY.to_string()))
    }
}

#[tokio::test]
async fn a_credential_field_needs_a_store_that_seals_payloads() {
    let (path, store) = redb_file("secret-unsealed");
    let graph = keyring::graph().app().store(Arc::clone(&store));
    let err = graph.runner(&()).thread("k1").run(Keyring::default()).await.unwrap_err();
    match &err {
        RunError::Persist(PersistError::CredentialsUnsealed { state, field }) => {
            assert_eq!((*state, *field), ("Keyring", "key"));
        }
        other => panic!("expected the run to be refused, got {other:?}"),
    }
    assert!(err.to_string().contains("encryption at rest"), "{err}");
    // Nothing started: no thread.
    assert!(graph.thread("k1").unwrap().is_none());
    drop(graph);
    drop(store);
    assert!(!file_holds(&path, "sk-proj-"));
}

// ---------------------------------------------------------------- an interrupt's payload

#[graph(state = Session, deps = Vault, start = ask)]
mod asking {
    use super::*;

    #[node(goto = [END], interrupt)]
    async fn ask(_s: &Session, cx: &Ctx<Vault>) -> Result<Step<Session>, NodeError> {
        let _: String = cx.interrupt(serde_json::json!({ "question": format!("run with token {TOKEN}?") }))?;
        Ok(goto!(END, Session::update()))
    }
}

#[tokio::test]
async fn an_interrupt_payload_holding_a_token_is_not_stored() {
    let (path, store) = redb_file("secret-interrupt");
    let vault = Vault { secrets: Secrets::new() };
    let graph = asking::graph().app().store(Arc::clone(&store));
    let err = graph.runner(&vault).thread("i1").run(Session::default()).await.unwrap_err();
    match &err {
        RunError::Persist(PersistError::Credential { pointer, kind, .. }) => {
            assert!(pointer.ends_with("/question"), "{pointer}");
            assert_eq!(*kind, CredentialKind::GitHub);
        }
        other => panic!("expected a credential refusal, got {other:?}"),
    }
    drop(graph);
    drop(store);
    assert!(!file_holds(&path, "ghp_"), "the token reached the store file");
}

// ---------------------------------------------------------------- a secret in tool arguments

#[derive(Deserialize, schemars::JsonSchema)]
pub struct ApiCall {
    key: Secret,
    path: String,
}

/// Calls an API with a key given by reference.
#[tool(risk = read)]
async fn call_with_key(args: ApiCall) -> Result<String, ToolError> {
    Ok(format!("GET {} with {}", args.path, args.key))
}

#[test]
fn a_secret_argument_is_a_reference_in_the_tool_schema() {
    use agentflow::tool::Tool;
    let schema = call_with_key.parameters().to_string();
    assert!(schema.contains("secretRef") && schema.contains("never the secret's value"), "{schema}");
    let by_reference = serde_json::json!({ "key": { "secretRef": "env:API_KEY" }, "path": "/v1" });
    assert!(call_with_key.validate(&by_reference).is_ok());
    let by_value = serde_json::json!({ "key": API_KEY, "path": "/v1" });
    assert!(call_with_key.validate(&by_value).is_err());
}

#[tokio::test]
async fn a_credential_field_is_kept_sealed_on_a_store_that_seals() {
    use agentflow::sealed::{Kek, RedbKeyStore, SealedStore, StaticKeyProvider};
    let dir = temp_dir("secret-sealed");
    let path = dir.join("store.redb");
    let keys = Arc::new(RedbKeyStore::open(dir.join("keys.redb")).unwrap());
    let provider = StaticKeyProvider::new(Kek::new([0x3c; 32]), vec![]);
    let store: Arc<dyn Store> = Arc::new(SealedStore::new(open_redb(&path).unwrap(), keys, provider));
    assert!(store.seals_payloads());
    let graph = keyring::graph().app().store(Arc::clone(&store));
    let run = graph.runner(&()).thread("k2").run(Keyring::default()).await.unwrap();
    assert_eq!(run.outcome, Outcome::Completed);
    // The marked field is let through the scan and read back.
    assert_eq!(graph.state("k2").unwrap().unwrap().state.key, API_KEY);
    drop(graph);
    drop(store);
    assert!(!file_holds(&path, "sk-proj-"), "the key reached the data file in clear");
}

// ---------------------------------------------------------------- an update made without the graph

#[graph(state = Notes, start = tidy)]
mod tidy_notes {
    use super::*;

    #[node(goto = [END])]
    async fn tidy(_s: &Notes) -> Step<Notes> {
        goto!(END, Notes::update().messages(vec!["hello".into()]))
    }
}

#[tokio::test]
async fn an_update_without_the_graph_is_scanned_before_it_is_written() {
    use agentflow::persist::{HistoryError, update_thread};
    let (path, store) = redb_file("secret-update-thread");
    let graph = tidy_notes::graph().app().store(Arc::clone(&store));
    let run = graph.runner(&()).thread("u1").run(Notes::default()).await.unwrap();
    assert_eq!(run.outcome, Outcome::Completed);
    let (seq, audit) = (store.latest_checkpoint("u1").unwrap().unwrap().seq, graph.audit_log("u1").unwrap().len());
    let table = [
        (serde_json::json!({"messages": [format!("key {API_KEY}")]}), "/messages/0", CredentialKind::OpenAi),
        (serde_json::json!({"messages": [], "by_token": { TOKEN: "ada" }}), "/by_token/{key}", CredentialKind::GitHub),
    ];
    for (update, want, want_kind) in table {
        let err = update_thread(&store, "u1", serde_json::to_vec(&update).unwrap(), "ops").unwrap_err();
        match &err {
            HistoryError::Persist(PersistError::Credential { pointer, kind, .. }) => {
                assert_eq!((pointer.as_str(), *kind), (want, want_kind));
            }
            other => panic!("expected a credential refusal, got {other:?}"),
        }
        let message = err.to_string();
        assert!(!message.contains(API_KEY) && !message.contains(TOKEN), "{message}");
    }
    // Nothing was written: no checkpoint, no `state.updated` entry.
    assert_eq!(store.latest_checkpoint("u1").unwrap().unwrap().seq, seq);
    assert_eq!(graph.audit_log("u1").unwrap().len(), audit);
    // A clean update still goes through.
    let clean = serde_json::to_vec(&serde_json::json!({"messages": ["fixed by hand"]})).unwrap();
    assert!(update_thread(&store, "u1", clean, "ops").unwrap() > seq);
    drop(graph);
    drop(store);
    assert!(!file_holds(&path, "sk-proj-") && !file_holds(&path, "ghp_"), "a credential reached the store file");
}

// ---------------------------------------------------------------- the thread's status line

#[graph(state = Notes, start = call)]
mod failing_call {
    use super::*;

    #[node(goto = [END])]
    async fn call(_s: &Notes) -> Result<Step<Notes>, NodeError> {
        Err(NodeError::fatal(format!("the API refused `Authorization: Bearer aB3dE5gH7jK9mN1pQ3sT5vX7` and {TOKEN}")))
    }
}

#[tokio::test]
async fn a_node_error_quoting_a_token_is_stored_redacted_in_the_status_line() {
    let (_path, store) = redb_file("secret-detail");
    let graph = failing_call::graph().app().store(Arc::clone(&store));
    let run = graph.runner(&()).thread("d1").run(Notes::default()).await.unwrap();
    assert!(matches!(run.outcome, Outcome::Failed { .. }), "{:?}", run.outcome);
    let detail = store.thread("d1").unwrap().unwrap().detail;
    assert!(detail.contains("[redacted bearer token]") && detail.contains("[redacted GitHub token]"), "{detail}");
    assert!(!detail.contains(TOKEN) && !detail.contains("aB3dE5gH7jK9mN1pQ3sT5vX7"), "{detail}");
}

#[graph(state = Notes, start = amount)]
mod asking_amount {
    use super::*;

    #[node(goto = [END], interrupt)]
    async fn amount(_s: &Notes, cx: &Ctx<()>) -> Result<Step<Notes>, NodeError> {
        let n: u32 = cx.interrupt(serde_json::json!({ "question": "how much?" }))?;
        Ok(goto!(END, Notes::update().messages(vec![n.to_string()])))
    }
}

#[tokio::test]
async fn an_answer_of_the_wrong_shape_is_not_quoted_in_the_status_line() {
    let (_path, store) = redb_file("secret-answer-shape");
    let graph = asking_amount::graph().app().store(Arc::clone(&store));
    let run = graph.runner(&()).thread("a1").run(Notes::default()).await.unwrap();
    assert!(matches!(run.outcome, Outcome::Interrupted { .. }), "{:?}", run.outcome);
    let card = "4111 1111 1111 1111";
    let run = graph.runner(&()).thread("a1").resume_with(card).await.unwrap();
    assert!(matches!(run.outcome, Outcome::Failed { .. }), "{:?}", run.outcome);
    let detail = store.thread("a1").unwrap().unwrap().detail;
    assert!(detail.contains("invalid type, expected u32"), "{detail}");
    assert!(!detail.contains(card), "{detail}");
}
