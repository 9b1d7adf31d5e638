//! Keeps the README and the guides honest: the README stays short, every guide has Rust that
//! `cargo test` compiles (through the root library, `src/lib.rs`), no block is `ignore`d,
//! relative links resolve, the tests the guarantees name exist, and no text names design
//! notes by number.

mod markdown;

use std::path::{Path, PathBuf};

use markdown::{fences, first_rust_block_shown, has_word, links, names_a_numbered_seed, paragraphs};

const README_MAX_LINES: usize = 200;
const PARAGRAPH_MAX_CHARS: usize = 600;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// The files under `dir` (recursively) whose name ends with `ext`, sorted.
fn files_under(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.to_string_lossy().ends_with(ext) {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The guides: every Markdown file of `docs/guides` but its index.
fn guides() -> Vec<PathBuf> {
    let guides: Vec<PathBuf> = files_under(&root().join("docs/guides"), ".md")
        .into_iter()
        .filter(|p| p.file_name().is_some_and(|n| n != "README.md"))
        .collect();
    assert!(guides.len() >= 10, "the guides under docs/guides were not found");
    guides
}

fn shown(path: &Path) -> String {
    path.strip_prefix(root()).unwrap_or(path).display().to_string()
}

fn assert_none(problems: Vec<String>, what: &str) {
    assert!(problems.is_empty(), "{what}:\n  {}", problems.join("\n  "));
}

#[test]
fn the_readme_is_at_most_200_lines_with_short_paragraphs() {
    let text = read(&root().join("README.md"));
    let lines = text.lines().count();
    assert!(lines <= README_MAX_LINES, "README.md has {lines} lines; at most {README_MAX_LINES}");
    let long: Vec<String> = paragraphs(&text)
        .into_iter()
        .filter(|(_, p)| p.chars().count() > PARAGRAPH_MAX_CHARS)
        .map(|(line, p)| format!("README.md:{line}: {} characters", p.chars().count()))
        .collect();
    assert_none(long, "README paragraphs over 600 characters (move the detail to a guide)");
}

#[test]
fn every_guide_has_a_compiled_rust_block() {
    let problems =
        guides().into_iter().filter(|g| !fences(&read(g)).iter().any(|f| f.builds())).map(|g| shown(&g)).collect();
    assert_none(problems, "guides without a Rust block that compiles (compile_fail alone is not enough)");
}

/// The README's walkthrough is not compiled itself: it must be the compiled block of the
/// durable-runs guide, as shown there (hidden lines aside).
#[test]
fn the_readme_walkthrough_is_the_compiled_one() {
    let readme = read(&root().join("README.md"));
    let at = readme.find("## Your first durable agent").expect("the README has its walkthrough");
    let shown = first_rust_block_shown(&readme[at..]).expect("the walkthrough has a Rust block");
    let guide = read(&root().join("docs/guides/durable-runs.md"));
    let same =
        guide.match_indices("```rust").any(|(i, _)| first_rust_block_shown(&guide[i..]).as_ref() == Some(&shown));
    assert!(
        same,
        "the README's walkthrough differs from every Rust block of docs/guides/durable-runs.md; \
         change both together (the guide's copy is the one that compiles)"
    );
}

#[test]
fn every_guide_is_compiled_by_the_root_library() {
    let lib = read(&root().join("src/lib.rs"));
    let problems = guides()
        .into_iter()
        .filter_map(|g| {
            let name = g.file_name()?.to_string_lossy().into_owned();
            let include = format!("#[doc = include_str!(\"../docs/guides/{name}\")]");
            let included = lib.lines().any(|l| l.trim() == include);
            (!included).then(|| format!("{} (add `{include}` to src/lib.rs)", shown(&g)))
        })
        .collect();
    assert_none(problems, "guides whose Rust blocks no doctest compiles");
}

#[test]
fn no_markdown_block_is_ignored() {
    let mut files = files_under(&root().join("docs"), ".md");
    files.push(root().join("README.md"));
    let mut problems = Vec::new();
    for file in files {
        for fence in fences(&read(&file)).iter().filter(|f| f.is_ignored()) {
            problems.push(format!("{}:{}: ```{}", shown(&file), fence.line, fence.info));
        }
    }
    assert_none(problems, "ignored blocks (use no_run, or tag the language: sh, toml, text)");
}

#[test]
fn relative_links_resolve() {
    let mut files = files_under(&root().join("docs"), ".md");
    for name in ["README.md", "ARCHITECTURE.md", "CHANGELOG.md", "BENCHMARKS.md"] {
        files.push(root().join(name));
    }
    files.extend(crate_readmes());
    let mut problems = Vec::new();
    for file in files {
        let dir = file.parent().expect("a file has a folder");
        for (line, target) in links(&read(&file)) {
            let path = target.split('#').next().unwrap_or("");
            let external = ["http://", "https://", "mailto:"].iter().any(|p| target.starts_with(p));
            if external || path.is_empty() {
                continue;
            }
            if !dir.join(path).exists() {
                problems.push(format!("{}:{line}: {target}", shown(&file)));
            }
        }
    }
    assert_none(problems, "relative links to nothing");
}

/// `path.rs::name` in the guarantees guide: a test function `name` in the file `path.rs`.
#[test]
fn the_tests_the_guarantees_name_exist() {
    let text = read(&root().join("docs/guides/guarantees.md"));
    let mut named = 0;
    let mut problems = Vec::new();
    for (i, code) in text.split('`').enumerate() {
        let Some((file, name)) = code.split_once(".rs::").filter(|_| i % 2 == 1) else { continue };
        named += 1;
        let path = root().join(format!("{file}.rs"));
        if !path.exists() {
            problems.push(format!("{code}: no file {file}.rs"));
        } else if !is_a_test(&read(&path), name) {
            problems.push(format!("{code}: no test `fn {name}` in {file}.rs"));
        }
    }
    assert!(named >= 20, "only {named} tests named in guarantees.md");
    assert_none(problems, "tests named in docs/guides/guarantees.md that do not exist");
}

/// Whether `source` defines `fn name(` under a `#[test]` or `#[tokio::test(..)]` attribute
/// (outside a comment).
fn is_a_test(source: &str, name: &str) -> bool {
    let lines: Vec<&str> = source.lines().collect();
    let needle = format!("fn {name}(");
    lines.iter().enumerate().any(|(i, line)| {
        let code = line.trim_start();
        if code.starts_with("//") || !code.contains(&needle) {
            return false;
        }
        lines[i.saturating_sub(4)..i].iter().any(|l| {
            let l = l.trim_start();
            l.starts_with("#[test]") || l.starts_with("#[tokio::test")
        })
    })
}

/// The READMEs the crates ship to crates.io.
fn crate_readmes() -> Vec<PathBuf> {
    ["agentflow", "agentflow-macros", "agentflow-store"].iter().map(|c| root().join(c).join("README.md")).collect()
}

#[test]
fn a_named_test_must_be_a_test() {
    let source = "fn helper() {}\n// fn gone() {}\n#[tokio::test]\nasync fn real() {}\n";
    assert!(is_a_test(source, "real"));
    assert!(!is_a_test(source, "helper"));
    assert!(!is_a_test(source, "gone"));
}

#[test]
fn no_text_names_design_notes_by_number() {
    let mut problems = Vec::new();
    let mut markdown = files_under(&root().join("docs"), ".md");
    for name in ["README.md", "ARCHITECTURE.md", "BENCHMARKS.md", "CHANGELOG.md"] {
        markdown.push(root().join(name));
    }
    markdown.extend(crate_readmes());
    for file in markdown {
        for (i, line) in read(&file).lines().enumerate() {
            if has_word(line, "seed") {
                problems.push(format!("{}:{}: {line}", shown(&file), i + 1));
            }
        }
    }
    let crates = ["agentflow/src", "agentflow-macros/src", "agentflow-store/src"];
    let code = ["agentflow/src", "agentflow-macros/src", "agentflow-store/src", "tests", "examples", "benches"];
    for dir in code {
        // This check's own cases name what it looks for.
        for file in
            files_under(&root().join(dir), ".rs").into_iter().filter(|f| !f.starts_with(root().join("tests/docs")))
        {
            let in_crate = crates.iter().any(|c| file.starts_with(root().join(c)));
            for (i, line) in read(&file).lines().enumerate() {
                let trimmed = line.trim_start();
                let doc = trimmed.starts_with("///") || trimmed.starts_with("//!");
                if names_a_numbered_seed(line) || (in_crate && doc && has_word(line, "seed")) {
                    problems.push(format!("{}:{}: {}", shown(&file), i + 1, trimmed));
                }
            }
        }
    }
    assert_none(problems, "design notes named by number (say what the feature does instead)");
}
