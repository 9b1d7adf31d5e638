//! The house rules of the sources, read from the code: no import circles between files
//! (`imports`), the layers of `agentflow/src` in the order `ARCHITECTURE.md` gives (`layers`),
//! and the file rules every library file keeps (`files`).

mod files;
mod imports;
mod layers;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use imports::{Crate, load, report, root, strip};

#[test]
fn agentflow_src_has_no_circular_imports_between_files() {
    let krate = load("agentflow", &root().join("agentflow/src"));
    assert!(krate.files.len() > 20, "found the sources");
    let cycles = report(&krate);
    assert!(cycles.is_empty(), "circular imports:\n{cycles}");
}

#[test]
fn agentflow_store_src_has_no_circular_imports_between_files() {
    let krate = load("agentflow-store", &root().join("agentflow-store/src"));
    assert!(krate.files.len() > 5, "found the sources");
    let cycles = report(&krate);
    assert!(cycles.is_empty(), "circular imports:\n{cycles}");
}

#[test]
fn the_checker_finds_a_two_file_circle_and_follows_re_exports() {
    let mut files = BTreeMap::new();
    let file = |p: &str, t: &str| (PathBuf::from(p), strip(t));
    files.insert(vec![], file("lib.rs", "mod a; mod b; mod c; pub use c::Thing;"));
    files.insert(vec!["a".into()], file("a.rs", "use crate::b::B; pub struct A;"));
    files.insert(vec!["b".into()], file("b.rs", "use crate::{a::A, Thing}; pub struct B;"));
    files.insert(vec!["c".into()], file("c.rs", "// use crate::a::A;\npub struct Thing;"));
    let krate = Crate { name: "fixture", files };
    let edges = krate.edges();
    assert!(edges[&vec!["b".to_string()]].contains(&vec!["c".to_string()]), "Thing is defined in c.rs: {edges:?}");
    assert_eq!(krate.cycles(), vec![vec!["a.rs".to_string(), "b.rs".to_string()]]);
}

/// A `macro_rules!` body is expanded in the caller's module: its
/// `use super::*;` and `$crate::` paths are the caller's imports, not the
/// defining file's.
#[test]
fn the_checker_does_not_count_a_macro_body_as_an_import_of_its_file() {
    let mut files = BTreeMap::new();
    let file = |p: &str, t: &str| (PathBuf::from(p), strip(t));
    files.insert(vec![], file("lib.rs", "pub mod kit;"));
    files.insert(vec!["kit".into()], file("kit/mod.rs", "pub mod agent; pub use agent::Agent;"));
    files.insert(
        vec!["kit".into(), "agent".into()],
        file(
            "kit/agent.rs",
            "pub struct Agent;\nmacro_rules! agent { ($n:ident) => { mod $n { use super::*; type A = $crate::kit::Agent; } }; }\npub struct After;",
        ),
    );
    let krate = Crate { name: "fixture", files };
    assert!(
        krate.files[&vec!["kit".to_string(), "agent".to_string()]].1.contains("pub struct After"),
        "code after the macro is kept"
    );
    assert!(krate.cycles().is_empty(), "{:?}", krate.edges());
}

/// `use crate::kit::{A}` imports the file defining `A`, not `kit/mod.rs`
/// that re-exports it.
#[test]
fn the_checker_follows_a_use_list_to_the_defining_file_only() {
    let mut files = BTreeMap::new();
    let file = |p: &str, t: &str| (PathBuf::from(p), strip(t));
    files.insert(vec![], file("lib.rs", "pub mod kit; pub mod user;"));
    files.insert(vec!["kit".into()], file("kit/mod.rs", "mod a; pub use a::A;"));
    files.insert(vec!["kit".into(), "a".into()], file("kit/a.rs", "pub struct A;"));
    files.insert(vec!["user".into()], file("user.rs", "use crate::kit::{A};"));
    let krate = Crate { name: "fixture", files };
    let edges = krate.edges();
    let kit_a = BTreeSet::from([vec!["kit".to_string(), "a".to_string()]]);
    assert_eq!(edges[&vec!["user".to_string()]], kit_a);
}

#[test]
#[ignore = "prints the edges, for working on a cycle"]
fn print_edges() {
    let krate = load("agentflow", &root().join("agentflow/src"));
    for (from, to) in krate.edges() {
        let to: Vec<_> = to.iter().map(|t| t.join("::")).collect();
        println!("{} -> {}", from.join("::"), to.join(", "));
    }
}
