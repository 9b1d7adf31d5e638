//! Name resolution: every name the graph IR holds (nodes, `goto` entries,
//! `goto!` targets, written fields) mapped to what it denotes. Pure, reports
//! nothing: the checks read the [`Resolved`] graph and decide what is an
//! error, so no check depends on another having run first.

use std::collections::HashMap;

use super::algo::Digraph;
use super::ir::{END, GraphIr, Named};
use crate::diag::did_you_mean;

/// What a route target names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// `END`.
    End,
    /// The node at this index.
    Node(usize),
    /// No node of the graph; `close` is the node it most likely means.
    Unknown { close: Option<usize> },
}

/// The graph with its names resolved.
#[derive(Debug, Default)]
pub struct Resolved {
    /// Node name -> index; the first node of a duplicated name wins.
    pub index: HashMap<String, usize>,
    /// `start`, if it names a node.
    pub start: Option<usize>,
    /// Per node: its `goto` list entries, resolved, in order.
    pub goto: Vec<Vec<Target>>,
    /// Per node, per `goto!` call site: its targets, resolved.
    pub routes: Vec<Vec<Vec<Target>>>,
    /// Per node: the nodes its `goto` list names, deduplicated (the
    /// executor's routes).
    pub targets: Vec<Vec<usize>>,
    /// Per node: whether its `goto` list holds `END`.
    pub may_end: Vec<bool>,
    /// Per node: the fields it may write: its `writes` list, else the fields
    /// its update chains set.
    pub writes: Vec<Vec<Named>>,
    /// The graph the structural checks judge: the declared edges plus what a
    /// mistake most likely meant (a misspelt target's close match, the
    /// target of an illegal `goto!`, the routes of a node without a list),
    /// so that one mistake is reported once, not again as its consequences.
    pub intended: Digraph,
}

impl Resolved {
    /// Whether node `i` is the one its name resolves to (not a later duplicate).
    pub fn is_canonical(&self, i: usize, name: &str) -> bool {
        self.index.get(name) == Some(&i)
    }
}

pub fn resolve(ir: &GraphIr) -> Resolved {
    let mut index = HashMap::new();
    for (i, node) in ir.nodes.iter().enumerate() {
        index.entry(node.name.name.clone()).or_insert(i);
    }
    let target = |name: &str| -> Target {
        if name == END {
            Target::End
        } else if let Some(&i) = index.get(name) {
            Target::Node(i)
        } else {
            let close = did_you_mean(name, ir.nodes.iter().map(|n| n.name.name.as_str()));
            Target::Unknown { close: close.and_then(|c| index.get(c).copied()) }
        }
    };
    let mut r = Resolved { start: ir.start.as_ref().and_then(|s| index.get(&s.name).copied()), ..Resolved::default() };
    for node in &ir.nodes {
        let goto: Vec<Target> = node.goto.iter().map(|t| target(&t.name)).collect();
        let routes: Vec<Vec<Target>> =
            node.routes.iter().map(|route| route.targets.iter().map(|t| target(&t.name)).collect()).collect();
        let mut targets = Vec::new();
        for t in &goto {
            if let Target::Node(i) = *t
                && !targets.contains(&i)
            {
                targets.push(i);
            }
        }
        let may_end = goto.contains(&Target::End);

        let mut succ = targets.clone();
        let mut ends = may_end;
        if node.goto_loc.is_none() {
            // What the body's `goto!`s name is what the missing list will hold.
            for t in routes.iter().flatten() {
                match *t {
                    Target::Node(i) => succ.push(i),
                    _ => ends = true,
                }
            }
        } else {
            for t in &goto {
                match *t {
                    Target::Unknown { close: Some(i) } => succ.push(i),
                    // It could be meant for any node, so claim nothing about where it leads.
                    Target::Unknown { close: None } => ends = true,
                    _ => {}
                }
            }
            // An illegal `goto!` says where the node is meant to go.
            for t in routes.iter().flatten() {
                match *t {
                    Target::Node(i) => succ.push(i),
                    Target::End => ends = true,
                    Target::Unknown { .. } => {}
                }
            }
        }
        succ.sort_unstable();
        succ.dedup();

        let writes = match &node.writes {
            Some(writes) => writes.clone(),
            None => {
                let mut seen: Vec<Named> = Vec::new();
                for set in &node.sets {
                    if !seen.iter().any(|s| s.name == set.name) {
                        seen.push(set.clone());
                    }
                }
                seen
            }
        };
        r.goto.push(goto);
        r.routes.push(routes);
        r.targets.push(targets);
        r.may_end.push(may_end);
        r.writes.push(writes);
        r.intended.succ.push(succ);
        r.intended.ends.push(ends);
    }
    r.index = index;
    r
}

#[cfg(test)]
mod tests {
    use super::super::ir::{GraphIr, Named, NodeIr, Route, Signature};
    use super::*;
    use crate::diag::Loc;

    fn node(name: &str, goto: &[&str], routes: &[&[&str]]) -> NodeIr {
        NodeIr {
            name: Named::new(name),
            goto: goto.iter().map(|t| Named::new(t)).collect(),
            goto_loc: Some(Loc::DUMMY),
            writes: None,
            routes: routes
                .iter()
                .map(|r| Route { targets: r.iter().map(|t| Named::new(t)).collect(), each: vec![] })
                .collect(),
            sets: vec![Named::new("log"), Named::new("log")],
            tools: vec![],
            tool_uses: vec![],
            subgraphs: vec![],
            subgraph_uses: vec![],
            interrupt: false,
            interrupt_calls: vec![],
            sleep: false,
            sleep_calls: vec![],
            sig: Signature::valid(),
            payload: None,
            parallel: None,
        }
    }

    fn graph(nodes: Vec<NodeIr>) -> GraphIr {
        GraphIr {
            name: "g".into(),
            loc: Loc::DUMMY,
            state: "S".into(),
            deps: None,
            start: Some(Named::new("a")),
            max_steps: None,
            max_depth: None,
            nodes,
        }
    }

    #[test]
    fn names_resolve_to_nodes_end_or_their_close_match() {
        let ir = graph(vec![node("a", &["retreive", "END", "zzz", "a"], &[&["a", "b"]]), node("retrieve", &[], &[])]);
        let r = resolve(&ir);
        assert_eq!(r.start, Some(0));
        assert_eq!(
            r.goto[0],
            vec![Target::Unknown { close: Some(1) }, Target::End, Target::Unknown { close: None }, Target::Node(0)]
        );
        assert_eq!(r.routes[0], vec![vec![Target::Node(0), Target::Unknown { close: None }]]);
        assert_eq!(r.targets[0], vec![0]);
        assert!(r.may_end[0]);
        // The intended graph follows the typo to what it means.
        assert_eq!(r.intended.succ[0], vec![0, 1]);
        // Without a `writes` list, a node writes what its chains set, once each.
        assert_eq!(r.writes[0], vec![Named::new("log")]);
    }

    #[test]
    fn the_first_of_duplicate_names_is_canonical() {
        let ir = graph(vec![node("a", &["END"], &[]), node("a", &["END"], &[])]);
        let r = resolve(&ir);
        assert!(r.is_canonical(0, "a"));
        assert!(!r.is_canonical(1, "a"));
    }

    #[test]
    fn a_node_without_a_list_is_meant_to_go_where_its_body_routes() {
        let mut ir = graph(vec![node("a", &[], &[&["b"], &["END"]]), node("b", &["END"], &[])]);
        ir.nodes[0].goto_loc = None;
        let r = resolve(&ir);
        assert_eq!(r.targets[0], Vec::<usize>::new());
        assert_eq!(r.intended.succ[0], vec![1]);
        assert!(r.intended.ends[0]);
    }
}
