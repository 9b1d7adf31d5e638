//! Reading Markdown the way the checks need it: fenced blocks, paragraphs, links.

/// A fenced code block: its info string (`rust,no_run`, `sh`, empty) and the line it opens at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    pub info: String,
    pub line: usize,
}

impl Fence {
    /// Whether rustdoc compiles the block: an untagged or `rust` block, not `ignore`d and not
    /// of another language.
    pub fn is_compiled_rust(&self) -> bool {
        let mut tags = self.info.split(',').map(str::trim).filter(|t| !t.is_empty());
        let Some(first) = tags.next() else { return true };
        let known = ["rust", "no_run", "should_panic", "compile_fail"];
        if !known.contains(&first) && !first.starts_with("edition") {
            return false;
        }
        !self.is_ignored() && self.info.split(',').map(str::trim).all(|t| t != "text")
    }

    /// Whether the block is compiled and expected to build: compiled Rust, not `compile_fail`.
    pub fn builds(&self) -> bool {
        self.is_compiled_rust() && self.info.split(',').map(str::trim).all(|t| t != "compile_fail")
    }

    /// Whether the block is tagged `ignore` (alone or among other tags).
    pub fn is_ignored(&self) -> bool {
        self.info.split(',').map(str::trim).any(|t| t == "ignore" || t.starts_with("ignore-"))
    }
}

/// One line of a Markdown file, with whether it is inside a fenced block.
struct Line<'a> {
    number: usize,
    text: &'a str,
    fenced: bool,
}

fn fence_marker(text: &str) -> Option<&str> {
    let trimmed = text.trim_start();
    trimmed.strip_prefix("```").or_else(|| trimmed.strip_prefix("~~~"))
}

fn lines(text: &str) -> Vec<Line<'_>> {
    let mut out = Vec::new();
    let mut fenced = false;
    for (i, text) in text.lines().enumerate() {
        if fence_marker(text).is_some() {
            out.push(Line { number: i + 1, text, fenced: true });
            fenced = !fenced;
        } else {
            out.push(Line { number: i + 1, text, fenced });
        }
    }
    out
}

/// The fenced blocks of a file, in order.
pub fn fences(text: &str) -> Vec<Fence> {
    let mut out = Vec::new();
    let mut open = false;
    for (i, line) in text.lines().enumerate() {
        if let Some(info) = fence_marker(line) {
            if !open {
                out.push(Fence { info: info.trim().to_string(), line: i + 1 });
            }
            open = !open;
        }
    }
    out
}

/// The paragraphs outside fenced blocks and tables, as (first line, text joined by spaces).
/// A heading, a blank line, a fence, a table row or the start of a list item ends one.
pub fn paragraphs(text: &str) -> Vec<(usize, String)> {
    let mut out: Vec<(usize, String)> = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for line in lines(text) {
        let trimmed = line.text.trim();
        let breaks = line.fenced || trimmed.is_empty() || trimmed.starts_with('|') || trimmed.starts_with('#');
        let item = is_list_item(trimmed);
        if breaks || item {
            out.extend(current.take());
        }
        if breaks {
            continue;
        }
        match &mut current {
            Some((_, para)) => {
                para.push(' ');
                para.push_str(trimmed);
            }
            None => current = Some((line.number, trimmed.to_string())),
        }
    }
    out.extend(current);
    out
}

fn is_list_item(trimmed: &str) -> bool {
    if trimmed.starts_with("- ") || trimmed.starts_with("* ") || trimmed.starts_with("+ ") {
        return true;
    }
    let digits = trimmed.chars().take_while(char::is_ascii_digit).count();
    digits > 0 && trimmed[digits..].starts_with(". ")
}

/// The targets of the Markdown links and images outside fenced blocks and inline code,
/// as (line, target).
pub fn links(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for line in lines(text) {
        if line.fenced {
            continue;
        }
        let prose = without_inline_code(line.text);
        let mut rest = prose.as_str();
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let Some(end) = rest.find(')') else { break };
            let target = rest[..end].split_whitespace().next().unwrap_or("");
            out.push((line.number, target.to_string()));
            rest = &rest[end..];
        }
    }
    out
}

fn without_inline_code(text: &str) -> String {
    let mut out = String::new();
    for (i, part) in text.split('`').enumerate() {
        if i % 2 == 0 {
            out.push_str(part);
        }
    }
    out
}

/// Whether `text` holds `word` as a whole word, ignoring case.
pub fn has_word(text: &str, word: &str) -> bool {
    text.split(|c: char| !c.is_alphanumeric()).any(|w| w.eq_ignore_ascii_case(word))
}

/// Whether `text` names a numbered design note: the word followed by a number.
pub fn names_a_numbered_seed(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    lower.match_indices("seed").any(|(at, _)| {
        let before = lower[..at].chars().next_back();
        let after = lower[at + 4..].trim_start_matches([' ', '-', '_', '#']);
        !before.is_some_and(char::is_alphanumeric) && after.starts_with(|c: char| c.is_ascii_digit())
    })
}

#[test]
fn fences_are_told_apart() {
    let text = "```rust\na\n```\n```\nb\n```\n```rust,no_run\nc\n```\n```sh\nd\n```\n```rust,ignore\ne\n```\n```text\nf\n```\n";
    let compiled: Vec<bool> = fences(text).iter().map(Fence::is_compiled_rust).collect();
    assert_eq!(compiled, [true, true, true, false, false, false]);
    let ignored: Vec<bool> = fences(text).iter().map(Fence::is_ignored).collect();
    assert_eq!(ignored, [false, false, false, false, true, false]);
    assert_eq!(fences(text)[2].line, 7);
    let fail = fences("```rust,compile_fail\nx\n```\n");
    assert!(fail[0].is_compiled_rust() && !fail[0].builds());
}

/// The lines of the first fenced block tagged `rust` (with any further tags), without the
/// lines rustdoc hides (`# ...`).
pub fn first_rust_block_shown(text: &str) -> Option<Vec<String>> {
    let mut inside = false;
    let mut out = Vec::new();
    for line in text.lines() {
        match fence_marker(line) {
            Some(info) if !inside && info.trim().split(',').next() == Some("rust") => inside = true,
            Some(_) if inside => return Some(out),
            _ if inside => {
                let hidden = line.trim_start() == "#" || line.trim_start().starts_with("# ");
                if !hidden {
                    out.push(line.trim_end().to_string());
                }
            }
            _ => {}
        }
    }
    None
}

#[test]
fn paragraphs_skip_code_and_tables_and_split_list_items() {
    let long = "word ".repeat(200);
    let text =
        format!("# Title\n\nfirst line\nsecond line\n\n```rust\n{long}\n```\n| {long} |\n- one\n- two\n  more\n");
    let paras = paragraphs(&text);
    let texts: Vec<&str> = paras.iter().map(|(_, p)| p.as_str()).collect();
    assert_eq!(texts, ["first line second line", "- one", "- two more"]);
    assert_eq!(paras[0].0, 3);
}

#[test]
fn links_skip_code() {
    let text = "see [a](docs/a.md#x) and `[b](nope.md)` and ![c](img.png \"title\")\n```\n[d](inside.md)\n```\n";
    let targets: Vec<String> = links(text).into_iter().map(|(_, t)| t).collect();
    assert_eq!(targets, ["docs/a.md#x", "img.png"]);
}

#[test]
fn the_word_is_found_whole_and_numbered() {
    assert!(has_word("Topic (Seed 7)", "seed"));
    assert!(!has_word("a generator seeded per call", "seed"));
    assert!(names_a_numbered_seed("see seed 3's text"));
    assert!(names_a_numbered_seed("see seed-12"));
    assert!(!names_a_numbered_seed("the seed is printed"));
    assert!(!names_a_numbered_seed("AGENTFLOW_CRASH_SEED=7"));
}
