//! The layers of `agentflow/src`: each top-level module sits in one layer and imports only
//! modules of its own layer or below; the list stands in `ARCHITECTURE.md` too.

use std::collections::{BTreeMap, BTreeSet};

use super::imports::{Crate, circles, load, root};

/// The layers of `agentflow/src`, lowest first, each with its top-level modules. The same
/// list stands in `ARCHITECTURE.md`, top first (a test compares them).
pub(crate) const LAYERS: &[(&str, &[&str])] = &[
    ("core", &["core"]),
    ("access", &["access"]),
    (
        "capabilities",
        &[
            "tool",
            "model",
            "back_pressure",
            "in_flight",
            "breaker",
            "serve_limits",
            "probe",
            "secret",
            "mcp_client",
            "telemetry",
            "otel",
        ],
    ),
    ("pauses", &["interrupt", "answer_error", "metrics"]),
    ("durable", &["durable", "persist", "schedule", "release"]),
    ("outcomes", &["outcome", "event", "stream"]),
    ("saga", &["saga"]),
    ("approval", &["approval"]),
    ("ctx", &["ctx"]),
    ("graph", &["graph", "describe"]),
    ("run", &["run", "subgraph"]),
    ("app", &["app", "error"]),
    ("worker", &["worker", "timer", "webhook"]),
    ("kits", &["prebuilt", "testing", "__private", "mcp_server"]),
    ("server", &["server"]),
];

/// The top-level module of a file's module path (`["durable", "lease"]` -> `durable`); the
/// crate root and the binary (a crate of its own) have none.
fn top(module: &[String]) -> Option<&str> {
    module.first().map(String::as_str).filter(|m| *m != "bin")
}

/// Top-level module -> the top-level modules its files import, with one file import each
/// (`from -> to`) as the evidence.
pub(crate) fn module_edges(krate: &Crate) -> BTreeMap<String, BTreeMap<String, String>> {
    let mut out: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let path = |m: &Vec<String>| krate.files[m].0.display().to_string();
    for (from, to) in krate.edges() {
        let Some(a) = top(&from) else { continue };
        for t in &to {
            let Some(b) = top(t) else { continue };
            if a != b {
                out.entry(a.to_string())
                    .or_default()
                    .entry(b.to_string())
                    .or_insert_with(|| format!("{} -> {}", path(&from), path(t)));
            }
        }
        out.entry(a.to_string()).or_default();
    }
    out
}

/// Every group of top-level modules that import each other in a circle.
fn module_cycles(edges: &BTreeMap<String, BTreeMap<String, String>>) -> Vec<Vec<String>> {
    let targets: BTreeMap<String, BTreeSet<String>> =
        edges.iter().map(|(a, to)| (a.clone(), to.keys().cloned().collect())).collect();
    circles(&targets)
}

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|(_, modules)| modules.contains(&module))
}

/// The circles of top-level modules in a crate's sources, each with the imports that close it.
fn module_circles_of(name: &'static str, src: &str) -> Vec<String> {
    let krate = load(name, &root().join(src));
    let edges = module_edges(&krate);
    module_cycles(&edges)
        .iter()
        .map(|g| {
            let inside: Vec<&String> =
                g.iter().flat_map(|a| edges[a].iter().filter(|(b, _)| g.contains(b)).map(|(_, why)| why)).collect();
            format!("  {}: {inside:?}", g.join(" <-> "))
        })
        .collect()
}

#[test]
fn agentflow_src_top_level_modules_import_each_other_in_no_circle() {
    let described = module_circles_of("agentflow", "agentflow/src");
    assert!(described.is_empty(), "top-level modules in a circle:\n{}", described.join("\n"));
}

#[test]
fn agentflow_store_src_top_level_modules_import_each_other_in_no_circle() {
    let described = module_circles_of("agentflow-store", "agentflow-store/src");
    assert!(described.is_empty(), "top-level modules in a circle:\n{}", described.join("\n"));
}

/// The checker sees a circle of top-level modules that no file circle shows (`a/x.rs -> b.rs
/// -> a/y.rs`).
#[test]
fn the_checker_finds_a_circle_of_modules_through_different_files() {
    use std::collections::BTreeMap as Map;
    use std::path::PathBuf;
    let mut files = Map::new();
    let file = |p: &str, t: &str| (PathBuf::from(p), super::strip(t));
    files.insert(vec![], file("lib.rs", "mod a; mod b;"));
    files.insert(vec!["a".into()], file("a/mod.rs", "mod x; mod y; pub struct A;"));
    files.insert(vec!["a".into(), "x".into()], file("a/x.rs", "use crate::b::B;"));
    files.insert(vec!["a".into(), "y".into()], file("a/y.rs", "pub struct Y;"));
    files.insert(vec!["b".into()], file("b.rs", "pub struct B; fn f() -> crate::a::y::Y { todo!() }"));
    let krate = Crate { name: "fixture", files };
    assert!(krate.cycles().is_empty(), "no circle of files");
    assert_eq!(module_cycles(&module_edges(&krate)), vec![vec!["a".to_string(), "b".to_string()]]);
}

#[test]
fn agentflow_src_imports_run_down_the_layers() {
    let krate = load("agentflow", &root().join("agentflow/src"));
    let edges = module_edges(&krate);
    let unplaced: Vec<&String> = edges.keys().filter(|m| layer_of(m).is_none()).collect();
    assert!(unplaced.is_empty(), "top-level modules in no layer of `LAYERS`: {unplaced:?}");
    let mut upward = Vec::new();
    for (a, to) in &edges {
        for (b, why) in to {
            if layer_of(b) > layer_of(a) {
                upward.push(format!("{a} -> {b} ({why})"));
            }
        }
    }
    assert!(
        upward.is_empty(),
        "{} imports run from a lower layer up to a higher one:\n  {}",
        upward.len(),
        upward.join("\n  ")
    );
}

#[test]
fn core_imports_no_runtime_store_app_or_ctx() {
    let krate = load("agentflow", &root().join("agentflow/src"));
    let words = ["tokio", "Store", "App", "Ctx"];
    let mut found = Vec::new();
    for (module, (path, text)) in &krate.files {
        if top(module) != Some("core") {
            continue;
        }
        for word in words {
            let named = text.match_indices(word).any(|(at, _)| {
                let before = text[..at].chars().next_back().is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
                let after = text[at + word.len()..].chars().next().is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
                before && after
            });
            if named {
                found.push(format!("{} names `{word}`", path.display()));
            }
        }
    }
    assert!(krate.files.keys().any(|m| top(m) == Some("core")), "found core/");
    assert!(
        found.is_empty(),
        "core/ is vocabulary without a runtime, a store, an App or a Ctx:\n  {}",
        found.join("\n  ")
    );
}

/// The layers as `ARCHITECTURE.md` lists them: the rows of the table under `## Layers`, top
/// first, each with the modules named in its second column.
fn documented_layers() -> Vec<(String, Vec<String>)> {
    let text = std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("read ARCHITECTURE.md");
    let section = text.split("\n## ").find(|s| s.starts_with("Layers")).expect("a `## Layers` section");
    section
        .lines()
        .filter(|l| l.starts_with('|') && !l.starts_with("|---") && !l.starts_with("| layer"))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let modules = cells[2].split('`').skip(1).step_by(2).map(|m| m.trim_end_matches('/').to_string()).collect();
            (cells[1].trim_matches('*').to_string(), modules)
        })
        .collect()
}

#[test]
fn architecture_md_lists_the_layers_of_the_test() {
    let documented = documented_layers();
    let expected: Vec<(String, Vec<String>)> = LAYERS
        .iter()
        .rev()
        .map(|(name, modules)| (name.to_string(), modules.iter().map(|m| m.to_string()).collect()))
        .collect();
    assert_eq!(documented, expected, "ARCHITECTURE.md's `## Layers` table, top first, against `LAYERS`");
}

#[test]
#[ignore = "prints the top-level module imports, for working on the layers"]
fn print_module_edges() {
    let krate = load("agentflow", &root().join("agentflow/src"));
    for (a, to) in module_edges(&krate) {
        let la = layer_of(&a);
        for (b, why) in to {
            let mark = if layer_of(&b) > la { "UP " } else { "   " };
            println!("{mark}{a} -> {b}   {why}");
        }
    }
}
