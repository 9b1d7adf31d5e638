//! The ids of subgraph children's threads: `{parent}/` and one level per
//! nesting, `{node}[.{instance}].{seq}.{index}.{subgraph}` (see
//! [`Ctx::subgraph`](crate::Ctx::subgraph)). Thread ids of their own may hold
//! a `/` too, so a child is told by the shape of its levels, not by a prefix.

/// Whether thread `id` is a subgraph child of thread `parent`, at any depth: `{parent}/` and one
/// or more levels `{node}[.{instance}].{seq}.{index}.{subgraph}` (each separated by `/`), as
/// [`Ctx::subgraph`](crate::Ctx::subgraph) names them. A thread of its own whose id merely starts with `{parent}/`
/// (`acct/2` beside `acct`) is not one.
pub(crate) fn is_child_thread(parent: &str, id: &str) -> bool {
    let Some(rest) = id.strip_prefix(parent).and_then(|r| r.strip_prefix('/')) else { return false };
    !rest.is_empty() && rest.split('/').all(is_level)
}

/// One level of a child thread's id: `{node}[.{instance}].{seq}.{index}.{subgraph}`.
fn is_level(level: &str) -> bool {
    // Node and graph names are Rust identifiers (`r#type` included); `.` and `/` never occur in one.
    let ident = |s: &str| !s.is_empty() && !s.starts_with(|c: char| c.is_ascii_digit());
    let number = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let parts: Vec<&str> = level.split('.').collect();
    match parts.as_slice() {
        [node, seq, index, name] => ident(node) && number(seq) && number(index) && ident(name),
        [node, instance, seq, index, name] => {
            ident(node) && number(instance) && number(seq) && number(index) && ident(name)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::is_child_thread;

    #[test]
    fn child_threads_are_told_from_threads_that_share_a_prefix() {
        assert!(is_child_thread("acct", "acct/write.0.0.review"));
        assert!(is_child_thread("acct", "acct/write.3.7.1.review"));
        assert!(is_child_thread("acct", "acct/write.0.0.review/check.2.0.vet"));
        assert!(is_child_thread("a/b", "a/b/write.0.0.review"), "a parent id with a `/` of its own");
        assert!(!is_child_thread("acct", "acct"));
        assert!(!is_child_thread("acct", "acct/"));
        assert!(!is_child_thread("acct", "acct/2"), "another thread, not a child");
        assert!(!is_child_thread("acct", "acct/write.0.0.review/notes"));
        assert!(!is_child_thread("acct", "acct-2/write.0.0.review"));
        assert!(!is_child_thread("acct", "acct/write.x.0.review"));
        assert!(is_child_thread("acct", "acct/r#type.0.0.r#match"), "raw identifiers");
    }
}
