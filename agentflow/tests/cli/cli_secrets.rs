//! Secrets on the command line: `show` and `diff` print a stored `Secret` as `••• reference`,
//! in the text and the JSON form; `update --set` refuses a credential-like value.

use std::sync::Arc;

use agentflow::prelude::*;
use agentflow::secret::Secret;
use agentflow::{RedbStore, Store};
use serde::{Deserialize, Serialize};

use crate::cli_common::{af, af_json, expect_refusal, stderr, stdout, temp_dir};

#[derive(Debug, Clone, Default, Serialize, Deserialize, State)]
pub struct Keyed {
    key: Option<Secret>,
    note: String,
}

#[graph(state = Keyed, start = pick)]
mod keyed {
    use super::*;

    #[node(goto = [END])]
    async fn pick(_s: &Keyed) -> Result<Step<Keyed>, NodeError> {
        let key = Secret::reference("env:PAYMENTS_API_KEY").fatal()?;
        Ok(goto!(END, Keyed::update().key(Some(key))))
    }
}

/// A store file in a new temp folder `name` with thread `k`, run to its end: its state holds a
/// secret's reference.
fn seeded(name: &str) -> std::path::PathBuf {
    let path = temp_dir(name).join("store.redb");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let store: Arc<dyn Store> = Arc::new(RedbStore::open(&path).unwrap());
        let graph = keyed::graph().app().store(store);
        let run = graph.runner(&()).thread("k").run(Keyed::default()).await.unwrap();
        assert_eq!(run.outcome, Outcome::Completed);
    });
    path
}

#[test]
fn show_and_diff_print_a_secret_as_dots_and_its_reference() {
    let path = seeded("cli-secrets");
    let shown = af_json(&path, &["show", "k"]);
    assert_eq!(shown["state"]["key"], "••• env:PAYMENTS_API_KEY");
    let text = stdout(&af(&path, &["show", "k"]));
    assert!(text.contains("••• env:PAYMENTS_API_KEY") && !text.contains("secretRef"), "{text}");
    let diff = af_json(&path, &["diff", "k", "0", "1"]);
    assert_eq!(diff["changed"][0]["to"], "••• env:PAYMENTS_API_KEY", "{diff}");
}

/// Shaped like an Anthropic key; made up.
const KEY: &str = "sk-ant-api03-Zk9fJ2mQ8xL5vN7cB1zR4tW6yH0sA9eG2uP5iO8tY3rE7wQ-aB";

#[test]
fn update_refuses_a_credential_and_writes_nothing() {
    let path = seeded("cli-secrets-update");
    let before = af_json(&path, &["history", "k"]);
    for (set, says) in [
        (format!(r#"{{"note": "use {KEY} for billing"}}"#), "`/note` looks like an Anthropic API key"),
        (format!(r#"{{"note": "x", "{KEY}": 1}}"#), "`[redacted Anthropic API key]` is not a field"),
    ] {
        let out = af(&path, &["update", "k", "--set", &set, "--as", "ops"]);
        expect_refusal(&out, 2, says);
        assert!(!stderr(&out).contains(KEY) && !stdout(&out).contains(KEY), "{}", stderr(&out));
    }
    let out = af(&path, &["update", "k", "--set", &format!(r#"{{"note": "{KEY}"}}"#), "--as", "ops"]);
    expect_refusal(&out, 2, "the update was not written");
    assert_eq!(af_json(&path, &["history", "k"]), before, "nothing was written");
    let bytes = std::fs::read(&path).unwrap();
    assert!(!bytes.windows(7).any(|w| w == b"sk-ant-"), "the key reached the store file");
    // A clean value is written.
    af_json(&path, &["update", "k", "--set", r#"{"note": "billing key rotated"}"#, "--as", "ops"]);
    assert_eq!(af_json(&path, &["show", "k"])["state"]["note"], "billing key rotated");
}
