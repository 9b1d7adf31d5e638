//! What a decision is shown beside: the run's last messages and its graph, drawn where it
//! stands.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;

use serde_json::Value;

use super::escape::esc;
use crate::server::inspect::display::brief;

/// A thread's recent context: a summary of its state and its last messages.
#[derive(Default)]
pub(crate) struct Context {
    /// The checkpoint the state is from.
    pub(crate) seq: Option<u64>,
    /// The state as JSON.
    pub(crate) state: Value,
    /// Why the state may be approximate.
    pub(crate) warnings: Vec<String>,
    /// The graph's stored description.
    pub(crate) description: Option<Value>,
    /// The nodes to run next (the current position).
    pub(crate) next: Vec<String>,
}

/// The last messages of a state, if a field holds chat messages (objects with a `role`).
fn last_messages(state: &Value, n: usize) -> Vec<(String, String)> {
    let Some(fields) = state.as_object() else { return vec![] };
    for v in fields.values() {
        let Some(list) = v.as_array() else { continue };
        if list.is_empty() || !list.iter().all(|m| m.get("role").is_some()) {
            continue;
        }
        return list
            .iter()
            .rev()
            .take(n)
            .rev()
            .map(|m| {
                let role = m["role"].as_str().unwrap_or("?").to_string();
                let content = match m.get("content") {
                    Some(Value::String(s)) => s.clone(),
                    Some(other) => other.to_string(),
                    None => brief(m, 200),
                };
                (role, content)
            })
            .collect();
    }
    vec![]
}

pub(super) fn context_html(c: &Context) -> String {
    let mut out = String::new();
    let messages = last_messages(&c.state, 5);
    if !messages.is_empty() {
        out.push_str("<h3>Last messages</h3><table>");
        for (role, content) in &messages {
            let _ = write!(
                out,
                "<tr><td class=\"muted\">{}</td><td>{}</td></tr>",
                esc(role),
                esc(&brief(&Value::String(content.clone()), 400))
            );
        }
        out.push_str("</table>");
    }
    let _ = write!(
        out,
        "<h3>State{}</h3><table class=\"meta\">",
        c.seq.map(|s| format!(" at checkpoint {s}")).unwrap_or_default()
    );
    if let Some(fields) = c.state.as_object() {
        for (k, v) in fields {
            let _ = write!(out, "<tr><td>{}</td><td><code>{}</code></td></tr>", esc(k), esc(&brief(v, 160)));
        }
    }
    out.push_str("</table>");
    for w in &c.warnings {
        let _ = write!(out, "<p class=\"muted\">Note: {}</p>", esc(w));
    }
    out
}

/// The graph drawn as SVG, nodes in rows by distance from the start, the `current` nodes
/// highlighted; and the stored Mermaid source with the same nodes styled.
pub(crate) fn graph_html(description: Option<&Value>, current: &[String]) -> String {
    let Some(d) = description else {
        return "<p class=\"muted\">The store has no description of this graph (written by an older agentflow).</p>"
            .to_string();
    };
    let nodes: BTreeMap<String, Vec<String>> = d["nodes"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        v.as_array().into_iter().flatten().filter_map(Value::as_str).map(str::to_string).collect(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let start = d["start"].as_str().unwrap_or_default().to_string();
    // Rows by breadth-first distance from START; END last.
    let mut depth: BTreeMap<String, usize> = BTreeMap::new();
    depth.insert("START".into(), 0);
    let mut queue = VecDeque::new();
    if !start.is_empty() {
        depth.insert(start.clone(), 1);
        queue.push_back(start.clone());
    }
    while let Some(n) = queue.pop_front() {
        let dn = depth[&n];
        for t in nodes.get(&n).into_iter().flatten() {
            if t != "END" && !depth.contains_key(t) {
                depth.insert(t.clone(), dn + 1);
                queue.push_back(t.clone());
            }
        }
    }
    for n in nodes.keys() {
        if !depth.contains_key(n) {
            let d = depth.values().max().copied().unwrap_or(0) + 1;
            depth.insert(n.clone(), d);
        }
    }
    let end_row = depth.values().max().copied().unwrap_or(0) + 1;
    depth.insert("END".into(), end_row);
    let mut rows: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for (n, r) in &depth {
        rows.entry(*r).or_default().push(n.clone());
    }
    let (w, bw, bh, gap) = (560.0_f64, 130.0_f64, 30.0_f64, 62.0_f64);
    let mut pos: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    for (r, list) in &rows {
        let count = list.len() as f64;
        for (i, n) in list.iter().enumerate() {
            let x = w * (i as f64 + 1.0) / (count + 1.0);
            pos.insert(n.clone(), (x, 20.0 + *r as f64 * gap));
        }
    }
    let h = 20.0 + end_row as f64 * gap + bh + 10.0;
    let mut svg = format!(
        "<svg class=\"graph\" viewBox=\"0 0 {w} {h}\" width=\"{w}\" height=\"{h}\" role=\"img\" aria-label=\"graph\">\
         <defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"10\" refY=\"5\" markerWidth=\"7\" markerHeight=\"7\" \
         orient=\"auto-start-reverse\"><path d=\"M0,0L10,5L0,10z\" fill=\"#667\"/></marker></defs>"
    );
    let mut edges: Vec<(String, String)> = vec![];
    if !start.is_empty() {
        edges.push(("START".into(), start.clone()));
    }
    for (n, targets) in &nodes {
        for t in targets {
            edges.push((n.clone(), t.clone()));
        }
    }
    for (a, b) in &edges {
        let (Some(&(x1, y1)), Some(&(x2, y2))) = (pos.get(a), pos.get(b)) else { continue };
        let (y1, y2) = if y2 > y1 { (y1 + bh / 2.0, y2 - bh / 2.0) } else { (y1 - bh / 2.0, y2 + bh / 2.0) };
        let _ = write!(
            svg,
            "<line x1=\"{x1:.0}\" y1=\"{y1:.0}\" x2=\"{x2:.0}\" y2=\"{y2:.0}\" stroke=\"#667\" marker-end=\"url(#arrow)\"/>"
        );
    }
    for (n, &(x, y)) in &pos {
        let is_current = current.iter().any(|c| c == n);
        let terminal = n == "START" || n == "END";
        let (fill, stroke, sw) = if is_current {
            ("#ffd84d", "#b38600", 3)
        } else if terminal {
            ("#e8eaef", "#889", 1)
        } else {
            ("#fff", "#556", 1)
        };
        let rx = if terminal { 15 } else { 4 };
        let _ = write!(
            svg,
            "<g{}><rect x=\"{:.0}\" y=\"{:.0}\" width=\"{bw}\" height=\"{bh}\" rx=\"{rx}\" fill=\"{fill}\" stroke=\"{stroke}\" \
             stroke-width=\"{sw}\"/><text x=\"{x:.0}\" y=\"{:.0}\" text-anchor=\"middle\" font-size=\"13\" \
             font-family=\"system-ui,sans-serif\"{}>{}</text></g>",
            if is_current { format!(" class=\"current\" data-node=\"{}\"", esc(n)) } else { String::new() },
            x - bw / 2.0,
            y - bh / 2.0,
            y + 4.5,
            if is_current { " font-weight=\"700\"" } else { "" },
            esc(n)
        );
    }
    svg.push_str("</svg>");
    let mut mermaid = d["mermaid"].as_str().unwrap_or_default().to_string();
    for c in current {
        let _ = writeln!(mermaid, "    style {c} fill:#ffd84d,stroke:#b38600,stroke-width:3px");
    }
    let now = if current.is_empty() {
        "No node is current (the thread is finished or not started).".to_string()
    } else {
        format!("Current: <span class=\"current\">{}</span> (highlighted).", esc(&current.join(", ")))
    };
    format!(
        "<p class=\"muted\">{now}</p>{svg}<details><summary>Mermaid source</summary><pre>{}</pre></details>",
        esc(&mermaid)
    )
}
