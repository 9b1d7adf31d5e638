//! Drift: what changed in a tool the program was typed against, at which JSON pointer, and
//! the refusal's text. [`compare`](super::compare) finds it.
//!
//! For every tool of the snapshot, the live tool of the same name is compared on what a
//! program was typed and prompted with: `description`, `inputSchema` and `outputSchema`. Each
//! difference is a [`Change`] at an RFC 6901 pointer into the tool's object, down to the leaves:
//! objects are walked key by key, arrays of equal length element by element, and an array whose
//! length changed is one change at the array's pointer. `title` and `annotations` are not
//! compared (a display name, and hints no program trusts). A live tool the snapshot does not
//! have is not drift: no program was typed against it.

use serde_json::Value;

/// One tool of the snapshot that the live server no longer offers as it was.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Drift {
    /// The tool's name.
    pub tool: String,
    /// What changed; empty when the tool vanished.
    pub changes: Vec<Change>,
    /// The live server no longer lists the tool.
    pub vanished: bool,
}

/// One change inside a tool, at a JSON pointer into the tool (`/inputSchema/properties/a/type`).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Change {
    /// Where, as an RFC 6901 pointer into the tool's object.
    pub pointer: String,
    /// The snapshot's value there (`None`: absent).
    pub before: Option<Value>,
    /// The live value there (`None`: absent).
    pub after: Option<Value>,
}

/// The longest value a refusal's text shows, in characters; longer ones are cut.
const SHOWN_CHARS: usize = 160;

/// `key` escaped for a JSON pointer (RFC 6901): `~` as `~0`, `/` as `~1`.
pub(crate) fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// A value as a refusal shows it: compact JSON, cut past [`SHOWN_CHARS`]; `(absent)`.
fn shown(value: Option<&Value>) -> String {
    let Some(value) = value else { return "(absent)".to_string() };
    let text = value.to_string();
    match text.char_indices().nth(SHOWN_CHARS) {
        Some((at, _)) => format!("{}… ({} bytes)", &text[..at], text.len()),
        None => text,
    }
}

/// The refusal's text: the server, then one line per change, and what to do.
pub(crate) fn describe(server: &str, drift: &[Drift]) -> String {
    let mut text = format!("MCP server `{server}` no longer offers the tools this program was typed against:");
    for d in drift {
        if d.vanished {
            text.push_str(&format!("\n  {}: no longer offered by the server", d.tool));
        }
        for c in &d.changes {
            text.push_str(&format!(
                "\n  {}: {}: {} -> {}",
                d.tool,
                c.pointer,
                shown(c.before.as_ref()),
                shown(c.after.as_ref())
            ));
        }
    }
    text.push_str(&format!(
        "\nthe program was typed against the committed snapshot; review the change, then take the snapshot again \
         with `agentflow mcp snapshot ... > mcp/{server}.json` and rebuild"
    ));
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pointers_escape_tilde_then_slash() {
        assert_eq!(escape("a/b"), "a~1b");
        assert_eq!(escape("m~n"), "m~0n");
        // `~1` in a key is a tilde and a one, not a slash: it must read back as `~01`.
        assert_eq!(escape("~1"), "~01");
        assert_eq!(escape("/~"), "~1~0");
        assert_eq!(escape("plain"), "plain");
    }

    #[test]
    fn the_text_names_the_server_each_change_and_what_to_do() {
        let drift = [
            Drift {
                tool: "get-sum".into(),
                vanished: false,
                changes: vec![
                    Change {
                        pointer: "/inputSchema/properties/a/type".into(),
                        before: Some(json!("number")),
                        after: Some(json!("string")),
                    },
                    Change { pointer: "/outputSchema".into(), before: None, after: Some(json!({"type": "object"})) },
                ],
            },
            Drift { tool: "gone".into(), vanished: true, changes: Vec::new() },
        ];
        let text = describe("everything", &drift);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("MCP server `everything`"), "{text}");
        assert_eq!(lines[1], r#"  get-sum: /inputSchema/properties/a/type: "number" -> "string""#);
        assert_eq!(lines[2], r#"  get-sum: /outputSchema: (absent) -> {"type":"object"}"#);
        assert_eq!(lines[3], "  gone: no longer offered by the server");
        assert!(lines[4].contains("agentflow mcp snapshot ... > mcp/everything.json"), "{text}");
    }

    #[test]
    fn long_values_are_cut_in_the_text() {
        let long = "x".repeat(1000);
        let text = shown(Some(&json!(long)));
        assert!(text.len() < 300 && text.ends_with("(1002 bytes)"), "{text}");
    }
}
