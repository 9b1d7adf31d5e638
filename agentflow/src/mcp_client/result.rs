//! An MCP tool result as the gateway keeps it: `structuredContent` when present, else the
//! text; other content referenced, not inlined; sizes and depth bounded.
//!
//! The value a call returns (what the journal keeps and the model reads):
//!
//! - a result with `structuredContent` (not `null`): that value, as the server sent it;
//! - else, when every content block is text: the texts joined with `"\n"`, as one JSON string
//!   (`get-sum` gives `"The sum of 1 and 2 is 3."`);
//! - else an object `{"text": <the joined texts>, "content": [<one reference per other block>]}`
//!   where a reference names the block without its payload:
//!   `{"type": "image" | "audio", "mimeType": .., "bytes": <decoded size>}`,
//!   `{"type": "resource", "uri": .., "mimeType": .., "bytes": <size of its text or blob>}`,
//!   `{"type": "resource_link", "uri": .., "name": .., "mimeType": ..}`, and
//!   `{"type": <type>}` for a block of a kind this version does not know.
//!
//! A result with `isError: true` is [`ToolError::Correctable`] with the joined texts (cut past
//! [`MAX_ERROR_CHARS`]), so the model reads what went wrong. A value nested deeper than
//! [`MAX_JSON_DEPTH`] or larger than [`MAX_RESULT_BYTES`] as JSON (the bound on a model's
//! reply) is [`ToolError::Unrecorded`]: the tool ran, and its result cannot be kept.

use serde_json::{Map, Value, json};

use crate::core::encode::MAX_JSON_DEPTH;
use crate::tool::ToolError;

/// The largest result kept, in bytes of JSON: the bound on a model's reply
/// (`OpenAiConfig::DEFAULT_MAX_RESPONSE_BYTES`).
pub(crate) const MAX_RESULT_BYTES: usize = 8 * 1024 * 1024;

/// The longest error text kept from a result with `isError: true`, in characters.
pub(crate) const MAX_ERROR_CHARS: usize = 16 * 1024;

/// The value a call of `tool` returns, from the server's `CallToolResult` as JSON.
pub(crate) fn to_value(tool: &str, result: &Value) -> Result<Value, ToolError> {
    let blocks: &[Value] = result.get("content").and_then(Value::as_array).map_or(&[], Vec::as_slice);
    let text = blocks
        .iter()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
        .filter_map(|b| b.get("text").and_then(Value::as_str))
        .collect::<Vec<_>>()
        .join("\n");
    if result.get("isError").and_then(Value::as_bool) == Some(true) {
        let message =
            if text.is_empty() { format!("the tool `{tool}` reported an error without a message") } else { text };
        return Err(ToolError::Correctable(cut(&message, MAX_ERROR_CHARS)));
    }
    let value = match result.get("structuredContent") {
        Some(structured) if !structured.is_null() => structured.clone(),
        _ => {
            let others: Vec<Value> = blocks
                .iter()
                .filter(|b| b.get("type").and_then(Value::as_str) != Some("text"))
                .map(reference)
                .collect();
            if others.is_empty() { Value::String(text) } else { json!({ "text": text, "content": others }) }
        }
    };
    bounded(tool, value)
}

/// A reference to a non-text content block: its kind and size, not its payload.
fn reference(block: &Value) -> Value {
    let kind = block.get("type").and_then(Value::as_str).unwrap_or("unknown");
    let mut out = Map::new();
    out.insert("type".into(), Value::String(kind.to_string()));
    let mut copy = |from: &Value, key: &str| {
        if let Some(v) = from.get(key).filter(|v| v.is_string()) {
            out.insert(key.to_string(), v.clone());
        }
    };
    match kind {
        "image" | "audio" => {
            copy(block, "mimeType");
            let size = block.get("data").and_then(Value::as_str).map_or(0, decoded_len);
            out.insert("bytes".into(), json!(size));
        }
        "resource" => {
            let resource = block.get("resource").unwrap_or(&Value::Null);
            copy(resource, "uri");
            copy(resource, "mimeType");
            let size =
                match (resource.get("text").and_then(Value::as_str), resource.get("blob").and_then(Value::as_str)) {
                    (Some(text), _) => text.len(),
                    (None, Some(blob)) => decoded_len(blob),
                    (None, None) => 0,
                };
            out.insert("bytes".into(), json!(size));
        }
        "resource_link" => {
            copy(block, "uri");
            copy(block, "name");
            copy(block, "mimeType");
        }
        _ => {}
    }
    Value::Object(out)
}

/// The size of what base64 `data` decodes to.
fn decoded_len(data: &str) -> usize {
    let data = data.trim_end();
    let padding = data.bytes().rev().take_while(|b| *b == b'=').count().min(2);
    (data.len() / 4 * 3 + (data.len() % 4 * 3 / 4)).saturating_sub(padding)
}

/// `text` cut to `max` characters, saying how long it was.
fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}… (cut: {} bytes in all)", &text[..at], text.len()),
        None => text.to_string(),
    }
}

/// `value` if it is within the depth and size bounds.
fn bounded(tool: &str, value: Value) -> Result<Value, ToolError> {
    if depth(&value, 0) > MAX_JSON_DEPTH {
        return Err(ToolError::Unrecorded(format!(
            "the MCP tool `{tool}` answered with a result nested deeper than {MAX_JSON_DEPTH} levels, which cannot be \
             kept; the call ran"
        )));
    }
    let size = serde_json::to_vec(&value).map_or(usize::MAX, |v| v.len());
    if size > MAX_RESULT_BYTES {
        return Err(ToolError::Unrecorded(format!(
            "the MCP tool `{tool}` answered with a result of {size} bytes, over the bound of {MAX_RESULT_BYTES} bytes; \
             the call ran and its result cannot be kept"
        )));
    }
    Ok(value)
}

/// How deep `value` nests (a scalar is 0), counting past `MAX_JSON_DEPTH` no further.
fn depth(value: &Value, level: usize) -> usize {
    if level > MAX_JSON_DEPTH {
        return level;
    }
    match value {
        Value::Array(items) => items.iter().map(|v| depth(v, level + 1)).max().unwrap_or(level + 1),
        Value::Object(map) => map.values().map(|v| depth(v, level + 1)).max().unwrap_or(level + 1),
        _ => level,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_alone_is_a_plain_string_and_texts_join_with_newlines() {
        let r = json!({"content": [{"type": "text", "text": "The sum of 1 and 2 is 3."}]});
        assert_eq!(to_value("get-sum", &r).unwrap(), json!("The sum of 1 and 2 is 3."));
        let r = json!({"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]});
        assert_eq!(to_value("t", &r).unwrap(), json!("a\nb"));
        assert_eq!(to_value("t", &json!({})).unwrap(), json!(""));
    }

    #[test]
    fn structured_content_wins_over_text() {
        let r = json!({"content": [{"type": "text", "text": "{\"x\":1}"}], "structuredContent": {"x": 1}});
        assert_eq!(to_value("t", &r).unwrap(), json!({"x": 1}));
    }

    #[test]
    fn other_content_is_referenced_not_inlined() {
        let r = json!({"content": [
            {"type": "text", "text": "here"},
            {"type": "image", "data": "aGVsbG8=", "mimeType": "image/png"},
            {"type": "resource", "resource": {"uri": "test://1", "mimeType": "text/plain", "text": "abc"}},
            {"type": "resource_link", "uri": "test://2", "name": "two", "mimeType": "text/plain"},
            {"type": "hologram", "data": "zzz"}
        ]});
        assert_eq!(
            to_value("t", &r).unwrap(),
            json!({"text": "here", "content": [
                {"type": "image", "mimeType": "image/png", "bytes": 5},
                {"type": "resource", "uri": "test://1", "mimeType": "text/plain", "bytes": 3},
                {"type": "resource_link", "uri": "test://2", "name": "two", "mimeType": "text/plain"},
                {"type": "hologram"}
            ]})
        );
    }

    #[test]
    fn base64_sizes() {
        assert_eq!(decoded_len(""), 0);
        assert_eq!(decoded_len("aGVsbG8="), 5);
        assert_eq!(decoded_len("aGVsbA=="), 4);
        assert_eq!(decoded_len("aGVs"), 3);
        assert_eq!(decoded_len("aGVsbG8"), 5);
    }

    #[test]
    fn an_error_result_is_correctable_with_its_text_cut() {
        let r = json!({"isError": true, "content": [{"type": "text", "text": "bad input"}]});
        assert!(matches!(to_value("t", &r), Err(ToolError::Correctable(m)) if m == "bad input"));
        let r = json!({"isError": true, "content": []});
        assert!(matches!(to_value("t", &r), Err(ToolError::Correctable(m)) if m.contains("without a message")));
        let long = "é".repeat(MAX_ERROR_CHARS + 10);
        let r = json!({"isError": true, "content": [{"type": "text", "text": long}]});
        let Err(ToolError::Correctable(m)) = to_value("t", &r) else { panic!("not correctable") };
        assert!(m.contains("(cut:") && m.chars().count() < MAX_ERROR_CHARS + 40, "{}", m.len());
    }

    #[test]
    fn too_deep_or_too_large_is_unrecorded() {
        let deep = (0..=MAX_JSON_DEPTH).fold(json!(1), |inner, _| json!([inner]));
        let r = json!({"content": [], "structuredContent": deep});
        assert!(matches!(to_value("t", &r), Err(ToolError::Unrecorded(m)) if m.contains("nested deeper")));
        let ok = (0..MAX_JSON_DEPTH).fold(json!(1), |inner, _| json!([inner]));
        assert!(to_value("t", &json!({"structuredContent": ok})).is_ok());
        let big = "x".repeat(MAX_RESULT_BYTES);
        let r = json!({"content": [{"type": "text", "text": big}]});
        assert!(matches!(to_value("t", &r), Err(ToolError::Unrecorded(m)) if m.contains("over the bound")));
    }
}
