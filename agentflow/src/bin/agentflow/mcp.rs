//! `mcp snapshot`: take the snapshot of an MCP server's tool list that `mcp_tools!` types a
//! program's tools from, and print it (`> mcp/everything.json`).
//!
//! `--stdio "CMD ARG.."` starts the server as a child process (the command line is split on
//! spaces; quote an argument with `'..'` or `".."`; its environment holds `PATH` and each
//! `--env K=V`, nothing else); `--http URL` reaches one over streamable HTTP, sending each
//! `--header "Name: value"` and, with `--bearer-env VAR`, `Authorization: Bearer` with the
//! token read from the environment variable `VAR` (so it is not in the shell history). `--tool NAME`
//! (repeatable) keeps only the named tools, `--exclude NAME` (repeatable) drops tools, e.g.
//! those that need client sampling or elicitation. The snapshot goes to standard output, tools
//! in name order, pretty JSON with a final newline; nothing else does.
//!
//! Exit codes: 2 for bad arguments, 3 when the server cannot be started or reached or does
//! not complete MCP's handshake, 1 for a `--tool` the server does not offer, 4 for a server
//! that breaks the protocol.

use agentflow::mcp::{McpError, McpTransport, snapshot_of};
use clap::{Args, Subcommand};

use crate::{Failure, Outcome, code};

/// `mcp`: MCP servers.
#[derive(Args, Debug)]
pub struct McpArgs {
    /// What to do.
    #[command(subcommand)]
    pub action: McpAction,
}

/// The `mcp` commands.
#[derive(Subcommand, Debug)]
pub enum McpAction {
    /// Print the snapshot of a server's tool list (commit it, e.g. as mcp/NAME.json).
    Snapshot(SnapshotArgs),
}

/// Where the server is and which tools to keep.
#[derive(Args, Debug)]
pub struct SnapshotArgs {
    /// Start the server as a child process speaking MCP on stdio: "CMD ARG..".
    #[arg(long, value_name = "\"CMD ARG..\"", required_unless_present = "http", conflicts_with = "http")]
    pub stdio: Option<String>,
    /// A variable for the child process (repeatable); it gets PATH and these, nothing else.
    #[arg(long = "env", value_name = "K=V", requires = "stdio")]
    pub env: Vec<String>,
    /// Reach the server over streamable HTTP at this URL (e.g. http://127.0.0.1:3001/mcp).
    #[arg(long, value_name = "URL")]
    pub http: Option<String>,
    /// A header sent with every HTTP request, "Name: value" (repeatable).
    #[arg(long = "header", value_name = "\"NAME: VALUE\"", requires = "http")]
    pub headers: Vec<String>,
    /// Send `Authorization: Bearer <token>`, the token read from this environment variable.
    #[arg(long = "bearer-env", value_name = "VAR", requires = "http")]
    pub bearer_env: Option<String>,
    /// Keep only this tool (repeatable).
    #[arg(long = "tool", value_name = "NAME")]
    pub tools: Vec<String>,
    /// Leave this tool out (repeatable).
    #[arg(long = "exclude", value_name = "NAME")]
    pub exclude: Vec<String>,
}

/// Runs an `mcp` command.
pub fn mcp(args: &McpArgs) -> Outcome {
    match &args.action {
        McpAction::Snapshot(args) => snapshot(args),
    }
}

fn snapshot(args: &SnapshotArgs) -> Outcome {
    let transport = transport(args)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::store(format!("cannot start the runtime: {e}")))?;
    let mut snapshot = runtime.block_on(snapshot_of(transport)).map_err(|e| match e {
        McpError::Connect { .. } => Failure::new(code::BUSY, e.to_string()),
        _ => Failure::store(e.to_string()),
    })?;
    drop(runtime);
    let mut offered: Vec<String> = snapshot.tools.iter().map(|t| t.name.clone()).collect();
    offered.sort();
    if let Some(missing) = args.tools.iter().find(|t| !offered.contains(t)) {
        return Err(Failure::not_found(format!(
            "--tool {missing}: the server offers no such tool (it offers: {})",
            offered.join(", ")
        )));
    }
    for name in args.exclude.iter().filter(|t| !offered.contains(t)) {
        eprintln!("agentflow: --exclude {name}: the server offers no such tool; nothing left out for it");
    }
    snapshot
        .tools
        .retain(|t| (args.tools.is_empty() || args.tools.contains(&t.name)) && !args.exclude.contains(&t.name));
    crate::out::write_block(&snapshot.to_file_text())
}

/// The transport the arguments name.
fn transport(args: &SnapshotArgs) -> Result<McpTransport, Failure> {
    if let Some(url) = &args.http {
        let mut transport = McpTransport::http(url.clone());
        for header in &args.headers {
            let Some((name, value)) = header.split_once(':').filter(|(n, _)| !n.trim().is_empty()) else {
                return Err(Failure::usage(format!("--header {header}: write it as \"Name: value\"")));
            };
            transport = transport.header(name.trim(), value.trim());
        }
        if let Some(var) = &args.bearer_env {
            let token = std::env::var(var).map_err(|_| {
                Failure::usage(format!(
                    "--bearer-env {var}: the environment variable `{var}` is not set (or not UTF-8)"
                ))
            })?;
            transport = transport.bearer(token);
        }
        return Ok(transport);
    }
    let line = args.stdio.as_deref().unwrap_or_default();
    let words = split(line).map_err(Failure::usage)?;
    let Some((command, rest)) = words.split_first() else {
        return Err(Failure::usage("--stdio is empty: give the server's command line, e.g. --stdio \"npx my-server\""));
    };
    let mut transport = rest.iter().fold(McpTransport::stdio(command.clone()), |t, a| t.arg(a.clone()));
    for pair in &args.env {
        let Some((key, value)) = pair.split_once('=').filter(|(k, _)| !k.is_empty()) else {
            return Err(Failure::usage(format!("--env {pair}: write it as KEY=VALUE")));
        };
        transport = transport.env(key, value);
    }
    Ok(transport)
}

/// `line` split into words at spaces; `'..'` and `".."` quote, a backslash escapes the next
/// character (not inside single quotes).
fn split(line: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut quote: Option<char> = None;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some('"') | None, '\\') => match chars.next() {
                Some(next) => word.get_or_insert_with(String::new).push(next),
                None => return Err(format!("--stdio {line}: it ends in a backslash")),
            },
            (Some(_), c) => word.get_or_insert_with(String::new).push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                word.get_or_insert_with(String::new);
            }
            (None, c) if c.is_whitespace() => words.extend(word.take()),
            (None, c) => word.get_or_insert_with(String::new).push(c),
        }
    }
    if quote.is_some() {
        return Err(format!("--stdio {line}: a quote is not closed"));
    }
    words.extend(word);
    Ok(words)
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn command_lines_split_at_spaces_with_quotes_and_escapes() {
        assert_eq!(split("  a  b\tc ").unwrap(), ["a", "b", "c"]);
        assert_eq!(
            split(r#"node "my server.js" 'it''s' x\ y "" "#).unwrap(),
            ["node", "my server.js", "its", "x y", ""]
        );
        assert_eq!(split(r#"a "b\"c""#).unwrap(), ["a", "b\"c"]);
        assert!(split("a 'b").is_err());
        assert!(split("a\\").is_err());
        assert!(split("").unwrap().is_empty());
    }
}
