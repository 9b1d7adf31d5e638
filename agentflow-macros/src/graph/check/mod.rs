//! The graph rules, each a pure function over the IR and its [`Resolved`]
//! names that reports into a [`Diagnostics`]. No rule reads another's
//! result, so their order only decides the order errors are printed in, and
//! none stops at the first error: a user fixes a graph in one round.
//!
//! Two facts need types the macro cannot see (which fields exist, which have
//! a reducer); for those the checks produce [`Conflict`]s and
//! [`GuardedWrite`]s that the expansion turns into compile-time assertions.

pub mod release;

use super::algo::co_active;
use super::ir::{END, GraphIr, NodeIr, Param};
use super::resolve::{Resolved, Target};
use crate::diag::{Diagnostics, Kind, Loc, did_you_mean, hint, list};

/// What the expansion needs from the checks besides the resolved names.
#[derive(Debug, Default)]
pub struct Checked {
    /// Whether each node's signature has the right shape (else no wrapper is
    /// generated for it, and rustc is not asked about its types).
    pub sig_ok: Vec<bool>,
    /// Same-step writes to one field, to assert the field has a reducer.
    pub conflicts: Vec<Conflict>,
    /// Writes outside a `writes` list that holds a close name, to report only
    /// if that name is a real field (else the list has a typo, reported alone).
    pub guarded: Vec<GuardedWrite>,
}

/// Two nodes that may run in the same super-step both write `field`; a
/// compile error unless the field has a reducer. `first == second` for a
/// map worker, whose instances always share a step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    pub first: String,
    pub second: String,
    pub field: String,
    /// The second node's write of the field.
    pub loc: Loc,
}

/// A write outside the node's `writes` list, an error only if `close` (the
/// list entry it resembles) is a field of the state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuardedWrite {
    pub close: String,
    pub message: String,
    /// The setter call.
    pub loc: Loc,
}

/// Runs every rule over a resolved graph.
pub fn check_all(ir: &GraphIr, r: &Resolved, diags: &mut Diagnostics) -> Checked {
    check_duplicate_nodes(ir, diags);
    let sig_ok = check_signatures(ir, r, diags);
    check_start(ir, r, diags);
    check_targets(ir, r, diags);
    check_routes(ir, r, diags);
    let guarded = check_writes(ir, diags);
    check_tools(ir, diags);
    check_interrupts(ir, diags);
    check_sleeps(ir, diags);
    check_subgraphs(ir, diags);
    check_map(ir, r, diags);
    check_reachable(ir, r, diags);
    check_exits(ir, r, diags);
    Checked { sig_ok, conflicts: conflicts(ir, r), guarded }
}

// A node may only call the tools it lists, so the tool set handed to its
// model is the whole of what it can do.  `cx.run_tool(divide, ..)` in a node
// with `tools = [add, multiply]`.
fn check_tools(ir: &GraphIr, diags: &mut Diagnostics) {
    for node in &ir.nodes {
        let allowed: Vec<&str> = node.tools.iter().map(|t| t.name.as_str()).collect();
        for (i, t) in node.tools.iter().enumerate() {
            if allowed[..i].contains(&t.name.as_str()) {
                diags.push(
                    Kind::ToolNotAllowed,
                    t.loc,
                    format!("tool `{}` is listed twice in the `tools` of `{}`", t.name, node.name.name),
                );
            }
        }
        for used in &node.tool_uses {
            if !allowed.iter().any(|a| same_tool(a, &used.name)) {
                let (tool, name) = (&used.name, &node.name.name);
                let message = if allowed.is_empty() {
                    format!(
                        "tool `{tool}` is not allowed in node `{name}`, which lists no tools\n\
                         to allow it, list it in the node's attribute: `#[node(.., tools = [{tool}])]`"
                    )
                } else {
                    format!(
                        "tool `{tool}` is not allowed in node `{name}`; allowed: {}\n\
                         to allow it, add `{tool}` to the `tools` list of `{name}`",
                        list(&allowed)
                    )
                };
                diags.push(Kind::ToolNotAllowed, used.loc, message);
            }
        }
    }
}

/// Whether two written tool paths name one tool: the shorter is the end of the longer
/// (`get_sum` after a `use`, `everything::get_sum`, `crate::everything::get_sum`).
fn same_tool(a: &str, b: &str) -> bool {
    let (a, b): (Vec<&str>, Vec<&str>) = (a.split("::").collect(), b.split("::").collect());
    let (short, long) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    long.ends_with(&short)
}

// Pausing for a human is part of a node's contract (the run stops there and
// the node re-runs on resume), so it must be declared.
// `cx.interrupt(..)` in a node without `#[node(interrupt)]`.
fn check_interrupts(ir: &GraphIr, diags: &mut Diagnostics) {
    for node in ir.nodes.iter().filter(|n| !n.interrupt) {
        for loc in &node.interrupt_calls {
            diags.push(
                Kind::InterruptNotAllowed,
                *loc,
                format!(
                    "node `{}` calls `interrupt` but is not marked as one that may pause; add `interrupt` to its attribute: `#[node(.., interrupt)]`",
                    node.name.name
                ),
            );
        }
    }
}

// Waiting on a durable timer ends the run there and re-runs the node when
// it is due, like an interrupt, so it must be declared too.
// `cx.sleep(..)` in a node without `#[node(sleep)]`.
fn check_sleeps(ir: &GraphIr, diags: &mut Diagnostics) {
    for node in ir.nodes.iter().filter(|n| !n.sleep) {
        for (method, loc) in &node.sleep_calls {
            diags.push(
                Kind::SleepNotAllowed,
                *loc,
                format!(
                    "node `{}` calls `{method}` but is not marked as one that may wait on a durable timer; add `sleep` to its attribute: `#[node(.., sleep)]`",
                    node.name.name
                ),
            );
        }
    }
}

// A node runs only the subgraphs it lists, and a graph never lists itself
// (that would delegate without end; graphs that contain each other are
// caught by rustc, as a cycle between their `DELEGATION_DEPTH` constants).
fn check_subgraphs(ir: &GraphIr, diags: &mut Diagnostics) {
    for node in &ir.nodes {
        let listed: Vec<&str> = node.subgraphs.iter().map(|g| g.name.as_str()).collect();
        for used in &node.subgraph_uses {
            if !listed.contains(&used.name.as_str()) {
                let fix = if listed.is_empty() {
                    format!("declare it: `#[node(.., subgraphs = [{}])]`", used.name)
                } else {
                    format!("add it to the list: `subgraphs = [{}, {}]`", listed.join(", "), used.name)
                };
                diags.push(
                    Kind::SubgraphNotAllowed,
                    used.loc,
                    format!(
                        "node `{}` runs subgraph `{}`, which is not in its `subgraphs` list; {fix}",
                        node.name.name, used.name
                    ),
                );
            }
        }
        for g in node.subgraphs.iter().filter(|g| g.name == ir.name) {
            diags.push(
                Kind::SubgraphSelf,
                g.loc,
                format!(
                    "graph `{}` cannot run itself as a subgraph of node `{}`: it would delegate without end; \
                     give the recursive part a graph of its own, or loop with `goto!` inside this one",
                    ir.name, node.name.name
                ),
            );
        }
    }
}

// A map worker runs once per payload, so it is reached only through
// `each(worker, payloads)`, and only a worker is: `goto!(analyst)` to a node
// with a `#[payload]` parameter, `each(update, ..)` to one without, a worker
// as the start node, `parallel = N` on a node that is no worker.
fn check_map(ir: &GraphIr, r: &Resolved, diags: &mut Diagnostics) {
    let takes_payload = |i: usize| ir.nodes.get(i).is_some_and(|n| n.payload.is_some());
    for (i, node) in ir.nodes.iter().enumerate() {
        let n = &node.name.name;
        for (route, resolved) in node.routes.iter().zip(&r.routes[i]) {
            for (k, (t, &target)) in route.targets.iter().zip(resolved).enumerate() {
                let each = route.each.contains(&k);
                if each && target == Target::End {
                    diags.push(
                        Kind::MapPayload,
                        t.loc,
                        format!(
                            "node `{n}` sends payloads to `END`; `each(worker, payloads)` names a map worker (a node with a `#[payload]` parameter)"
                        ),
                    );
                }
                let Target::Node(to) = target else { continue };
                if !each && takes_payload(to) {
                    diags.push(
                        Kind::MapPayload,
                        t.loc,
                        format!(
                            "node `{n}` routes to `{w}` with a plain `goto!`, but `{w}` takes a `#[payload]` parameter; \
                             send it its payloads with `goto!(each({w}, payloads))`: one instance of `{w}` runs per payload",
                            w = t.name
                        ),
                    );
                }
                // A worker that takes its payload without `#[payload]` is told so by its signature.
                if each && !takes_payload(to) && unmarked_payload(ir, r, to).is_none() {
                    diags.push(
                        Kind::MapPayload,
                        t.loc,
                        format!(
                            "node `{n}` sends payloads to `{w}` with `each({w}, ..)`, but `{w}` takes no payload; \
                             add a `#[payload] item: &Item` parameter to `{w}`, or route to it with `goto!({w})`",
                            w = t.name
                        ),
                    );
                }
            }
        }
        if let Some(loc) = node.parallel
            && node.payload.is_none()
        {
            diags.push(
                Kind::MapPayload,
                loc,
                format!(
                    "`parallel` bounds how many instances of a map worker run at once, and node `{n}` is no map worker \
                     (it has no `#[payload]` parameter); remove `parallel`"
                ),
            );
        }
    }
    if let (Some(start), Some(s)) = (r.start, &ir.start)
        && let Some(node) = ir.nodes.get(start)
        && node.payload.is_some()
    {
        diags.push(
            Kind::MapPayload,
            s.loc,
            format!(
                "the start node `{}` takes a `#[payload]` parameter, but a run starts it without one; \
                 start at a node that sends the payloads with `goto!(each({}, payloads))`",
                node.name.name, node.name.name
            ),
        );
    }
}

// Node names are route targets, so two nodes of one name would make a route
// ambiguous.  `async fn draft(..)` twice in one graph.
fn check_duplicate_nodes(ir: &GraphIr, diags: &mut Diagnostics) {
    for (i, node) in ir.nodes.iter().enumerate() {
        if node.name.name == END {
            diags.push(
                Kind::DuplicateNode,
                node.name.loc,
                "a node cannot be named `END`: `END` is the exit of every graph",
            );
        }
        if ir.nodes[..i].iter().any(|n| n.name.name == node.name.name) {
            diags.push(
                Kind::DuplicateNode,
                node.name.loc,
                format!("duplicate node `{}` in graph `{}`; rename one of them", node.name.name, ir.name),
            );
        }
    }
}

// Nodes are called by the executor with the state snapshot and the context,
// so the shape of the fn is fixed; the types themselves are left to rustc.
// `fn classify(s: Ticket)` is neither async nor borrowing. A node that is sent
// payloads but marks no parameter `#[payload]` is a map worker missing the
// attribute, not a node with a parameter too many:
// `async fn analyst(s: &Market, ticker: &String, cx: &Ctx<D>)`.
fn check_signatures(ir: &GraphIr, r: &Resolved, diags: &mut Diagnostics) -> Vec<bool> {
    let mut sig_ok = Vec::new();
    for (i, node) in ir.nodes.iter().enumerate() {
        let mut ok = true;
        let n = &node.name.name;
        let sig = &node.sig;
        let expected = expected_signature(ir, n);
        let mut report = |loc: Loc, problem: String| {
            ok = false;
            diags.push(Kind::Signature, loc, format!("node `{n}` {problem}\n{expected}"));
        };
        if !sig.is_async {
            report(sig.loc, "must be an `async fn`".into());
        }
        if let Some(loc) = sig.generics {
            report(loc, "cannot have generic parameters".into());
        }
        let state_loc = sig.params.first().copied().unwrap_or(node.name.loc);
        let problem = match sig.state {
            Param::Ref => None,
            Param::RefMut => {
                Some("takes the state as `&mut`; a node reads a shared snapshot and returns its changes as an update")
            }
            Param::Value => Some("takes the state by value; a node borrows a shared snapshot"),
            Param::Receiver => Some("takes `self`; a node is a free fn"),
            Param::Missing => Some("takes no state parameter"),
        };
        if let Some(problem) = problem {
            report(state_loc, problem.into());
        } else if let Some(at) = sig.payload_at.filter(|&at| at != 1) {
            report(
                sig.params[at],
                "has its `#[payload]` parameter in the wrong place; it comes second, right after the state".into(),
            );
        } else if let Some((at, sender)) = unmarked_payload(ir, r, i) {
            ok = false;
            let place = match at {
                1 => "its second parameter",
                _ => "its third parameter",
            };
            let moved = if at == 1 { "" } else { ", and move it second, right after the state" };
            // The parameter as the user wrote it, with the attribute added.
            let (loc, param) = sig.written.get(at).map_or((sig.params[at], "item: &Item"), |w| (w.loc, &w.text));
            diags.push(
                Kind::Signature,
                loc,
                format!(
                    "node `{n}` is a map worker (node `{sender}` sends it payloads with `each({n}, ..)`), \
                     so {place}, the payload, needs `#[payload]`: `#[payload] {param}`{moved}"
                ),
            );
        } else if let Some(&extra) = sig.params.get(2 + usize::from(sig.payload_at.is_some())) {
            let most = if sig.payload_at.is_some() {
                "a map worker takes at most 3: the state, the `#[payload]`, then the context or the deps"
            } else {
                "a node takes at most 2: the state, then the context or the deps"
            };
            report(extra, format!("takes {} parameters; {most}", sig.params.len()));
        }
        sig_ok.push(ok);
    }
    sig_ok
}

/// For a node that marks no parameter `#[payload]`, takes three parameters and is sent
/// payloads with `each(..)`: the parameter the payload is (the one after the state not
/// written `&Ctx<..>`, else the second), and the first node that sends it payloads.
fn unmarked_payload<'a>(ir: &'a GraphIr, r: &Resolved, node: usize) -> Option<(usize, &'a str)> {
    let worker = ir.nodes.get(node)?;
    let sig = &worker.sig;
    if worker.payload.is_some() || sig.payload_at.is_some() || sig.params.len() != 3 {
        return None;
    }
    let sender = ir.nodes.iter().zip(&r.routes).find(|(n, resolved)| {
        n.routes
            .iter()
            .zip(resolved.iter())
            .any(|(route, targets)| route.each.iter().any(|&k| targets.get(k) == Some(&Target::Node(node))))
    })?;
    let at = if sig.ctx_at.contains(&1) && !sig.ctx_at.contains(&2) { 2 } else { 1 };
    Some((at, sender.0.name.name.as_str()))
}

fn expected_signature(ir: &GraphIr, node: &str) -> String {
    let s = &ir.state;
    match &ir.deps {
        Some(d) => format!(
            "expected `async fn {node}(state: &{s}, cx: &Ctx<{d}>) -> Step<{s}>`; \
             the second parameter may also be `deps: &{d}`, or be left out"
        ),
        None => format!(
            "expected `async fn {node}(state: &{s}) -> Step<{s}>`, \
             optionally with a second parameter `cx: &Ctx<()>`"
        ),
    }
}

// Every run begins at `start`.  `#[graph(state = S, start = clasify)]`
fn check_start(ir: &GraphIr, r: &Resolved, diags: &mut Diagnostics) {
    match &ir.start {
        None => diags.push(
            Kind::MissingStart,
            ir.loc,
            format!(
                "graph `{}` has no start node; add `start = {}` to `#[graph(..)]`",
                ir.name,
                ir.nodes.first().map_or("<node>", |n| n.name.name.as_str())
            ),
        ),
        Some(start) if r.start.is_none() => diags.push(
            Kind::UnknownStart,
            start.loc,
            format!("unknown start node `{}`{}", start.name, suggest(&start.name, ir)),
        ),
        Some(_) => {}
    }
}

// A route must name a node of this graph or `END`, and every node must say
// where it may go. `#[node(goto = [retreive, END])]` where the node is `retrieve`.
fn check_targets(ir: &GraphIr, r: &Resolved, diags: &mut Diagnostics) {
    for (i, node) in ir.nodes.iter().enumerate() {
        if node.goto_loc.is_none() {
            diags.push(Kind::MissingGotoList, node.name.loc, missing_goto_list(node));
        }
        for (t, resolved) in node.goto.iter().zip(&r.goto[i]) {
            if let Target::Unknown { .. } = resolved {
                diags.push(
                    Kind::UnknownTarget,
                    t.loc,
                    format!(
                        "unknown node `{}` in the `goto` list of `{}`{}",
                        t.name,
                        node.name.name,
                        suggest(&t.name, ir)
                    ),
                );
            }
        }
    }
}

fn missing_goto_list(node: &NodeIr) -> String {
    let mut body: Vec<&str> = Vec::new();
    for t in node.routes.iter().flat_map(|r| &r.targets) {
        if !body.contains(&t.name.as_str()) {
            body.push(&t.name);
        }
    }
    let n = &node.name.name;
    if body.is_empty() {
        format!("node `{n}` has no `goto` list; name where it may go, e.g. `#[node(goto = [END])]`")
    } else {
        format!(
            "node `{n}` has no `goto` list, but its body routes to {}; add `#[node(goto = [{}])]`",
            list(&body),
            body.join(", ")
        )
    }
}

// A node may only take the routes it declares, so the declared graph is the
// real one.  `goto!(send)` in a node with `goto = [answer, escalate]`.
fn check_routes(ir: &GraphIr, r: &Resolved, diags: &mut Diagnostics) {
    for (i, node) in ir.nodes.iter().enumerate() {
        // A node without a list was reported with the list its body implies.
        if node.goto_loc.is_none() {
            continue;
        }
        let allowed: Vec<&str> = node.goto.iter().map(|t| t.name.as_str()).collect();
        for (route, resolved) in node.routes.iter().zip(&r.routes[i]) {
            for (t, &target) in route.targets.iter().zip(resolved) {
                if allowed.contains(&t.name.as_str()) {
                    continue;
                }
                // `goto = [retreive]` with `goto!(retrieve)`: the typo in the
                // list is the mistake, and it is reported there.
                if let Target::Node(to) = target
                    && r.goto[i].contains(&Target::Unknown { close: Some(to) })
                {
                    continue;
                }
                let mut msg = format!(
                    "illegal transition `{} -> {}`: `{}` may go to {}",
                    node.name.name,
                    t.name,
                    node.name.name,
                    if allowed.is_empty() { "nowhere (its `goto` list is empty)".to_string() } else { list(&allowed) }
                );
                match target {
                    Target::End => msg
                        .push_str(&format!("\nto let it finish, add `END` to the `goto` list of `{}`", node.name.name)),
                    Target::Node(_) => msg.push_str(&format!(
                        "\nto allow it, add `{}` to the `goto` list of `{}`",
                        t.name, node.name.name
                    )),
                    Target::Unknown { .. } => msg.push_str(&format!(
                        "\n`{}` is not a node of graph `{}`{}",
                        t.name,
                        ir.name,
                        suggest(&t.name, ir)
                    )),
                }
                diags.push(Kind::IllegalTransition, t.loc, msg);
            }
        }
    }
}

// A node that declares `writes = [..]` may only set those fields, so a reader
// of the graph knows what each node can change.
// `#[node(writes = [draft])]` whose body calls `Email::update().summary(..)`.
fn check_writes(ir: &GraphIr, diags: &mut Diagnostics) -> Vec<GuardedWrite> {
    let mut guarded = Vec::new();
    for node in &ir.nodes {
        let Some(writes) = &node.writes else { continue };
        let names: Vec<&str> = writes.iter().map(|w| w.name.as_str()).collect();
        for set in &node.sets {
            if names.contains(&set.name.as_str()) {
                continue;
            }
            let message = format!(
                "node `{}` sets `{}`, which is not in its `writes = [{}]`; add `{}` to the list or remove the write",
                node.name.name,
                set.name,
                names.join(", "),
                set.name,
            );
            match did_you_mean(&set.name, names.iter().copied()) {
                // `writes = [sumary]` and `.summary(..)`: most likely a typo in
                // the list, which the field assertion reports on its own.
                Some(close) => guarded.push(GuardedWrite { close: close.to_string(), message, loc: set.loc }),
                None => diags.push(Kind::WriteOutsideList, set.loc, message),
            }
        }
    }
    guarded
}

// A node no route leads to is dead code that looks alive.
// `async fn orphan(..)` that no `goto` list names.
fn check_reachable(ir: &GraphIr, r: &Resolved, diags: &mut Diagnostics) {
    let Some(start) = r.start else {
        return;
    };
    let seen = r.intended.reachable(start);
    for (i, node) in ir.nodes.iter().enumerate() {
        if !seen[i] && r.is_canonical(i, &node.name.name) {
            diags.push(
                Kind::Unreachable,
                node.name.loc,
                format!(
                    "node `{}` is unreachable from the start node `{}`; route to it from another node's `goto` list, or remove it",
                    node.name.name,
                    ir.nodes[start].name.name
                ),
            );
        }
    }
}

// Every node must be able to finish, and a cycle must have a way out and a
// step bound; otherwise a run can only end by exhausting a budget.
// `review -> draft -> review` with no `END` in either list.
//
// A node that cannot reach `END` leads into a dead end or a closed cycle, so
// the error goes there, and names the nodes stuck behind it.
fn check_exits(ir: &GraphIr, r: &Resolved, diags: &mut Diagnostics) {
    let g = &r.intended;
    let ok = g.reaches_end();
    let cycles = g.cycles();
    let mut in_trap = vec![false; g.len()];
    for scc in &cycles {
        if !scc.iter().any(|&n| ok[n]) {
            for &n in scc {
                in_trap[n] = true;
            }
        }
    }
    let dead_end = |n: usize| g.succ[n].is_empty() && !g.ends[n];
    let stuck_behind = |target: &[usize]| -> Vec<&str> {
        (0..g.len())
            .filter(|&u| !ok[u] && !in_trap[u] && !dead_end(u) && !target.contains(&u))
            .filter(|&u| g.reachable(u).iter().enumerate().any(|(v, r)| *r && target.contains(&v)))
            .map(|u| ir.nodes[u].name.name.as_str())
            .collect()
    };
    let either = |stuck: Vec<&str>| {
        if stuck.is_empty() {
            String::new()
        } else {
            format!("\nbecause of it, {} cannot reach `END` either", list(&stuck))
        }
    };
    for scc in &cycles {
        let path = g.cycle_path(scc);
        let names: Vec<&str> = path.iter().map(|&i| ir.nodes[i].name.name.as_str()).collect();
        let shown = names.join(" -> ");
        let (from, to) = (path[path.len() - 2], path[path.len() - 1]);
        let edge = closing_edge(ir, from, to);
        if in_trap[scc[0]] {
            diags.push(
                Kind::CycleWithoutExit,
                edge,
                format!(
                    "cycle `{shown}` never reaches `END`; add `END` (or a node that reaches it) to the `goto` list of one of {}{}",
                    list(&names[..names.len() - 1]),
                    either(stuck_behind(scc))
                ),
            );
        }
        if ir.max_steps.is_none() {
            diags.push(
                Kind::CycleWithoutBound,
                edge,
                format!(
                    "graph `{}` has the cycle `{shown}` but no step bound; add `max_steps = N` to `#[graph(..)]`",
                    ir.name
                ),
            );
        }
    }
    for (i, node) in ir.nodes.iter().enumerate() {
        // A node without a list was reported already.
        if let (true, Some(loc)) = (dead_end(i), node.goto_loc) {
            diags.push(
                Kind::CannotReachEnd,
                loc,
                format!(
                    "node `{}` has an empty `goto` list, so it cannot reach `END`; add `END` or a node that reaches it{}",
                    node.name.name,
                    either(stuck_behind(&[i]))
                ),
            );
        }
    }
}

fn closing_edge(ir: &GraphIr, from: usize, to: usize) -> Loc {
    let target = &ir.nodes[to].name.name;
    ir.nodes[from].goto.iter().find(|t| &t.name == target).map_or(ir.nodes[from].name.loc, |t| t.loc)
}

// Two nodes of one super-step that both overwrite a field would lose one of
// the writes. Which pairs can share a step follows from the fan-out
// `goto!([a, b], ..)` sites; whether the field has a reducer is asserted at
// compile time by the expansion.
fn conflicts(ir: &GraphIr, r: &Resolved) -> Vec<Conflict> {
    let routes: Vec<Vec<Vec<usize>>> = r
        .routes
        .iter()
        .map(|sites| {
            sites
                .iter()
                .map(|site| site.iter().filter_map(|t| if let Target::Node(i) = *t { Some(i) } else { None }).collect())
                .collect()
        })
        .collect();
    let mut out = Vec::new();
    // The instances of a map worker always share a step.
    for (w, node) in ir.nodes.iter().enumerate().filter(|(_, n)| n.payload.is_some()) {
        for field in &r.writes[w] {
            out.push(Conflict {
                first: node.name.name.clone(),
                second: node.name.name.clone(),
                field: field.name.clone(),
                loc: field.loc,
            });
        }
    }
    for (u, v) in co_active(&routes) {
        for field in &r.writes[u] {
            if let Some(w) = r.writes[v].iter().find(|w| w.name == field.name) {
                out.push(Conflict {
                    first: ir.nodes[u].name.name.clone(),
                    second: ir.nodes[v].name.name.clone(),
                    field: field.name.clone(),
                    loc: w.loc,
                });
            }
        }
    }
    out
}

/// A close node name, else the list of all of them.
fn suggest(name: &str, ir: &GraphIr) -> String {
    let names: Vec<&str> = ir.nodes.iter().map(|n| n.name.name.as_str()).collect();
    match hint(name, names.iter().copied()) {
        close if close.is_empty() => format!("; the nodes of graph `{}` are {}", ir.name, list(&names)),
        close => close,
    }
}

#[cfg(test)]
mod tests;
