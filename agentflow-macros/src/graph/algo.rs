//! Graph algorithms over node indexes: reachability, strongly connected
//! components, and which nodes may be active in the same super-step.

use std::collections::BTreeSet;

/// A directed graph over nodes `0..n`, with an extra exit (`END`).
#[derive(Debug, Clone, Default)]
pub struct Digraph {
    /// Successors of each node.
    pub succ: Vec<Vec<usize>>,
    /// Whether each node may route to `END`.
    pub ends: Vec<bool>,
}

impl Digraph {
    pub fn len(&self) -> usize {
        self.succ.len()
    }

    /// Nodes reachable from `start`, `start` included.
    pub fn reachable(&self, start: usize) -> Vec<bool> {
        let mut seen = vec![false; self.len()];
        let mut stack = vec![start];
        while let Some(n) = stack.pop() {
            if n >= self.len() || std::mem::replace(&mut seen[n], true) {
                continue;
            }
            stack.extend(self.succ[n].iter().copied());
        }
        seen
    }

    /// Nodes from which `END` can be reached.
    pub fn reaches_end(&self) -> Vec<bool> {
        let mut pred = vec![Vec::new(); self.len()];
        for (n, succ) in self.succ.iter().enumerate() {
            for &s in succ {
                pred[s].push(n);
            }
        }
        let mut ok = vec![false; self.len()];
        let mut stack: Vec<usize> = (0..self.len()).filter(|&n| self.ends[n]).collect();
        while let Some(n) = stack.pop() {
            if std::mem::replace(&mut ok[n], true) {
                continue;
            }
            stack.extend(pred[n].iter().copied());
        }
        ok
    }

    /// Strongly connected components that contain a cycle (more than one
    /// node, or a node routing to itself), each sorted, in order of their
    /// smallest node.
    pub fn cycles(&self) -> Vec<Vec<usize>> {
        let mut sccs: Vec<Vec<usize>> = tarjan(&self.succ)
            .into_iter()
            .filter(|c| c.len() > 1 || self.succ[c[0]].contains(&c[0]))
            .map(|mut c| {
                c.sort_unstable();
                c
            })
            .collect();
        sccs.sort();
        sccs
    }

    /// A simple cycle inside `scc`, from its smallest node back to it:
    /// `[a, b, c, a]`.
    pub fn cycle_path(&self, scc: &[usize]) -> Vec<usize> {
        let start = scc[0];
        let inside = |n: usize| scc.binary_search(&n).is_ok();
        // Breadth-first for the shortest way round.
        let mut parent = vec![usize::MAX; self.len()];
        let mut queue = std::collections::VecDeque::from([start]);
        while let Some(n) = queue.pop_front() {
            for &s in &self.succ[n] {
                if s == start {
                    let mut path = vec![n];
                    while *path.last().unwrap_or(&start) != start {
                        let cur = path[path.len() - 1];
                        path.push(parent[cur]);
                    }
                    path.reverse();
                    path.push(start);
                    return path;
                }
                if inside(s) && parent[s] == usize::MAX && s != start {
                    parent[s] = n;
                    queue.push_back(s);
                }
            }
        }
        vec![start, start]
    }
}

/// Tarjan's algorithm, iterative so deep graphs cannot overflow the stack.
fn tarjan(succ: &[Vec<usize>]) -> Vec<Vec<usize>> {
    let n = succ.len();
    let mut index = vec![usize::MAX; n];
    let mut low = vec![0; n];
    let mut on_stack = vec![false; n];
    let mut stack = Vec::new();
    let mut out = Vec::new();
    let mut next = 0;
    for root in 0..n {
        if index[root] != usize::MAX {
            continue;
        }
        let mut work = vec![(root, 0usize)];
        index[root] = next;
        low[root] = next;
        next += 1;
        stack.push(root);
        on_stack[root] = true;
        while let Some(&mut (v, ref mut i)) = work.last_mut() {
            if let Some(&w) = succ[v].get(*i) {
                *i += 1;
                if index[w] == usize::MAX {
                    index[w] = next;
                    low[w] = next;
                    next += 1;
                    stack.push(w);
                    on_stack[w] = true;
                    work.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
            } else {
                work.pop();
                if let Some(&(parent, _)) = work.last() {
                    low[parent] = low[parent].min(low[v]);
                }
                if low[v] == index[v] {
                    let mut comp = Vec::new();
                    while let Some(w) = stack.pop() {
                        on_stack[w] = false;
                        comp.push(w);
                        if w == v {
                            break;
                        }
                    }
                    out.push(comp);
                }
            }
        }
    }
    out
}

/// Pairs of distinct nodes that may be active in the same super-step.
///
/// `routes[n]` lists the target sets of node `n`'s `goto!` call sites. Two
/// targets of one call site run together; and if `u` and `v` run together,
/// any target of `u` may run together with any target of `v` one step later.
pub fn co_active(routes: &[Vec<Vec<usize>>]) -> BTreeSet<(usize, usize)> {
    let mut pairs = BTreeSet::new();
    let mut todo = Vec::new();
    let add = |a: usize, b: usize, pairs: &mut BTreeSet<(usize, usize)>, todo: &mut Vec<(usize, usize)>| {
        if a != b && pairs.insert((a.min(b), a.max(b))) {
            todo.push((a.min(b), a.max(b)));
        }
    };
    for sets in routes {
        for set in sets {
            for (i, &a) in set.iter().enumerate() {
                for &b in &set[i + 1..] {
                    add(a, b, &mut pairs, &mut todo);
                }
            }
        }
    }
    while let Some((u, v)) = todo.pop() {
        for su in &routes[u] {
            for sv in &routes[v] {
                for &a in su {
                    for &b in sv {
                        add(a, b, &mut pairs, &mut todo);
                    }
                }
            }
        }
    }
    pairs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(succ: &[&[usize]], ends: &[usize]) -> Digraph {
        Digraph {
            succ: succ.iter().map(|s| s.to_vec()).collect(),
            ends: (0..succ.len()).map(|n| ends.contains(&n)).collect(),
        }
    }

    #[test]
    fn reachability_both_ways() {
        // 0 -> 1 -> END, 2 -> 2 (orphan self-loop)
        let d = g(&[&[1], &[], &[2]], &[1]);
        assert_eq!(d.reachable(0), vec![true, true, false]);
        assert_eq!(d.reaches_end(), vec![true, true, false]);
    }

    #[test]
    fn finds_every_cycle_and_a_path_round_it() {
        // 0 -> 1 -> 2 -> 1, 2 -> 3 -> 3
        let d = g(&[&[1], &[2], &[1, 3], &[3]], &[]);
        assert_eq!(d.cycles(), vec![vec![1, 2], vec![3]]);
        assert_eq!(d.cycle_path(&[1, 2]), vec![1, 2, 1]);
        assert_eq!(d.cycle_path(&[3]), vec![3, 3]);
    }

    #[test]
    fn cycle_path_follows_edges() {
        // 0 -> 2 -> 1 -> 0
        let d = g(&[&[2], &[0], &[1]], &[]);
        assert_eq!(d.cycle_path(&[0, 1, 2]), vec![0, 2, 1, 0]);
    }

    #[test]
    fn fan_out_branches_are_co_active_and_so_are_their_successors() {
        // 0 -> [1, 2]; 1 -> 3; 2 -> 4; 3 -> 5; 4 -> 5
        let routes = vec![vec![vec![1, 2]], vec![vec![3]], vec![vec![4]], vec![vec![5]], vec![vec![5]], vec![]];
        let pairs = co_active(&routes);
        assert!(pairs.contains(&(1, 2)));
        assert!(pairs.contains(&(3, 4)));
        // The join runs once: never paired with itself, and 0 runs alone.
        assert!(!pairs.iter().any(|&(a, b)| a == 0 || b == 0 || a == b));
    }

    #[test]
    fn a_plain_chain_has_no_co_active_pairs() {
        let routes = vec![vec![vec![1]], vec![vec![2], vec![0]], vec![]];
        assert!(co_active(&routes).is_empty());
    }
}

/// The algorithms against brute-force models on small random graphs: a
/// transitive closure for reachability and cycles, and an explicit search
/// over the sets of nodes a super-step can hold for `co_active`.
#[cfg(test)]
mod props {
    use std::collections::{BTreeSet, HashSet};

    use proptest::prelude::*;

    use super::*;

    /// Up to 6 nodes, each with up to 3 successors and maybe an exit.
    fn digraph() -> impl Strategy<Value = Digraph> {
        (1usize..=6).prop_flat_map(|n| {
            (prop::collection::vec(prop::collection::vec(0..n, 0..=3), n), prop::collection::vec(any::<bool>(), n))
                .prop_map(|(succ, ends)| Digraph { succ, ends })
        })
    }

    /// `closure[a][b]`: a path of at least one edge leads from `a` to `b`.
    fn closure(g: &Digraph) -> Vec<Vec<bool>> {
        let n = g.len();
        let mut c = vec![vec![false; n]; n];
        for (a, succ) in g.succ.iter().enumerate() {
            for &b in succ {
                c[a][b] = true;
            }
        }
        for k in 0..n {
            for a in 0..n {
                for b in 0..n {
                    if c[a][k] && c[k][b] {
                        c[a][b] = true;
                    }
                }
            }
        }
        c
    }

    /// Per node, the target sets of its `goto!` call sites.
    fn routes() -> impl Strategy<Value = Vec<Vec<Vec<usize>>>> {
        (1usize..=5).prop_flat_map(|n| {
            prop::collection::vec(prop::collection::vec(prop::collection::vec(0..n, 1..=3), 0..=2), n)
        })
    }

    /// Every set of nodes one super-step can run, starting from any call
    /// site's targets: each active node takes one of its call sites, and the
    /// next step runs the union of the chosen targets.
    fn co_active_by_search(routes: &[Vec<Vec<usize>>]) -> BTreeSet<(usize, usize)> {
        let mut seen: HashSet<BTreeSet<usize>> = HashSet::new();
        let mut todo: Vec<BTreeSet<usize>> =
            routes.iter().flatten().map(|site| site.iter().copied().collect()).collect();
        while let Some(active) = todo.pop() {
            if !seen.insert(active.clone()) {
                continue;
            }
            let mut nexts = vec![BTreeSet::new()];
            for &node in &active {
                if routes[node].is_empty() {
                    continue;
                }
                nexts = nexts
                    .iter()
                    .flat_map(|next| {
                        routes[node].iter().map(move |site| {
                            let mut next = next.clone();
                            next.extend(site.iter().copied());
                            next
                        })
                    })
                    .collect();
            }
            todo.extend(nexts);
        }
        let mut pairs = BTreeSet::new();
        for set in &seen {
            for &a in set {
                for &b in set {
                    if a < b {
                        pairs.insert((a, b));
                    }
                }
            }
        }
        pairs
    }

    proptest! {
        #[test]
        fn reachable_matches_the_closure(g in digraph()) {
            let c = closure(&g);
            for (start, from_start) in c.iter().enumerate() {
                let want: Vec<bool> = (0..g.len()).map(|b| b == start || from_start[b]).collect();
                prop_assert_eq!(g.reachable(start), want);
            }
        }

        #[test]
        fn reaches_end_matches_the_closure(g in digraph()) {
            let c = closure(&g);
            let want: Vec<bool> =
                (0..g.len()).map(|a| g.ends[a] || (0..g.len()).any(|b| c[a][b] && g.ends[b])).collect();
            prop_assert_eq!(g.reaches_end(), want);
        }

        #[test]
        fn cycles_are_the_cyclic_classes_of_mutual_reachability(g in digraph()) {
            let c = closure(&g);
            let mut want: Vec<Vec<usize>> = (0..g.len())
                .filter(|&a| c[a][a])
                .map(|a| (0..g.len()).filter(|&b| a == b || (c[a][b] && c[b][a])).collect())
                .collect();
            want.sort();
            want.dedup();
            prop_assert_eq!(g.cycles(), want);
        }

        #[test]
        fn cycle_path_is_a_simple_cycle_inside_its_component(g in digraph()) {
            for scc in g.cycles() {
                let path = g.cycle_path(&scc);
                prop_assert!(path.len() >= 2);
                prop_assert_eq!(path[0], scc[0]);
                prop_assert_eq!(path[path.len() - 1], scc[0]);
                for w in path.windows(2) {
                    prop_assert!(g.succ[w[0]].contains(&w[1]), "{:?} is not an edge of {:?}", w, g);
                }
                let inner: BTreeSet<usize> = path[..path.len() - 1].iter().copied().collect();
                prop_assert_eq!(inner.len(), path.len() - 1, "{:?} repeats a node", path);
                prop_assert!(inner.iter().all(|n| scc.contains(n)));
            }
        }

        #[test]
        fn co_active_matches_a_search_over_super_steps(routes in routes()) {
            prop_assert_eq!(co_active(&routes), co_active_by_search(&routes));
        }
    }
}
