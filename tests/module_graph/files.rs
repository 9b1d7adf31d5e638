//! The rules every source file of the three crates keeps: under 700 lines, a `//!` line naming
//! its concept first, no `include!` or `#[path]`; every `impl App` under `app/` and every
//! `impl Ctx` under `ctx/`; the map-reduce instance key built in one place; and each "where does
//! this live" answer of `ARCHITECTURE.md` pointing at a file that defines the item.

use std::path::{Path, PathBuf};

use super::imports::root;

/// The source roots the rules cover.
const SOURCES: &[&str] = &["agentflow/src", "agentflow-store/src", "agentflow-macros/src"];

/// The most lines a source file may have (a file holding only unit tests aside).
const MAX_LINES: usize = 700;

/// Every `.rs` file under `dir`, with its path relative to the repository.
fn rust_files(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read a source dir") {
            let path = entry.expect("a dir entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).expect("read a source file");
                out.push((path.strip_prefix(root()).expect("under the repository").to_path_buf(), text));
            }
        }
    }
    out.sort();
    out
}

fn all_sources() -> Vec<(PathBuf, String)> {
    SOURCES.iter().flat_map(|s| rust_files(&root().join(s))).collect()
}

/// The lines that are code: not comments (so docs may mention `include!`).
fn code_lines(text: &str) -> impl Iterator<Item = &str> {
    text.lines().filter(|l| !l.trim_start().starts_with("//"))
}

#[test]
fn every_source_file_is_short_and_opens_with_a_line_naming_its_concept() {
    let files = all_sources();
    assert!(files.len() > 100, "found the sources: {}", files.len());
    let mut broken = Vec::new();
    for (path, text) in &files {
        let lines = text.lines().count();
        if lines > MAX_LINES && !path.ends_with("tests.rs") {
            broken.push(format!("{}: {lines} lines (at most {MAX_LINES})", path.display()));
        }
        if !text.starts_with("//!") {
            broken.push(format!("{}: does not open with a `//!` line", path.display()));
        }
        if code_lines(text).any(|l| l.contains("include!(") || l.contains("#[path")) {
            broken.push(format!("{}: `include!` or `#[path]` (declare a module instead)", path.display()));
        }
    }
    assert!(broken.is_empty(), "source files that break the house rules:\n  {}", broken.join("\n  "));
}

/// The type an `impl` line implements for (`impl<S> Trait for App<S>` -> `App<S>`), if the line
/// opens an impl block.
fn impl_target(line: &str) -> Option<&str> {
    let rest = line.strip_prefix("impl")?;
    let rest = match rest.strip_prefix('<') {
        Some(generics) => {
            let mut depth = 1;
            let end = generics.char_indices().find_map(|(i, c)| {
                match c {
                    '<' => depth += 1,
                    '>' => depth -= 1,
                    _ => {}
                }
                (depth == 0).then_some(i)
            })?;
            &generics[end + 1..]
        }
        None if rest.starts_with(' ') => rest,
        None => return None,
    };
    let head = rest.split('{').next()?.trim();
    Some(head.rsplit_once(" for ").map_or(head, |(_, ty)| ty).trim())
}

/// Where the `impl` blocks of `ty` (`App`, `Ctx`) stand outside `home`.
fn impls_outside(ty: &str, home: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (path, text) in rust_files(&root().join("agentflow/src")) {
        for (n, line) in text.lines().enumerate() {
            let Some(target) = impl_target(line) else { continue };
            let target = target.trim_start_matches("crate::").trim_start_matches("app::").trim_start_matches("ctx::");
            if target.starts_with(&format!("{ty}<")) && !path.starts_with(home) {
                out.push(format!("{}:{}: {line}", path.display(), n + 1));
            }
        }
    }
    out
}

#[test]
fn every_impl_app_lives_under_app_and_every_impl_ctx_under_ctx() {
    let app = impls_outside("App", "agentflow/src/app");
    assert!(app.is_empty(), "`impl App` blocks outside agentflow/src/app/:\n  {}", app.join("\n  "));
    let ctx = impls_outside("Ctx", "agentflow/src/ctx");
    assert!(ctx.is_empty(), "`impl Ctx` blocks outside agentflow/src/ctx/:\n  {}", ctx.join("\n  "));
}

#[test]
fn the_impl_reader_finds_inherent_and_trait_impls_and_nothing_else() {
    assert_eq!(impl_target("impl<S: State, D> App<S, D> {"), Some("App<S, D>"));
    assert_eq!(impl_target("impl<D> std::fmt::Debug for Ctx<'_, D> {"), Some("Ctx<'_, D>"));
    assert_eq!(impl_target("impl<'a, D> CtxParam<'a, D> for &'a Ctx<'a, D> {"), Some("&'a Ctx<'a, D>"));
    assert_eq!(impl_target("impl Default for Gateway {"), Some("Gateway"));
    assert_eq!(impl_target("impls_outside(\"App\")"), None);
}

#[test]
fn a_map_instance_key_is_built_in_one_place() {
    let mut built = Vec::new();
    for (path, text) in rust_files(&root().join("agentflow/src")) {
        for (n, line) in code_lines(&text).enumerate() {
            if line.contains("\"{key}[{i}]\"") || line.contains("\"{}[{}]\", key") {
                built.push(format!("{}:{}", path.display(), n + 1));
            }
        }
    }
    assert_eq!(built.len(), 1, "the instance key `key[i]` is built at: {built:?}");
    assert!(built[0].starts_with("agentflow/src/core/instance_key.rs"), "{built:?}");
}

/// The answers of `ARCHITECTURE.md`'s `## Where things live` table: (question, file, item).
fn where_answers() -> Vec<(String, PathBuf, String)> {
    let text = std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("read ARCHITECTURE.md");
    let section =
        text.split("\n## ").find(|s| s.starts_with("Where things live")).expect("a `## Where things live` section");
    section
        .lines()
        .filter(|l| l.starts_with('|') && !l.starts_with("|---") && !l.starts_with("| question"))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let answer = cells[2].trim_matches('`');
            let (file, item) = answer.split_once(".rs::").expect("an answer `path.rs::item`");
            (cells[1].to_string(), PathBuf::from(format!("{file}.rs")), item.to_string())
        })
        .collect()
}

#[test]
fn architecture_md_answers_where_each_rule_lives_with_a_file_that_defines_it() {
    let answers = where_answers();
    assert!(answers.len() >= 6, "the six questions at least: {answers:?}");
    let mut wrong = Vec::new();
    for (question, file, item) in &answers {
        let Ok(text) = std::fs::read_to_string(root().join(file)) else {
            wrong.push(format!("{question}: no file {}", file.display()));
            continue;
        };
        let name = item.rsplit("::").next().unwrap_or(item);
        let defined = ["fn", "struct", "enum", "trait", "const", "type", "mod"].iter().any(|kind| {
            code_lines(&text).any(|l| {
                l.split_whitespace()
                    .collect::<Vec<_>>()
                    .windows(2)
                    .any(|w| w[0] == *kind && w[1].split(['<', '(', ':', ';', ' ']).next() == Some(name))
            })
        });
        if !defined {
            wrong.push(format!("{question}: {} does not define `{name}`", file.display()));
        }
    }
    assert!(wrong.is_empty(), "ARCHITECTURE.md points at the wrong place:\n  {}", wrong.join("\n  "));
}
