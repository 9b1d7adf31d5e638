//! Files a macro reads by a path relative to the source file that calls it: the MCP snapshot
//! of `mcp_tools!`, the lock directory of a released `#[graph]`.

use std::path::{Path, PathBuf};

/// `path`, relative to the directory of the file that calls the macro (or, where the compiler
/// does not say which file that is, to the crate's manifest directory), made absolute.
pub fn resolve(path: &str) -> PathBuf {
    let path = Path::new(path);
    let base = proc_macro::Span::call_site()
        .local_file()
        .filter(|f| f.is_file())
        .and_then(|f| f.parent().map(Path::to_path_buf))
        .or_else(|| std::env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from))
        .unwrap_or_default();
    let joined = base.join(path);
    joined.canonicalize().unwrap_or_else(|_| lexical(&std::path::absolute(&joined).unwrap_or(joined)))
}

/// `a/b/../c` -> `a/c`, for a path that does not exist (so cannot be canonicalized) in a message.
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            std::path::Component::ParentDir if out.file_name().is_some() => {
                out.pop();
            }
            // Above the root is the root.
            std::path::Component::ParentDir if out.has_root() => {}
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_file_is_named_without_dot_dots() {
        assert_eq!(lexical(Path::new("/w/ui/fail/../../mcp/./x.json")), PathBuf::from("/w/mcp/x.json"));
        assert_eq!(lexical(Path::new("/../x.json")), PathBuf::from("/x.json"));
    }
}
