//! Subgraph children, told by the parent each child's record names
//! ([`ThreadRecord::parent`]), never by the shape of an id.

use std::collections::HashMap;

use crate::record::ThreadRecord;

/// The subgraph children of thread `ancestor` among `threads`, at every level: the threads
/// whose parents lead to it. Each comes after its parent; siblings in the order of `threads`.
/// A thread of its own is none of them, whatever its id.
pub fn descendants<'a>(threads: &'a [ThreadRecord], ancestor: &str) -> Vec<&'a ThreadRecord> {
    let mut children: HashMap<&str, Vec<&ThreadRecord>> = HashMap::new();
    for t in threads {
        if let Some(parent) = t.parent.as_deref() {
            children.entry(parent).or_default().push(t);
        }
    }
    let mut out = Vec::new();
    // Depth first, parents before their children. A chain that loops back (only an edited
    // store holds one) is walked once.
    let mut seen = std::collections::HashSet::from([ancestor]);
    let mut stack: Vec<&ThreadRecord> = children.get(ancestor).into_iter().flatten().rev().copied().collect();
    while let Some(t) = stack.pop() {
        if !seen.insert(t.id.as_str()) {
            continue;
        }
        out.push(t);
        stack.extend(children.get(t.id.as_str()).into_iter().flatten().rev().copied());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::descendants;
    use crate::record::ThreadRecord;

    fn t(id: &str, parent: Option<&str>) -> ThreadRecord {
        let record = ThreadRecord::new(id, "o", "fp", 1, 0);
        match parent {
            Some(p) => record.child_of(p),
            None => record,
        }
    }

    #[test]
    fn children_are_the_threads_that_name_their_parent_at_every_level() {
        let threads = [
            t("acct", None),
            t("acct/2", None),
            t("acct/write.0.0.review", Some("acct")),
            t("acct/write.0.0.review/check.1.0.vet", Some("acct/write.0.0.review")),
            t("acct/write.0.1.review", None),
            t("acct-2/write.0.0.review", Some("acct-2")),
            t("loop/a.0.0.b", Some("loop/a.0.0.b")),
        ];
        let ids = |root: &str| descendants(&threads, root).into_iter().map(|t| t.id.as_str()).collect::<Vec<_>>();
        assert_eq!(ids("acct"), ["acct/write.0.0.review", "acct/write.0.0.review/check.1.0.vet"]);
        assert_eq!(ids("acct/write.0.0.review"), ["acct/write.0.0.review/check.1.0.vet"]);
        assert!(ids("acct/2").is_empty());
        assert!(ids("loop/a.0.0.b").is_empty(), "a thread is not its own child");
    }
}
