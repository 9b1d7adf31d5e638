//! How `RedbStore::open` treats the file it is pointed at: a new file is
//! created whole, an empty file is refused.

use crate::common;

use agentflow_store::conformance::{self, root};
use agentflow_store::{OpenError, RedbStore, Store};
use common::TempDir;

#[test]
fn an_empty_file_is_refused_not_turned_into_a_store() {
    let dir = TempDir::new("empty");
    let path = dir.file("store.redb");
    std::fs::write(&path, b"").unwrap();
    let err = RedbStore::open(&path).unwrap_err();
    assert!(matches!(err, OpenError::Empty { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains(&path.display().to_string()), "{message}");
    assert!(message.contains("the file is empty") && message.contains("delete the empty file"), "{message}");
    // Nothing was written to it.
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
    std::fs::remove_file(&path).unwrap();
    assert!(RedbStore::open(&path).is_ok());
}

#[test]
fn a_new_store_appears_whole_and_leaves_nothing_beside_it() {
    let dir = TempDir::new("create");
    let path = dir.file("store.redb");
    let store = RedbStore::open(&path).unwrap();
    conformance::commit(&store, root("t", 0, b"S"));
    store.close().unwrap();
    let names: Vec<String> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(names, ["store.redb"]);
    let store = RedbStore::open(&path).unwrap();
    assert_eq!(conformance::concat(&store.state_chain("t", 0).unwrap().unwrap()), b"S");
}

#[test]
fn a_missing_directory_is_an_io_error_naming_the_path() {
    let dir = TempDir::new("nodir");
    let path = dir.file("missing/store.redb");
    let err = RedbStore::open(&path).unwrap_err();
    assert!(matches!(err, OpenError::Io { .. }), "{err:?}");
    assert!(err.to_string().contains(&path.display().to_string()), "{err}");
}
