//! `agentflow` on a sealed store (encryption at rest): with `--key-store` and `--kek` it reads
//! states as on any store; without them it still lists the threads and their statuses, and
//! shows no state (what it reads is sealed); one of the two alone is a usage error, and a key
//! store that does not exist is not created.

use std::sync::Arc;

use agentflow::Store;
use agentflow::sealed::{FileKeyProvider, RedbKeyStore, SealedStore};
use agentflow_store::RedbStore;

use crate::access_fixture as fx;
use crate::cli_common::{af, stderr, stdout};
use crate::inbox_common::temp_dir;

#[test]
fn the_cli_opens_a_sealed_store_with_its_key_store_and_kek() {
    crate::inbox_common::runtime().block_on(async {
        let dir = temp_dir("cli-sealed");
        let (path, keys, kek) = (dir.join("store.redb"), dir.join("keys.redb"), dir.join("kek"));
        std::fs::write(&kek, format!("{}\n", "3c".repeat(32))).unwrap();
        {
            let sealed = SealedStore::new(
                RedbStore::open(&path).unwrap(),
                RedbKeyStore::open(&keys).unwrap(),
                FileKeyProvider::open(&kek).unwrap(),
            );
            fx::seed(Arc::new(sealed) as Arc<dyn Store>).await;
        }
        let key_store = keys.to_str().unwrap().to_string();
        let kek_arg = format!("file:{}", kek.display());
        let sealed_args = |rest: &[&str]| {
            let mut args = vec!["--key-store", key_store.as_str(), "--kek", kek_arg.as_str()];
            args.extend_from_slice(rest);
            args.into_iter().map(str::to_string).collect::<Vec<_>>()
        };
        let run = |args: &[String]| af(&path, &args.iter().map(String::as_str).collect::<Vec<_>>());

        let out = run(&sealed_args(&["--json", "show", "t-done"]));
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let shown: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
        assert_eq!(shown["state"]["order"], "O-t-done", "{shown}");

        // Without the keys: the ids and statuses, never the state.
        let out = af(&path, &["threads"]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert!(stdout(&out).contains("t-done") && stdout(&out).contains("completed"), "{}", stdout(&out));
        let out = af(&path, &["--json", "show", "t-done"]);
        assert!(!stdout(&out).contains("O-t-done") && !stderr(&out).contains("O-t-done"), "{}", stdout(&out));

        let missing = dir.join("no-such-keys.redb");
        let out = af(&path, &["--key-store", missing.to_str().unwrap(), "--kek", &kek_arg, "threads"]);
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        assert!(stderr(&out).contains("no such key store") && !missing.exists(), "{}", stderr(&out));

        let out = af(&path, &["--key-store", &key_store, "threads"]);
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        assert!(stderr(&out).contains("--kek"), "{}", stderr(&out));
    });
}
