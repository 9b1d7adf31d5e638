//! The rules of a released graph (`#[graph(id = .., version = N, migrate(..))]`), pure over the
//! IR and the locks read beside it: the attribute is consistent, the graph still matches the
//! lock of its own version, and every thread an older version may have left waiting (in a node,
//! or on an approval for a tool) has somewhere to go in version N.

use std::collections::{BTreeMap, BTreeSet};

use super::same_tool;
use crate::diag::{Diagnostics, Kind, Loc, hint, list};
use crate::graph::ir::{END, GraphIr, MigrationIr, ReleaseIr, ToolTarget};
use crate::graph::lock::{Lock, Locks, NodeShape, Shape, lock_path, zero_padded_version};
use crate::keywords::{graph as graph_kw, migrate as kw};

/// The token-level shape of the graph, as a lock's `nodes` records it.
pub fn shape(ir: &GraphIr) -> Shape {
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v.dedup();
        v
    };
    ir.nodes
        .iter()
        .map(|n| {
            let names = |list: &[crate::graph::ir::Named]| sorted(list.iter().map(|x| x.name.clone()).collect());
            let node = NodeShape {
                goto: names(&n.goto),
                writes: n.writes.as_deref().map(names),
                tools: names(&n.tools),
                subgraphs: names(&n.subgraphs),
                interrupt: n.interrupt,
                sleep: n.sleep,
                map: n.payload.is_some(),
            };
            (n.name.name.clone(), node)
        })
        .collect()
}

/// Every rule of a released graph. `rewriting`: `AGENTFLOW_LOCK=write` was set at compile
/// time, so the lock of the current version is about to be rewritten and is not compared.
/// A graph that is not released is only told off for `locks` or `migrate(..)` without a version.
pub fn check_release(ir: &GraphIr, rel: &ReleaseIr, locks: &Locks, rewriting: bool, diags: &mut Diagnostics) {
    if !rel.is_released() {
        let stray = rel.locks.as_ref().map(|l| l.1).or(rel.migrations.first().map(|m| m.from_loc));
        if let Some(loc) = stray {
            diags.push(
                Kind::ReleaseArg,
                loc,
                format!(
                    "`locks` and `migrate(..)` belong to a released graph: declare its version, \
                     `#[graph(.., {} = \"{}\", {} = 2, ..)]`",
                    graph_kw::ID,
                    ir.name,
                    graph_kw::VERSION
                ),
            );
        }
        return;
    }
    check_id(rel, diags);
    let n = rel.version();
    let version_loc = rel.version_loc(ir.loc);
    if n == 0 {
        diags.push(
            Kind::ReleaseArg,
            version_loc,
            "`version` counts a graph's releases from 1: write `version = 1` for the first, and raise it by one for each release that changes the graph",
        );
        return;
    }
    let current = shape(ir);
    check_migrations(ir, rel, locks, &current, diags);
    check_merged_nodes(rel, locks, diags);
    check_files(locks, version_loc, diags);
    if !rewriting && let Some(lock) = locks.get(n) {
        check_same_version(ir, n, lock, locks, &current, version_loc, diags);
    }
    check_parked_nodes(rel, locks, &current, version_loc, diags);
    check_pending_approvals(rel, locks, &current, version_loc, diags);
}

// The id names a directory, so it may not climb out of the lock directory.
fn check_id(rel: &ReleaseIr, diags: &mut Diagnostics) {
    let Some((id, loc)) = &rel.id else { return };
    if !valid_id(id) {
        diags.push(
            Kind::ReleaseArg,
            *loc,
            format!(
                "`id = \"{id}\"` names the graph's lock directory, so it may hold only letters, digits, `_`, `-` and `.`, \
                 and may not start with `.`: e.g. `id = \"support\"`"
            ),
        );
    }
}

/// Whether `id` can name a directory inside the lock directory.
pub fn valid_id(id: &str) -> bool {
    let fits = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
    !id.is_empty() && !id.starts_with('.') && id.chars().all(fits)
}

// Each `migrate(from = K)` leads from K to K + 1 inside 1..N, once per K, and maps names that
// exist: old names of version K (when its lock says which), new ones of K + 1 (of the graph
// itself when K + 1 = N, or of the lock of K + 1).
fn check_migrations(ir: &GraphIr, rel: &ReleaseIr, locks: &Locks, current: &Shape, diags: &mut Diagnostics) {
    let n = rel.version();
    for (i, m) in rel.migrations.iter().enumerate() {
        let k = m.from;
        if k == 0 || k >= n {
            let older = match n {
                1 => "version 1 is its first, so it has none to migrate from".to_string(),
                2 => "`from` is an older version: 1".to_string(),
                _ => format!("`from` is an older version, 1 to {}", n - 1),
            };
            diags.push(
                Kind::ReleaseArg,
                m.from_loc,
                format!(
                    "`migrate(from = {k})` leads from version {k} to {}, but graph `{}` is at version {n}; {older}",
                    u64::from(k) + 1,
                    ir.name,
                ),
            );
            continue;
        }
        if rel.migrations[..i].iter().any(|o| o.from == k) {
            diags.push(
                Kind::ReleaseArg,
                m.from_loc,
                format!("`migrate(from = {k})` is declared twice; put all of version {k}'s changes in one `migrate(from = {k}, ..)`"),
            );
            continue;
        }
        let old = locks.get(k).map(|l| &l.nodes);
        let new = if k + 1 == n { Some(current) } else { locks.get(k + 1).map(|l| &l.nodes) };
        check_node_maps(m, n, old, new, diags);
        check_tool_maps(m, old, new, diags);
    }
}

fn check_node_maps(m: &MigrationIr, n: u32, old: Option<&Shape>, new: Option<&Shape>, diags: &mut Diagnostics) {
    let k = m.from;
    for (i, (a, b)) in m.nodes.iter().enumerate() {
        if m.nodes[..i].iter().any(|(x, _)| x.name == a.name) {
            diags.push(
                Kind::ReleaseArg,
                a.loc,
                format!("node `{}` is mapped twice in `migrate(from = {k})`; keep one", a.name),
            );
            continue;
        }
        if let Some(old) = old
            && !old.contains_key(&a.name)
        {
            let names: Vec<&str> = old.keys().map(String::as_str).collect();
            diags.push(
                Kind::ReleaseArg,
                a.loc,
                format!(
                    "`{}` is not a node of version {k} (its lock lists {}){}",
                    a.name,
                    list(&names),
                    hint(&a.name, names.iter().copied())
                ),
            );
        }
        if let Some(new) = new
            && b.name != END
            && !new.contains_key(&b.name)
        {
            let names: Vec<&str> = new.keys().map(String::as_str).collect();
            let which = if k + 1 == n { format!("version {n}, this graph") } else { format!("version {}", k + 1) };
            diags.push(
                Kind::ReleaseArg,
                b.loc,
                format!(
                    "`{}` is not a node of {which}; map `{}` to one of {}, or to `END` to drop it{}",
                    b.name,
                    a.name,
                    list(&names),
                    hint(&b.name, names.iter().copied())
                ),
            );
        }
    }
}

fn check_tool_maps(m: &MigrationIr, old: Option<&Shape>, new: Option<&Shape>, diags: &mut Diagnostics) {
    let k = m.from;
    for (i, (a, b)) in m.tools.iter().enumerate() {
        if m.tools[..i].iter().any(|(x, _)| x.name == a.name) {
            diags.push(
                Kind::ReleaseArg,
                a.loc,
                format!("tool `{}` is mapped twice in `migrate(from = {k})`; keep one", a.name),
            );
            continue;
        }
        if let Some(old) = old
            && !lists_tool(old, &a.name)
        {
            diags.push(
                Kind::ReleaseArg,
                a.loc,
                format!("no node of version {k} lists tool `{}`, so no approval of it can be pending", a.name),
            );
        }
        if let (Some(new), ToolTarget::Rename(b)) = (new, b)
            && !lists_tool(new, &b.name)
        {
            diags.push(
                Kind::ReleaseArg,
                b.loc,
                format!(
                    "no node of version {} lists tool `{}`; map `{}` to a tool a node of version {} lists, or to `{}`",
                    k + 1,
                    b.name,
                    a.name,
                    k + 1,
                    kw::CANCEL
                ),
            );
        }
    }
    for (i, (t, _)) in m.args.iter().enumerate() {
        if m.args[..i].iter().any(|(x, _)| x.name == t.name) {
            diags.push(
                Kind::ReleaseArg,
                t.loc,
                format!("the arguments of `{}` are mapped twice in `migrate(from = {k})`; keep one", t.name),
            );
            continue;
        }
        if let Some(new) = new
            && !lists_tool(new, &t.name)
        {
            diags.push(
                Kind::ReleaseArg,
                t.loc,
                format!(
                    "`args({} = ..)` rewrites approvals pending for `{}` as version {} names it, and no node of version {} lists it",
                    t.name,
                    t.name,
                    k + 1,
                    k + 1
                ),
            );
        }
    }
}

/// A name of version `k` on its way through the migrations: what it is called now, the
/// nodes of version `k` that continue there, and whether a mapping moved any of them.
struct Tracked {
    name: String,
    origins: Vec<String>,
    mapped: bool,
}

// Two nodes of one version mapped to one node would make a thread waiting in both wait twice in
// one node: their kept writes and questions collide. A mapping onto a node that stays (a node
// removed, its threads sent to one that exists) is fine; a second node mapped there is not,
// whether in one `migrate(..)` or along the chain.
fn check_merged_nodes(rel: &ReleaseIr, locks: &Locks, diags: &mut Diagnostics) {
    let n = rel.version();
    let mut reported = BTreeSet::new();
    for k in 1..n {
        // The nodes of version K: its lock's, else those its own migration names.
        let mut names: Vec<String> = match locks.get(k) {
            Some(lock) => lock.nodes.keys().cloned().collect(),
            None => rel
                .migrations
                .iter()
                .filter(|m| m.from == k)
                .flat_map(|m| &m.nodes)
                .map(|(a, _)| a.name.clone())
                .collect(),
        };
        names.sort();
        names.dedup();
        let mut tracked: Vec<Tracked> =
            names.into_iter().map(|name| Tracked { origins: vec![name.clone()], name, mapped: false }).collect();
        for from in k..n {
            let Some(m) = rel.migrations.iter().find(|m| m.from == from) else { continue };
            let mut moved = Vec::new();
            let mut stayed = Vec::new();
            for t in tracked {
                match m.nodes.iter().position(|(a, _)| a.name == t.name) {
                    Some(i) if m.nodes[i].1.name == END => {}
                    Some(i) => moved.push((i, Tracked { name: m.nodes[i].1.name.clone(), mapped: true, ..t })),
                    None => stayed.push(t),
                }
            }
            moved.sort_by_key(|(i, _)| *i);
            for (i, t) in moved {
                let Some(there) = stayed.iter_mut().find(|s| s.name == t.name) else {
                    stayed.push(t);
                    continue;
                };
                if there.mapped && reported.insert((from, i)) {
                    let (old, new) = &m.nodes[i];
                    let mut origins = there.origins.clone();
                    origins.extend(t.origins.iter().cloned());
                    diags.push(
                        Kind::ReleaseArg,
                        old.loc,
                        format!(
                            "`{} -> {}` maps a second node to `{}`: nodes {} of version {k} would all continue at `{}`, \
                             and a thread waiting in more than one of them would have their kept writes and questions \
                             collide; map each old node to a node of its own",
                            old.name,
                            new.name,
                            new.name,
                            list(&origins),
                            new.name
                        ),
                    );
                }
                there.origins.extend(t.origins);
                there.mapped = true;
            }
            tracked = stayed;
        }
    }
}

fn lists_tool(shape: &Shape, tool: &str) -> bool {
    shape.values().any(|n| n.tools.iter().any(|t| same_tool(t, tool)))
}

// A lock that exists must be usable: a broken one would silently turn every check off.
fn check_files(locks: &Locks, at: Loc, diags: &mut Diagnostics) {
    if let Some(e) = &locks.error {
        diags.push(
            Kind::LockUnreadable,
            at,
            format!("the lock directory `{}` cannot be used: {e}", locks.dir.display()),
        );
    }
    for path in &locks.misnamed {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        let Some(n) = zero_padded_version(name) else { continue };
        diags.push(
            Kind::LockUnreadable,
            at,
            format!(
                "`{}` is not a lock name agentflow reads: the lock of version {n} is named `v{n}.lock`, \
                 its version written without leading zeros; rename the file, or delete it",
                path.display()
            ),
        );
    }
    for f in &locks.files {
        if let Err(e) = &f.lock {
            diags.push(
                Kind::LockUnreadable,
                at,
                format!(
                    "the lock of version {} (`{}`) cannot be used: {e}; restore it from version control, \
                     or delete it and lock the version again with `agentflow graphs lock`",
                    f.version,
                    f.path.display()
                ),
            );
        }
    }
}

// A released version is what stored threads were written under; changing its shape without
// raising the version would resume them on a graph they were not written for.
fn check_same_version(
    ir: &GraphIr,
    n: u32,
    lock: &Lock,
    locks: &Locks,
    current: &Shape,
    at: Loc,
    diags: &mut Diagnostics,
) {
    let changes = shape_changes(&lock.nodes, current);
    if changes.is_empty() {
        return;
    }
    let lines: Vec<String> = changes.iter().map(|c| format!("  - {c}")).collect();
    diags.push(
        Kind::LockChanged,
        at,
        format!(
            "graph `{}` differs from its lock of version {n} (`{}`):\n{}\n\
             raise `version`, or if version {n} was never released, lock it again with `agentflow graphs lock`",
            ir.name,
            lock_path(&locks.dir, n).display(),
            lines.join("\n")
        ),
    );
}

/// What changed from `old` to `new`, one line per change, in node order.
pub fn shape_changes(old: &Shape, new: &Shape) -> Vec<String> {
    let shown = |v: &[String]| format!("[{}]", v.join(", "));
    let mut out = Vec::new();
    for name in old.keys().filter(|k| !new.contains_key(*k)) {
        out.push(format!("node `{name}` was removed"));
    }
    for (name, b) in new {
        let Some(a) = old.get(name) else {
            out.push(format!("node `{name}` was added"));
            continue;
        };
        if a.goto != b.goto {
            out.push(format!("routes of `{name}` changed from {} to {}", shown(&a.goto), shown(&b.goto)));
        }
        if a.writes != b.writes {
            let w = |w: &Option<Vec<String>>| w.as_deref().map_or("none declared".to_string(), shown);
            out.push(format!("`writes` of `{name}` changed from {} to {}", w(&a.writes), w(&b.writes)));
        }
        if a.tools != b.tools {
            out.push(format!("tools of `{name}` changed from {} to {}", shown(&a.tools), shown(&b.tools)));
        }
        if a.subgraphs != b.subgraphs {
            out.push(format!("subgraphs of `{name}` changed from {} to {}", shown(&a.subgraphs), shown(&b.subgraphs)));
        }
        for (what, x, y) in [("interrupt", a.interrupt, b.interrupt), ("sleep", a.sleep, b.sleep)] {
            if x != y {
                let now = if y { "now" } else { "no longer" };
                out.push(format!("`{name}` is {now} marked `{what}`"));
            }
        }
        if a.map != b.map {
            let now = if b.map { "now" } else { "no longer" };
            out.push(format!("`{name}` is {now} a map worker (a `#[payload]` parameter)"));
        }
    }
    out
}

/// Where a name of version `k` ends up at version `n` through the declared migrations.
enum Carried {
    /// Mapped to `END` or cancelled.
    Dropped,
    /// Still called this, a name since version `since`.
    Named { name: String, since: u32 },
}

fn carry(rel: &ReleaseIr, k: u32, name: &str, step: impl Fn(&MigrationIr, &str) -> Option<Option<String>>) -> Carried {
    let (mut name, mut since) = (name.to_string(), k);
    for from in k..rel.version() {
        let Some(m) = rel.migrations.iter().find(|m| m.from == from) else { continue };
        match step(m, &name) {
            Some(None) => return Carried::Dropped,
            Some(Some(next)) => (name, since) = (next, from + 1),
            None => {}
        }
    }
    Carried::Named { name, since }
}

/// The `from` whose `migrate` should map `name` (a name since version `since`): the step
/// before the first lock after `since` that no longer has it, else the last step.
fn missing_from(locks: &Locks, since: u32, n: u32, has: impl Fn(&Lock) -> bool) -> u32 {
    (since + 1..n).find(|&w| locks.get(w).is_some_and(|l| !has(l))).map_or(n - 1, |w| w - 1)
}

/// Whether a name missing from version `n`, carried from version `k` and a name since
/// version `since`, came from a mapping whose target version is known not to have it: the
/// graph itself (`since = n`, the caller knows it is missing) or the lock of `since`.
fn misnamed(locks: &Locks, k: u32, since: u32, n: u32, has: impl Fn(&Lock) -> bool) -> bool {
    since > k && (since == n || locks.get(since).is_some_and(|l| !has(l)))
}

/// Versions `[1, 2]` as "version 1" or "versions 1 and 2".
fn versions(ks: &[u32]) -> String {
    let shown: Vec<String> = ks.iter().map(ToString::to_string).collect();
    match shown.as_slice() {
        [one] => format!("version {one}"),
        [rest @ .., last] => format!("versions {} and {last}", rest.join(", ")),
        [] => String::new(),
    }
}

/// For a name carried from older versions: a note naming what it was called, if not the same.
fn renamed(name: &str, origins: &[(u32, String)]) -> String {
    let old: Vec<String> =
        origins.iter().filter(|(_, o)| o != name).map(|(k, o)| format!("`{o}` in version {k}")).collect();
    if old.is_empty() { String::new() } else { format!(" ({})", old.join(", ")) }
}

// A thread stored at an older version may be waiting in any of that version's nodes (an
// interrupt, a durable sleep, a crash between steps); on resume it continues there, so each
// such node must still exist or be mapped.
fn check_parked_nodes(rel: &ReleaseIr, locks: &Locks, current: &Shape, at: Loc, diags: &mut Diagnostics) {
    let n = rel.version();
    let mut gone: BTreeMap<(u32, String), Vec<(u32, String)>> = BTreeMap::new();
    for f in locks.files.iter().filter(|f| f.version < n) {
        let Ok(lock) = &f.lock else { continue };
        for node in lock.nodes.keys() {
            let step = |m: &MigrationIr, name: &str| {
                m.nodes.iter().find(|(a, _)| a.name == name).map(|(_, b)| (b.name != END).then(|| b.name.clone()))
            };
            let Carried::Named { name, since } = carry(rel, f.version, node, step) else { continue };
            // A mapping to a name its version does not have is reported at the mapping.
            if current.contains_key(&name) || misnamed(locks, f.version, since, n, |l| l.nodes.contains_key(&name)) {
                continue;
            }
            let from = missing_from(locks, since, n, |l| l.nodes.contains_key(&name));
            gone.entry((from, name)).or_default().push((f.version, node.clone()));
        }
    }
    for ((from, name), origins) in gone {
        let ks: Vec<u32> = origins.iter().map(|o| o.0).collect();
        diags.push(
            Kind::NodeGone,
            at,
            format!(
                "threads of {} may be parked in node `{name}`{}, which version {n} no longer has: \
                 declare where they go with `migrate(from = {from}, nodes({name} -> <node or END>))`",
                versions(&ks),
                renamed(&name, &origins)
            ),
        );
    }
}

// An approval pending at an older version names its tool; on resume the call runs once
// approved, so the tool must still be listed, renamed, or its approvals cancelled. A tool the
// lock marks `approval: false` (read-only) is never held, and one it has no entry for may be.
fn check_pending_approvals(rel: &ReleaseIr, locks: &Locks, current: &Shape, at: Loc, diags: &mut Diagnostics) {
    let n = rel.version();
    let mut gone: BTreeMap<(u32, String), Vec<(u32, String)>> = BTreeMap::new();
    for f in locks.files.iter().filter(|f| f.version < n) {
        let Ok(lock) = &f.lock else { continue };
        let mut listed: Vec<&String> = lock.nodes.values().flat_map(|node| &node.tools).collect();
        listed.sort();
        listed.dedup();
        for tool in listed {
            if !may_be_held(lock, tool) {
                continue;
            }
            let step = |m: &MigrationIr, name: &str| {
                m.tools.iter().find(|(a, _)| same_tool(&a.name, name)).map(|(_, b)| match b {
                    ToolTarget::Rename(b) => Some(b.name.clone()),
                    ToolTarget::Cancel => None,
                })
            };
            let Carried::Named { name, since } = carry(rel, f.version, tool, step) else { continue };
            if lists_tool(current, &name) || misnamed(locks, f.version, since, n, |l| lists_tool(&l.nodes, &name)) {
                continue;
            }
            let from = missing_from(locks, since, n, |l| lists_tool(&l.nodes, &name));
            gone.entry((from, name)).or_default().push((f.version, tool.clone()));
        }
    }
    for ((from, name), origins) in gone {
        let ks: Vec<u32> = origins.iter().map(|o| o.0).collect();
        diags.push(
            Kind::ApprovalGone,
            at,
            format!(
                "an approval of `{name}`{} may be pending in threads of {}, and version {n} lists no such tool: \
                 add `migrate(from = {from}, tools({name} -> <tool> or {}))`",
                renamed(&name, &origins),
                versions(&ks),
                kw::CANCEL
            ),
        );
    }
}

/// Whether a policy may hold a call of `tool` (as a node of `lock` lists it) for approval:
/// its entry says so, or it has none.
fn may_be_held(lock: &Lock, tool: &str) -> bool {
    let last = tool.rsplit("::").next().unwrap_or(tool);
    lock.tools.get(tool).or_else(|| lock.tools.get(last)).copied().unwrap_or(true)
}

#[cfg(test)]
mod tests;
