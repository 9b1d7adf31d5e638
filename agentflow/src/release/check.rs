//! The lock check `#[graph]` generates as a test for a released graph: write the lock of the
//! graph's version (`AGENTFLOW_LOCK=write`), or compare the graph with the lock of its version
//! and with every older lock.

use std::fmt;
use std::path::{Path, PathBuf};

use super::declaration::Release;
use super::lock::{GraphLock, LockParts, Lockable};
use super::lock_error::LockError;
use super::{changes, older_locks};

/// The environment variable that makes [`check_lock`] write the lock instead of checking it:
/// `AGENTFLOW_LOCK=write`.
pub const LOCK_ENV: &str = "AGENTFLOW_LOCK";

/// What [`check_lock`] does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockMode {
    /// Compare the graph with its locks.
    Check,
    /// Write (or rewrite) the lock of the graph's version.
    Write,
}

impl LockMode {
    /// The mode `AGENTFLOW_LOCK` asks for: `write` writes, unset, empty or `check` checks.
    pub fn from_env() -> Result<Self, LockError> {
        match std::env::var(LOCK_ENV) {
            Err(std::env::VarError::NotPresent) => Ok(LockMode::Check),
            Ok(v) if v.is_empty() || v == "check" => Ok(LockMode::Check),
            Ok(v) if v == "write" => Ok(LockMode::Write),
            Ok(value) => Err(LockError::Mode { value }),
            Err(std::env::VarError::NotUnicode(v)) => Err(LockError::Mode { value: v.to_string_lossy().into() }),
        }
    }
}

/// What [`check_lock`] found or did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockReport {
    /// The graph's id.
    pub id: String,
    /// The graph's version.
    pub version: u32,
    /// The lock file of that version.
    pub file: PathBuf,
    /// What became of it.
    pub outcome: LockOutcome,
    /// The older versions whose locks the graph was checked against, oldest first.
    pub older: Vec<u32>,
}

/// What [`check_lock`] did with the lock of the graph's version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockOutcome {
    /// Wrote it (`AGENTFLOW_LOCK=write`); `changed` is false when the file held the same lock.
    Written {
        /// Whether the file's content changed.
        changed: bool,
    },
    /// The graph matches it.
    Matched,
    /// There is none: the version was never locked, and may still change.
    Unlocked,
}

impl fmt::Display for LockReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (id, version, file) = (&self.id, self.version, self.file.display());
        match self.outcome {
            LockOutcome::Written { changed: true } => {
                write!(f, "wrote the lock of graph `{id}` version {version}: {file}")?
            }
            LockOutcome::Written { changed: false } => {
                write!(f, "the lock of graph `{id}` version {version} was up to date: {file}")?
            }
            LockOutcome::Matched => write!(f, "graph `{id}` version {version} matches its lock {file}")?,
            LockOutcome::Unlocked => write!(
                f,
                "graph `{id}` version {version} has no lock yet ({file}): it may change freely until \
                 `agentflow graphs lock` writes one"
            )?,
        }
        if !self.older.is_empty() {
            let older: Vec<String> = self.older.iter().map(u32::to_string).collect();
            write!(f, "; checked against the locks of version {}", older.join(", "))?;
        }
        Ok(())
    }
}

/// Writes or checks the locks of a released graph; `#[graph(id = .., version = ..)]` generates
/// a test calling it (`agentflow_graph_lock`), run by `agentflow graphs check` and
/// `agentflow graphs lock`.
///
/// The locks live in `<locks>/<id>/v<N>.lock`, `<locks>` being the graph's `locks = ".."`
/// directory (`graphs` next to the source file declaring the graph when absent).
/// With `AGENTFLOW_LOCK=write` this writes the lock of the graph's version, creating the
/// directories. Otherwise it compares the graph with the lock of its version, if there is one
/// (every difference of nodes, routes, tools and their risk classes and argument schemas, state
/// fields), and with each older lock: a state field whose type changed while the state's version
/// stayed, and a tool that needs approval whose argument schema changed with no `args(..)`
/// migration for it.
///
/// ```no_run
/// # use agentflow::prelude::*;
/// # fn check<S: agentflow::State>(graph: &agentflow::CompiledGraph<S>) {
/// if let Err(e) = agentflow::release::check_lock(graph) {
///     panic!("{e}");
/// }
/// # }
/// ```
pub fn check_lock(graph: &impl Lockable) -> Result<LockReport, LockError> {
    let mode = LockMode::from_env()?;
    let parts = graph.lock_parts();
    let dir = lock_dir(parts.release)?;
    run(parts, &dir, mode)
}

/// [`check_lock`] with the lock directory and the mode given.
#[doc(hidden)]
pub fn check_lock_in(graph: &impl Lockable, dir: &Path, mode: LockMode) -> Result<LockReport, LockError> {
    run(graph.lock_parts(), dir, mode)
}

/// The lock directory of a graph: the one `#[graph]` recorded (`locks = ".."`, absolute), or
/// for a graph that records none, the crate's `graphs/` directory, found through
/// `CARGO_MANIFEST_DIR` (cargo sets it for the tests it runs).
fn lock_dir(release: &Release) -> Result<PathBuf, LockError> {
    if !release.locks.is_empty() {
        return Ok(PathBuf::from(release.locks));
    }
    match std::env::var_os("CARGO_MANIFEST_DIR") {
        Some(dir) if !dir.is_empty() => Ok(PathBuf::from(dir).join("graphs")),
        _ => Err(LockError::NoDirectory { id: release.id.into() }),
    }
}

fn run(parts: LockParts<'_>, dir: &Path, mode: LockMode) -> Result<LockReport, LockError> {
    let release = *parts.release;
    let lock = GraphLock::from_parts(parts)?;
    let file = GraphLock::file(dir, release.id, release.version);
    let mut report = LockReport {
        id: release.id.into(),
        version: release.version,
        file,
        outcome: LockOutcome::Unlocked,
        older: vec![],
    };
    if mode == LockMode::Write {
        report.outcome = LockOutcome::Written { changed: write(&report.file, &lock)? };
        return Ok(report);
    }
    let mut changes = Vec::new();
    match GraphLock::read(&report.file) {
        Ok(locked) => {
            changes = changes::changes(locked.value(), lock.value());
            report.outcome = LockOutcome::Matched;
        }
        Err(LockError::Unreadable { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let mut problems = Vec::new();
    let mut older = Vec::new();
    for (version, path) in older_locks(&dir.join(release.id), release.version)? {
        older.push(GraphLock::read(&path)?);
        report.older.push(version);
    }
    for (i, locked) in older.iter().enumerate() {
        let later = older.get(i + 1).map(GraphLock::value);
        problems.extend(older_locks::problems(locked.value(), later, lock.value(), release.migrations));
    }
    if changes.is_empty() && problems.is_empty() {
        Ok(report)
    } else {
        Err(LockError::Mismatch { id: report.id, version: report.version, lock: report.file, changes, problems })
    }
}

/// Writes the lock unless the file holds it already; whether the file changed.
fn write(file: &Path, lock: &GraphLock) -> Result<bool, LockError> {
    let text = lock.to_text();
    if std::fs::read_to_string(file).is_ok_and(|held| held == text) {
        return Ok(false);
    }
    if let Some(parent) = file.parent() {
        std::fs::create_dir_all(parent).map_err(|source| LockError::Unwritable { path: parent.into(), source })?;
    }
    std::fs::write(file, text).map_err(|source| LockError::Unwritable { path: file.into(), source })?;
    Ok(true)
}

/// The locks `v<K>.lock` in a graph's lock directory with `K` below `version`, oldest first;
/// a file named like a lock whose version has leading zeros (`v01.lock`) is refused.
fn older_locks(dir: &Path, version: u32) -> Result<Vec<(u32, PathBuf)>, LockError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
        Err(source) => return Err(LockError::Unreadable { path: dir.into(), source }),
    };
    let mut found = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| LockError::Unreadable { path: dir.into(), source })?;
        let name = entry.file_name();
        if let Some(version) = name.to_str().and_then(zero_padded_version) {
            return Err(LockError::Misnamed { path: entry.path(), version });
        }
        let Some(k) = name.to_str().and_then(lock_version) else { continue };
        if k < version {
            found.push((k, entry.path()));
        }
    }
    found.sort();
    Ok(found)
}

/// The digits of a file name of the form `v<digits>.lock`.
fn lock_digits(name: &str) -> Option<&str> {
    let digits = name.strip_prefix('v')?.strip_suffix(".lock")?;
    (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())).then_some(digits)
}

/// The version a lock file's name gives: `v3.lock` -> 3; none for a version written with
/// leading zeros (`v03.lock`).
fn lock_version(name: &str) -> Option<u32> {
    lock_digits(name).filter(|d| !d.starts_with('0')).and_then(|d| d.parse().ok())
}

/// The version a file named like a lock writes with leading zeros: `v03.lock` -> 3.
fn zero_padded_version(name: &str) -> Option<u32> {
    lock_digits(name).filter(|d| d.len() > 1 && d.starts_with('0')).and_then(|d| d.parse().ok()).filter(|&v| v > 0)
}

#[cfg(test)]
mod tests;
