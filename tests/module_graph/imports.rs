//! The file-level import graph of a crate, read from its sources: `use` paths (`crate::`,
//! `super::`, `self::`, child modules) and inline `crate::`, `super::` and `self::` paths,
//! each followed through `use` re-exports to the file that defines the item.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One crate's files: module path (`["persist", "error"]`) -> source.
pub(crate) struct Crate {
    pub(crate) name: &'static str,
    pub(crate) files: BTreeMap<Vec<String>, (PathBuf, String)>,
}

pub(crate) fn load(name: &'static str, src: &Path) -> Crate {
    let mut files = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read the source dir") {
            let path = entry.expect("a dir entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(src).unwrap();
            let mut module: Vec<String> = rel.iter().map(|s| s.to_string_lossy().into_owned()).collect();
            let last = module.pop().unwrap();
            match last.as_str() {
                "lib.rs" | "mod.rs" => {}
                other => module.push(other.trim_end_matches(".rs").to_string()),
            }
            let text = std::fs::read_to_string(&path).expect("read a source file");
            files.insert(module, (rel.to_path_buf(), strip(&text)));
        }
    }
    Crate { name, files }
}

/// The source without comments, string literals, `macro_rules!` bodies
/// (expanded in the caller's module, so their paths are the caller's
/// imports), and the `#[cfg(test)]` tail.
pub(crate) fn strip(text: &str) -> String {
    without_doc_imports(&without_macro_bodies(&strip_comments_and_strings(text)))
}

/// Drops the `use` declarations under `#[cfg(doc)]`: they only bring names into scope for doc
/// links, and no build of the crate has them.
fn without_doc_imports(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("#[cfg(doc)]") {
        out.push_str(&rest[..at]);
        let after = rest[at + "#[cfg(doc)]".len()..].trim_start();
        match after.strip_prefix("use ").and_then(|u| u.find(';').map(|end| &u[end + 1..])) {
            Some(tail) => rest = tail,
            None => {
                out.push_str("#[cfg(doc)]");
                rest = &rest[at + "#[cfg(doc)]".len()..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// Drops the brace-delimited body of every `macro_rules!` (run after
/// comments and strings are gone, so every brace is code).
fn without_macro_bodies(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("macro_rules!") {
        out.push_str(&rest[..at]);
        let after = &rest[at..];
        let Some(open) = after.find('{') else { return out };
        let mut depth = 0;
        let mut end = after.len();
        for (i, c) in after[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

fn strip_comments_and_strings(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod ") {
        Some(at) => &text[..at],
        None => text,
    };
    let mut out = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '/' if chars.peek() == Some(&'/') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            '"' => {
                let mut escaped = false;
                for c in chars.by_ref() {
                    if escaped {
                        escaped = false;
                    } else if c == '\\' {
                        escaped = true;
                    } else if c == '"' {
                        break;
                    }
                }
                out.push_str("\"\"");
            }
            _ => out.push(c),
        }
    }
    out
}

/// Expands `a::{b, c::{d, e as f}}` into `(path, local name)` pairs.
fn expand(tree: &str, prefix: &[String], out: &mut Vec<(Vec<String>, String)>) {
    let tree = tree.trim();
    if tree.is_empty() {
        return;
    }
    if let Some(open) = tree.find('{') {
        let head: Vec<String> =
            tree[..open].split("::").map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect();
        let inner = &tree[open + 1..tree.rfind('}').expect("a closing brace")];
        let mut base = prefix.to_vec();
        base.extend(head);
        let (mut depth, mut start) = (0, 0);
        for (i, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    expand(&inner[start..i], &base, out);
                    start = i + 1;
                }
                _ => {}
            }
        }
        expand(&inner[start..], &base, out);
        return;
    }
    let (path, alias) = match tree.split_once(" as ") {
        Some((p, a)) => (p, Some(a.trim().to_string())),
        None => (tree, None),
    };
    let mut full = prefix.to_vec();
    full.extend(path.split("::").map(str::trim).filter(|s| !s.is_empty()).map(String::from));
    let local = alias.unwrap_or_else(|| full.last().cloned().unwrap_or_default());
    if local == "self" {
        full.pop();
        let name = full.last().cloned().unwrap_or_default();
        out.push((full, name));
    } else {
        out.push((full, local));
    }
}

/// The `use` declarations of a file, expanded.
fn uses(text: &str) -> Vec<(Vec<String>, String)> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("use ") {
        let boundary = at == 0 || !rest.as_bytes()[at - 1].is_ascii_alphanumeric() && rest.as_bytes()[at - 1] != b'_';
        let after = &rest[at + 4..];
        let Some(end) = after.find(';') else { break };
        if boundary {
            expand(&after[..end], &[], &mut out);
            rest = &after[end + 1..];
        } else {
            rest = after;
        }
    }
    out
}

/// Inline paths (`crate::a::b`, `super::a`, `self::a`), also outside `use` declarations: a
/// file that names `super::checkpointer::KEY` in an expression imports that file as surely as
/// a `use` would.
fn inline_paths(text: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for root in ["crate::", "super::", "self::"] {
        let mut rest = text;
        while let Some(at) = rest.find(root) {
            let before = if at == 0 { None } else { Some(rest.as_bytes()[at - 1]) };
            // `a::crate::` is no path root, nor is the `super::` of `super::super::`.
            let boundary = before.is_none_or(|b| !(b.is_ascii_alphanumeric() || b == b'_' || b == b':'));
            let tail = &rest[at..];
            let len = tail.find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':')).unwrap_or(tail.len());
            // `crate::a::{..}` is a `use` list, which `uses` expands item by item.
            if boundary && !tail[..len].ends_with("::") {
                out.push(tail[..len].split("::").filter(|s| !s.is_empty()).map(String::from).collect());
            }
            rest = &rest[at + len.max(1)..];
        }
    }
    out
}

impl Crate {
    /// Makes `path`, written in module `here`, absolute (without `crate`); `None` for other crates.
    pub(crate) fn absolute(&self, here: &[String], path: &[String]) -> Option<Vec<String>> {
        let mut segs = path.iter();
        let first = segs.next()?;
        let mut base: Vec<String> = match first.as_str() {
            "crate" => vec![],
            "self" => here.to_vec(),
            "super" => {
                let mut b = here.to_vec();
                b.pop()?;
                b
            }
            name => {
                let mut child = here.to_vec();
                child.push(name.to_string());
                if !self.files.contains_key(&child) {
                    return None;
                }
                child
            }
        };
        let mut rest: Vec<&String> = segs.collect();
        while rest.first().is_some_and(|s| *s == "super") {
            base.pop()?;
            rest.remove(0);
        }
        base.extend(rest.into_iter().cloned());
        Some(base)
    }

    /// The file that defines what `path` (absolute) names, following re-exports.
    pub(crate) fn resolve(&self, path: &[String], depth: u32) -> Option<Vec<String>> {
        let mut module = path.to_vec();
        while !self.files.contains_key(&module) {
            module.pop()?;
        }
        if module.len() == path.len() || depth > 8 {
            return Some(module);
        }
        let item = &path[module.len()];
        let text = &self.files[&module].1;
        for (target, local) in uses(text) {
            if &local == item
                && let Some(abs) = self.absolute(&module, &target)
            {
                let mut next = abs;
                next.extend(path[module.len() + 1..].iter().cloned());
                return self.resolve(&next, depth + 1);
            }
        }
        Some(module)
    }

    /// File -> files it imports.
    pub(crate) fn edges(&self) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
        let mut edges = BTreeMap::new();
        for (module, (_, text)) in &self.files {
            let mut to = BTreeSet::new();
            let written = uses(text).into_iter().map(|(p, _)| p).chain(inline_paths(text));
            for path in written {
                let Some(abs) = self.absolute(module, &path) else { continue };
                if let Some(target) = self.resolve(&abs, 0)
                    && &target != module
                    // A parent naming its own child module is a declaration, not an import.
                    && !(target.len() > module.len() && target.starts_with(module) && abs.len() == target.len())
                {
                    to.insert(target);
                }
            }
            edges.insert(module.clone(), to);
        }
        edges
    }

    /// Every group of files that import each other in a circle.
    pub(crate) fn cycles(&self) -> Vec<Vec<String>> {
        circles(&self.edges())
            .into_iter()
            .map(|group| group.iter().map(|g| self.files[g].0.display().to_string()).collect())
            .collect()
    }
}

/// Every group of nodes that reach each other (a circle), in key order; `edges` maps a node to
/// the nodes it points at (files, or top-level modules).
pub(crate) fn circles<K: Ord + Clone, V>(edges: &BTreeMap<K, V>) -> Vec<Vec<K>>
where
    for<'a> &'a V: IntoIterator<Item = &'a K>,
{
    let reach = |from: &K| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.clone()];
        while let Some(m) = stack.pop() {
            for n in edges.get(&m).into_iter().flatten() {
                if seen.insert(n.clone()) {
                    stack.push(n.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<_, _> = edges.keys().map(|m| (m.clone(), reach(m))).collect();
    let mut done = BTreeSet::new();
    let mut groups = Vec::new();
    for m in edges.keys() {
        if done.contains(m) || !reaches[m].contains(m) {
            continue;
        }
        let group: Vec<K> =
            edges.keys().filter(|n| reaches[m].contains(*n) && reaches[*n].contains(m)).cloned().collect();
        done.extend(group.iter().cloned());
        groups.push(group);
    }
    groups
}

pub(crate) fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub(crate) fn report(krate: &Crate) -> String {
    let edges = krate.edges();
    let path = |m: &Vec<String>| krate.files[m].0.display().to_string();
    krate
        .cycles()
        .iter()
        .map(|g| {
            // The imports inside the circle, so the one to cut can be chosen.
            let inside: Vec<String> = edges
                .iter()
                .filter(|(from, _)| g.contains(&path(from)))
                .flat_map(|(from, to)| {
                    to.iter().filter(|t| g.contains(&path(t))).map(move |t| format!("{} -> {}", path(from), path(t)))
                })
                .collect();
            format!(
                "  {}/src: {} files import each other in a circle: {}\n    imports inside it: {}",
                krate.name,
                g.len(),
                g.join(" <-> "),
                inside.join(", ")
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}
