//! A graph's lock files as the macro reads them: the `nodes` and `tools` of each
//! `<locks>/<id>/v<N>.lock`, parsed into plain data, and the `nodes` JSON the macro hands the
//! runtime to write into the current version's lock. Reading the files is the one impure step;
//! [`parse_lock`] and [`shape_json`] are pure.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::keywords::migrate as kw;

/// The token-level shape of one node, as a lock's `nodes` holds it. Lists are sorted.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeShape {
    /// Where it may go, `END` included.
    pub goto: Vec<String>,
    /// `writes = [..]`, if declared.
    pub writes: Option<Vec<String>>,
    /// `tools = [..]`, as written.
    pub tools: Vec<String>,
    /// `subgraphs = [..]`.
    pub subgraphs: Vec<String>,
    /// `interrupt`.
    pub interrupt: bool,
    /// `sleep`.
    pub sleep: bool,
    /// Whether it is a map worker (has a `#[payload]`).
    pub map: bool,
}

/// A graph's shape: node name -> its shape.
pub type Shape = BTreeMap<String, NodeShape>;

/// What the macro reads of one lock.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Lock {
    /// Its `nodes`.
    pub nodes: Shape,
    /// Its `tools`: tool name -> whether a policy may hold a call for approval.
    pub tools: BTreeMap<String, bool>,
}

/// One `v<N>.lock` of the graph's lock directory.
#[derive(Debug, Clone)]
pub struct LockFile {
    /// `N`.
    pub version: u32,
    /// Its absolute path.
    pub path: PathBuf,
    /// Whether its bytes could be read (so `include_bytes!` can track it).
    pub readable: bool,
    /// The lock, or what is wrong with the file.
    pub lock: Result<Lock, String>,
}

/// The locks of a released graph.
#[derive(Debug, Clone, Default)]
pub struct Locks {
    /// `<locks>/<id>`, absolute.
    pub dir: PathBuf,
    /// Its `v<N>.lock` files for N up to the graph's version, by version.
    pub files: Vec<LockFile>,
    /// Why the directory could not be listed (it exists but is unreadable).
    pub error: Option<String>,
    /// Files named like a lock whose version is written with leading zeros (`v01.lock`), which
    /// no version reads.
    pub misnamed: Vec<PathBuf>,
}

impl Locks {
    /// The lock of version `n`, if there is a readable one.
    pub fn get(&self, n: u32) -> Option<&Lock> {
        self.files.iter().find(|f| f.version == n).and_then(|f| f.lock.as_ref().ok())
    }
}

/// Reads `<dir>/v<N>.lock` for every N in `1..=version`. A missing directory is no locks.
pub fn read_locks(dir: PathBuf, id: &str, version: u32) -> Locks {
    let mut locks = Locks { dir, ..Locks::default() };
    let entries = match std::fs::read_dir(&locks.dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return locks,
        Err(e) => {
            locks.error = Some(format!("cannot list it: {e}"));
            return locks;
        }
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if name.to_str().and_then(zero_padded_version).is_some() {
            locks.misnamed.push(entry.path());
            continue;
        }
        let Some(n) = name.to_str().and_then(lock_version) else { continue };
        if n == 0 || n > version {
            continue;
        }
        let path = entry.path();
        let (readable, lock) = match std::fs::read(&path) {
            Ok(bytes) => (true, parse_lock(&bytes, id, n)),
            Err(e) => (false, Err(format!("cannot read it: {e}"))),
        };
        locks.files.push(LockFile { version: n, path, readable, lock });
    }
    locks.files.sort_by_key(|f| f.version);
    locks.misnamed.sort();
    locks
}

/// The digits of a file named `v<digits>.lock`.
fn lock_digits(file_name: &str) -> Option<&str> {
    let digits = file_name.strip_prefix(kw::LOCK_PREFIX)?.strip_suffix(kw::LOCK_SUFFIX)?;
    (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())).then_some(digits)
}

/// `N` of a file named `v<N>.lock`, `N` written without leading zeros.
pub fn lock_version(file_name: &str) -> Option<u32> {
    lock_digits(file_name).filter(|d| !d.starts_with('0')).and_then(|d| d.parse().ok())
}

/// `N` of a file named like a lock with `N` written with leading zeros (`v01.lock` -> 1).
pub fn zero_padded_version(file_name: &str) -> Option<u32> {
    lock_digits(file_name).filter(|d| d.len() > 1 && d.starts_with('0')).and_then(|d| d.parse().ok()).filter(|&n| n > 0)
}

/// The `nodes` and `tools` of the lock of version `version` of graph `id`, or what is wrong
/// with it, said so that the reader knows what to fix.
pub fn parse_lock(bytes: &[u8], id: &str, version: u32) -> Result<Lock, String> {
    let value: Value = serde_json::from_slice(bytes).map_err(|e| format!("it is not JSON: {e}"))?;
    let Value::Object(root) = value else { return Err("it is not a JSON object".into()) };
    match root.get("format") {
        Some(f) if f.as_u64() == Some(kw::LOCK_FORMAT) => {}
        Some(f) => {
            return Err(format!(
                "its `format` is {f}, and this agentflow reads format {}: update agentflow, or lock it again",
                kw::LOCK_FORMAT
            ));
        }
        None => return Err("it has no `format`: it is no agentflow lock".into()),
    }
    if let Some(found) = root.get("id")
        && found.as_str() != Some(id)
    {
        return Err(format!("it is the lock of graph {found}, not of `{id}`"));
    }
    if let Some(found) = root.get("version")
        && found.as_u64() != Some(u64::from(version))
    {
        return Err(format!("it says `\"version\": {found}`, but its name says version {version}"));
    }
    let nodes = object(&root, "nodes", "")?;
    let mut shape = Shape::new();
    for (name, node) in nodes {
        let at = format!("nodes.{name}");
        let Value::Object(node) = node else { return Err(format!("`{at}` is not an object")) };
        let writes = match node.get("writes") {
            Some(Value::Null) => None,
            _ => Some(strings(node, "writes", &at)?),
        };
        let shape_of = NodeShape {
            goto: strings(node, "goto", &at)?,
            writes,
            tools: strings(node, "tools", &at)?,
            subgraphs: strings(node, "subgraphs", &at)?,
            interrupt: flag(node, "interrupt", &at)?,
            sleep: flag(node, "sleep", &at)?,
            map: flag(node, "map", &at)?,
        };
        shape.insert(name.clone(), shape_of);
    }
    let mut tools = BTreeMap::new();
    for (name, tool) in object(&root, "tools", "")? {
        let at = format!("tools.{name}");
        let Value::Object(tool) = tool else { return Err(format!("`{at}` is not an object")) };
        tools.insert(name.clone(), flag(tool, "approval", &at)?);
    }
    Ok(Lock { nodes: shape, tools })
}

fn object<'a>(map: &'a Map<String, Value>, key: &str, at: &str) -> Result<&'a Map<String, Value>, String> {
    match map.get(key) {
        Some(Value::Object(o)) => Ok(o),
        Some(_) => Err(format!("`{at}{key}` is not an object")),
        None => Err(format!("it has no `{at}{key}`")),
    }
}

/// A sorted list of strings.
fn strings(map: &Map<String, Value>, key: &str, at: &str) -> Result<Vec<String>, String> {
    let bad = || format!("`{at}.{key}` is not a list of names");
    let Some(Value::Array(items)) = map.get(key) else {
        return Err(match map.get(key) {
            None => format!("`{at}` has no `{key}`"),
            Some(_) => bad(),
        });
    };
    let mut out: Vec<String> =
        items.iter().map(|v| v.as_str().map(str::to_string).ok_or_else(bad)).collect::<Result<_, _>>()?;
    out.sort();
    Ok(out)
}

fn flag(map: &Map<String, Value>, key: &str, at: &str) -> Result<bool, String> {
    match map.get(key) {
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(format!("`{at}.{key}` is not `true` or `false`")),
        None => Err(format!("`{at}` has no `{key}`")),
    }
}

/// The `nodes` object of a lock for `shape`, as compact JSON with sorted keys: what the runtime
/// writes into the lock of the current version.
pub fn shape_json(shape: &Shape) -> String {
    let list = |items: &[String]| Value::Array(items.iter().cloned().map(Value::String).collect());
    let mut nodes = Map::new();
    for (name, n) in shape {
        // Keys inserted in sorted order, so the text is sorted whatever map serde_json uses.
        let mut node = Map::new();
        node.insert("goto".into(), list(&n.goto));
        node.insert("interrupt".into(), Value::Bool(n.interrupt));
        node.insert("map".into(), Value::Bool(n.map));
        node.insert("sleep".into(), Value::Bool(n.sleep));
        node.insert("subgraphs".into(), list(&n.subgraphs));
        node.insert("tools".into(), list(&n.tools));
        node.insert("writes".into(), n.writes.as_deref().map_or(Value::Null, list));
        nodes.insert(name.clone(), Value::Object(node));
    }
    Value::Object(nodes).to_string()
}

/// `<dir>/v<n>.lock`.
pub fn lock_path(dir: &Path, n: u32) -> PathBuf {
    dir.join(format!("{}{n}{}", kw::LOCK_PREFIX, kw::LOCK_SUFFIX))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOCK: &str = r#"{ "format": 1, "id": "support", "version": 2, "graph": "support", "fingerprint": "x",
        "start": "triage", "max_steps": 10,
        "nodes": { "triage": { "goto": ["review", "END"], "writes": null, "tools": ["lookup"],
                               "subgraphs": [], "interrupt": true, "sleep": false, "map": false } },
        "tools": { "lookup": { "risk": "read", "approval": false, "schema": {} } },
        "state": { "name": "Doc", "version": 1, "fields": [] } }"#;

    #[test]
    fn a_lock_is_read_with_its_lists_sorted() {
        let lock = parse_lock(LOCK.as_bytes(), "support", 2).unwrap();
        let triage = &lock.nodes["triage"];
        assert_eq!(triage.goto, ["END", "review"]);
        assert_eq!(triage.writes, None);
        assert!(triage.interrupt && !triage.sleep && !triage.map);
        assert_eq!(lock.tools.get("lookup"), Some(&false));
    }

    #[test]
    fn a_malformed_lock_says_what_is_wrong() {
        assert!(parse_lock(b"{", "support", 2).unwrap_err().starts_with("it is not JSON"));
        assert_eq!(
            parse_lock(LOCK.as_bytes(), "billing", 2).unwrap_err(),
            "it is the lock of graph \"support\", not of `billing`"
        );
        assert_eq!(
            parse_lock(LOCK.as_bytes(), "support", 3).unwrap_err(),
            "it says `\"version\": 2`, but its name says version 3"
        );
        let no_goto = LOCK.replace(r#""goto": ["review", "END"], "#, "");
        assert_eq!(parse_lock(no_goto.as_bytes(), "support", 2).unwrap_err(), "`nodes.triage` has no `goto`");
        let format_2 = LOCK.replace(r#""format": 1"#, r#""format": 2"#);
        assert!(parse_lock(format_2.as_bytes(), "support", 2).unwrap_err().contains("this agentflow reads format 1"));
    }

    #[test]
    fn the_shape_json_reads_back_as_the_same_shape() {
        let lock = parse_lock(LOCK.as_bytes(), "support", 2).unwrap();
        let json = shape_json(&lock.nodes);
        assert_eq!(
            json,
            r#"{"triage":{"goto":["END","review"],"interrupt":true,"map":false,"sleep":false,"subgraphs":[],"tools":["lookup"],"writes":null}}"#
        );
        let relocked = LOCK.replace(
            &LOCK[LOCK.find(r#""nodes""#).unwrap()..LOCK.find(r#""tools": {"#).unwrap()],
            &format!("\"nodes\": {json},\n        "),
        );
        assert_eq!(parse_lock(relocked.as_bytes(), "support", 2).unwrap().nodes, lock.nodes);
    }

    #[test]
    fn only_v_n_lock_files_are_locks() {
        assert_eq!(lock_version("v12.lock"), Some(12));
        assert_eq!(lock_version("v.lock"), None);
        assert_eq!(lock_version("v1.lock.bak"), None);
        assert_eq!(lock_version("v-1.lock"), None);
        assert_eq!(lock_version("v01.lock"), None);
        assert_eq!(zero_padded_version("v01.lock"), Some(1));
        assert_eq!(zero_padded_version("v1.lock"), None);
        assert_eq!(zero_padded_version("v00.lock"), None);
    }

    #[test]
    fn a_lock_named_with_leading_zeros_is_listed_as_misnamed_not_read() {
        let dir = std::env::temp_dir().join(format!("agentflow-macro-locks-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("v01.lock"), LOCK).unwrap();
        let locks = read_locks(dir.clone(), "support", 2);
        assert!(locks.files.is_empty(), "{:?}", locks.files);
        assert_eq!(locks.misnamed, [dir.join("v01.lock")]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
