//! Fixtures defined once: the test sources open redb store files, set up PostgreSQL (its URL and
//! fresh schemas) and define the refund subgraph only in `tests/support`; every other test file
//! and example calls those.
//!
//! `examples/` are user-facing demos that open their own store file, so the redb check covers
//! `tests/` only; the PostgreSQL and refund-subgraph checks cover `tests/` and `examples/`.

use std::path::{Path, PathBuf};

/// A definition (or a direct call) that only `tests/support` may have.
struct Rule {
    what: &'static str,
    /// Where a file has it: the line numbers (1-based).
    find: fn(&str) -> Vec<usize>,
    /// Whether `examples/` is checked too.
    in_examples: bool,
    /// How many `tests/support` holds: the one definition the others use.
    in_support: usize,
}

/// The lines of `text` that contain `needle`.
fn lines_with(text: &str, needle: &str) -> Vec<usize> {
    text.lines().enumerate().filter(|(_, l)| l.contains(needle)).map(|(i, _)| i + 1).collect()
}

/// Direct calls that open a redb file (the needle is split so this file does not match itself).
fn redb_opens(text: &str) -> Vec<usize> {
    lines_with(text, &["RedbStore::", "open("].concat())
}

fn pg_url_fns(text: &str) -> Vec<usize> {
    lines_with(text, &["fn pg", "_url("].concat())
}

fn fresh_schema_fns(text: &str) -> Vec<usize> {
    lines_with(text, &["fn fresh", "_schema("].concat())
}

/// `#[graph(..)]` modules named `payer`: the refund subgraph a support case runs.
fn refund_subgraphs(text: &str) -> Vec<usize> {
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let is_payer = |line: &str| {
        let rest = line.strip_prefix("pub ").unwrap_or(line);
        rest.strip_prefix("mod payer")
            .is_some_and(|after| !after.starts_with(|c: char| c.is_alphanumeric() || c == '_'))
    };
    (0..lines.len())
        .filter(|&i| is_payer(lines[i]))
        .filter(|&i| {
            // The attributes and doc comments right above the module.
            let above = lines[..i].iter().rev().take_while(|l| l.starts_with("#[") || l.starts_with("///"));
            above.into_iter().any(|l| l.starts_with("#[graph("))
        })
        .map(|i| i + 1)
        .collect()
}

const RULES: [Rule; 4] = [
    Rule { what: "a direct `RedbStore::open` call", find: redb_opens, in_examples: false, in_support: 1 },
    Rule { what: "a `pg_url` definition", find: pg_url_fns, in_examples: true, in_support: 1 },
    Rule { what: "a `fresh_schema` definition", find: fresh_schema_fns, in_examples: true, in_support: 1 },
    Rule {
        what: "the refund subgraph (`#[graph] mod payer`)",
        find: refund_subgraphs,
        in_examples: true,
        in_support: 1,
    },
];

/// Every `.rs` file under `dir`, in a stable order.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn database_setup_and_the_refund_subgraph_are_defined_only_in_tests_support() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let support = root.join("tests").join("support");
    let (mut tests, mut examples) = (Vec::new(), Vec::new());
    rust_files(&root.join("tests"), &mut tests);
    rust_files(&root.join("examples"), &mut examples);
    assert!(tests.len() > 50 && !examples.is_empty(), "the sources were not found under {}", root.display());
    let mut offenders = Vec::new();
    for rule in &RULES {
        let mut in_support = 0;
        let files = tests.iter().chain(if rule.in_examples { &examples[..] } else { &[] });
        for file in files {
            let found = (rule.find)(&std::fs::read_to_string(file).unwrap());
            if file.starts_with(&support) {
                in_support += found.len();
            } else {
                let shown = file.strip_prefix(&root).unwrap().display().to_string();
                offenders.extend(found.into_iter().map(|line| format!("{shown}:{line}: {}", rule.what)));
            }
        }
        assert_eq!(in_support, rule.in_support, "tests/support should hold {} once", rule.what);
    }
    assert!(offenders.is_empty(), "move these into tests/support and call them from there:\n{}", offenders.join("\n"));
}
