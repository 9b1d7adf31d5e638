//! The OpenAPI validator the server tests run: `@apidevtools/swagger-parser`, installed into
//! `web/node_modules` by `npm ci --prefix web` (the lockfile pins it), driven by
//! `web/validate.mjs`.
// Each area binary includes this module and uses a part of it.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The repository's `web/` folder.
pub fn web_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("web")
}

/// Whether the validator is installed (and `node` runs); when not, prints once why the check
/// is skipped. Under CI (`CI=true`) a missing install fails.
pub fn validator_installed() -> bool {
    web_package_installed("@apidevtools/swagger-parser", "the OpenAPI validation")
}

/// Whether npm package `package` is installed under `web/` and `node` runs; when not, prints
/// once why `what` is skipped. Under CI (`CI=true`) a missing install fails.
pub fn web_package_installed(package: &str, what: &str) -> bool {
    static SKIPPED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let installed = web_dir().join("node_modules").join(package).join("package.json").exists();
    let node = Command::new("node").arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status();
    let why = match (installed, node.is_ok_and(|s| s.success())) {
        (true, true) => return true,
        (false, _) => "web/node_modules is not installed",
        (true, false) => "node is not on PATH",
    };
    assert!(
        std::env::var("CI").map_or(true, |v| v != "true"),
        "{why} under CI: run `npm ci --prefix web` (with Node.js installed) before cargo test"
    );
    let mut skipped = SKIPPED.lock().unwrap_or_else(|p| p.into_inner());
    if !skipped.iter().any(|w| w == what) {
        skipped.push(what.to_string());
        let _ = writeln!(std::io::stderr(), "SKIPPED {what}: {why} (run `npm ci --prefix web`)");
    }
    false
}

/// Validates the OpenAPI document in `file`: `None` when the validator is not installed
/// (skipped), else `Ok(what it printed)` for a valid document or `Err(the errors)`.
pub fn validate(file: &Path) -> Option<Result<String, String>> {
    if !validator_installed() {
        return None;
    }
    let out =
        Command::new("node").arg(web_dir().join("validate.mjs")).arg(file).output().expect("run node web/validate.mjs");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    Some(if out.status.success() { Ok(text) } else { Err(text) })
}
