//! Captured contents in the GenAI conventions' shapes (`gen_ai.input.messages`,
//! `gen_ai.output.messages`, `gen_ai.system_instructions`, tool arguments and results), every
//! text masked first (see [`super::capture::mask`]).

use serde_json::{Map, Value, json};

use super::capture::mask;
use crate::core::message::{Message, Role, ToolCall};
use crate::core::state::Field;

/// The string and number values of the state's personal and credential fields (`state` as
/// JSON; a number as its decimal text, from 3 characters up): the texts masked wherever they
/// occur in captured content.
pub(crate) fn sensitive_values(state: &Value, fields: &[Field]) -> Vec<String> {
    let names: Vec<&str> = fields.iter().filter(|f| f.personal || f.credential).map(|f| f.name).collect();
    let Value::Object(map) = state else { return Vec::new() };
    if names.is_empty() {
        return Vec::new();
    }
    // The keys the access rules take for these fields (serde may rename them).
    let mut out = Vec::new();
    for (key, value) in map {
        let mut probe = Value::Object(Map::from_iter([(key.clone(), Value::Null)]));
        if crate::access::personal::mask_fields(&mut probe, &names) {
            strings_in(value, &mut out);
        }
    }
    out
}

/// The shortest number text masked (shorter ones, `1`, `42`, occur everywhere).
const MIN_NUMBER_LEN: usize = 3;

/// Every string, number (as its decimal text, from [`MIN_NUMBER_LEN`] characters) and object
/// key in `value`.
fn strings_in(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) => out.push(s.clone()),
        Value::Number(n) => {
            let text = n.to_string();
            if text.len() >= MIN_NUMBER_LEN {
                out.push(text);
            }
        }
        Value::Array(items) => items.iter().for_each(|v| strings_in(v, out)),
        Value::Object(map) => map.iter().for_each(|(k, v)| {
            out.push(k.clone());
            strings_in(v, out);
        }),
        _ => {}
    }
}

/// `value` with every string in it masked, and every number that is a masked value (or holds
/// one) replaced by the masked text.
fn masked_value(value: &Value, masked: &[String]) -> Value {
    match value {
        Value::String(s) => Value::String(mask(s, masked)),
        Value::Number(n) => {
            let text = n.to_string();
            let out = mask(&text, masked);
            if out == text { value.clone() } else { Value::String(out) }
        }
        Value::Array(items) => Value::Array(items.iter().map(|v| masked_value(v, masked)).collect()),
        Value::Object(map) => {
            Value::Object(map.iter().map(|(k, v)| (mask(k, masked), masked_value(v, masked))).collect())
        }
        other => other.clone(),
    }
}

/// A JSON value as captured text, masked leaf by leaf.
pub(crate) fn json_text(value: &Value, masked: &[String]) -> String {
    masked_value(value, masked).to_string()
}

fn text_part(text: &str, masked: &[String]) -> Value {
    json!({ "type": "text", "content": mask(text, masked) })
}

fn call_part(call: &ToolCall, masked: &[String]) -> Value {
    json!({
        "type": "tool_call",
        "id": mask(&call.id, masked),
        "name": mask(&call.name, masked),
        "arguments": masked_value(&call.arguments, masked),
    })
}

/// `gen_ai.system_instructions` (when there is a system message) and `gen_ai.input.messages`.
pub(crate) fn input_messages(messages: &[Message], masked: &[String]) -> (Option<String>, String) {
    let mut system = Vec::new();
    let mut input = Vec::new();
    for m in messages {
        let (role, parts) = match m.role {
            Role::System => {
                system.push(text_part(&m.content, masked));
                continue;
            }
            Role::Human => ("user", vec![text_part(&m.content, masked)]),
            Role::Ai => {
                let mut parts: Vec<Value> = Vec::new();
                if !m.content.is_empty() {
                    parts.push(text_part(&m.content, masked));
                }
                parts.extend(m.tool_calls.iter().map(|c| call_part(c, masked)));
                ("assistant", parts)
            }
            Role::Tool => (
                "tool",
                vec![json!({
                    "type": "tool_call_response",
                    "id": m.tool_call_id.as_deref().map(|id| mask(id, masked)),
                    "response": mask(&m.content, masked),
                })],
            ),
        };
        input.push(json!({ "role": role, "parts": parts }));
    }
    let system = (!system.is_empty()).then(|| Value::Array(system).to_string());
    (system, Value::Array(input).to_string())
}

/// `gen_ai.output.messages` of a reply.
pub(crate) fn output_messages(
    text: &str,
    calls: &[ToolCall],
    finish_reason: Option<&str>,
    masked: &[String],
) -> String {
    let mut parts: Vec<Value> = Vec::new();
    if !text.is_empty() {
        parts.push(text_part(text, masked));
    }
    parts.extend(calls.iter().map(|c| call_part(c, masked)));
    let mut message = json!({ "role": "assistant", "parts": parts });
    if let Some(reason) = finish_reason {
        message["finish_reason"] = json!(mask(reason, masked));
    }
    json!([message]).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::personal::MASK;
    use crate::core::state::ReducerKind as Reducer;

    fn fields() -> Vec<Field> {
        vec![
            Field::new("customer_name", Reducer::Overwrite, "String").personal(),
            Field::new("api_key", Reducer::Overwrite, "String").credential(),
            Field::new("order", Reducer::Overwrite, "String"),
        ]
    }

    #[test]
    fn the_sensitive_values_are_those_of_marked_fields() {
        let state = json!({ "customerName": "Ada Lovelace", "api_key": "k-123456", "order": "A-7" });
        let mut values = sensitive_values(&state, &fields());
        values.sort();
        assert_eq!(values, ["Ada Lovelace", "k-123456"]);
    }

    #[test]
    fn messages_are_shaped_and_masked() {
        let masked = vec!["Ada Lovelace".to_string()];
        let messages = vec![
            Message::system("be brief"),
            Message::human("refund order A-7 for Ada Lovelace, key sk_live_51H8aBcDeFgHiJkLmNoPqRsTu"),
            Message::ai_with_tool_calls("", vec![ToolCall::new("c1", "refund", json!({ "who": "Ada Lovelace" }))]),
        ];
        let (system, input) = input_messages(&messages, &masked);
        assert_eq!(system.as_deref(), Some(r#"[{"content":"be brief","type":"text"}]"#));
        let input: Value = serde_json::from_str(&input).expect("json");
        assert_eq!(input[0]["role"], "user");
        let text = input[0]["parts"][0]["content"].as_str().expect("text");
        assert!(text.starts_with(&format!("refund order A-7 for {MASK}, key ")), "{text}");
        assert!(!text.contains("sk_live_51H8aBcDeFgHiJkLmNoPqRsTu"), "{text}");
        assert_eq!(
            input[1]["parts"][0],
            json!({"type": "tool_call", "id": "c1", "name": "refund", "arguments": {"who": MASK}})
        );
        let output = output_messages("done for Ada Lovelace", &[], Some("stop"), &masked);
        let output: Value = serde_json::from_str(&output).expect("json");
        assert_eq!(
            output,
            json!([{"role": "assistant", "parts": [{"type": "text", "content": format!("done for {MASK}")}], "finish_reason": "stop"}])
        );
    }

    #[test]
    fn numbers_of_marked_fields_are_masked() {
        let fields = vec![
            Field::new("phone", Reducer::Overwrite, "u64").personal(),
            Field::new("pin", Reducer::Overwrite, "u8").credential(),
            Field::new("order", Reducer::Overwrite, "u64"),
        ];
        let state = json!({ "phone": 4915112345678_u64, "pin": 7, "order": 12345 });
        let masked = sensitive_values(&state, &fields);
        assert_eq!(masked, ["4915112345678"], "short numbers are not masked, unmarked fields neither");
        let args = json_text(&json!({ "to": 4915112345678_u64, "order": 12345, "n": 7 }), &masked);
        let args: Value = serde_json::from_str(&args).expect("json");
        assert_eq!(args, json!({ "to": MASK, "order": 12345, "n": 7 }));
        let (_, input) = input_messages(&[Message::human("call +4915112345678 now")], &masked);
        assert!(input.contains(&format!("call +{MASK} now")), "{input}");
    }

    #[test]
    fn matching_ignores_ascii_case() {
        let masked = vec!["Ada Lovelace".to_string()];
        let out = output_messages("done for ADA LOVELACE", &[], None, &masked);
        assert!(out.contains(&format!("done for {MASK}")), "{out}");
        assert!(!out.to_ascii_lowercase().contains("lovelace"), "{out}");
    }

    #[test]
    fn a_short_value_leaves_valid_json() {
        for short in ["e", "\"", ",", "role", "text"] {
            let masked = vec![short.to_string()];
            let calls = [ToolCall::new("c1", "refund", json!({ "note": "one" }))];
            let (system, input) = input_messages(
                &[
                    Message::system("be terse"),
                    Message::human("hello"),
                    Message::ai_with_tool_calls("", calls.to_vec()),
                ],
                &masked,
            );
            let output = output_messages("fine", &calls, Some("stop"), &masked);
            for text in [system.expect("system"), input, output, json_text(&json!({ "role": "x" }), &masked)] {
                let value: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{short:?}: {e}: {text}"));
                assert!(value.is_array() || value.is_object(), "{text}");
            }
        }
        let (_, input) = input_messages(&[Message::human("hello")], &["e".to_string()]);
        let input: Value = serde_json::from_str(&input).expect("json");
        assert_eq!(input, json!([{ "role": "user", "parts": [{ "type": "text", "content": format!("h{MASK}llo") }] }]));
    }

    #[test]
    fn nothing_to_mask_changes_nothing() {
        let state = json!({ "customerName": "Ada Lovelace", "order": "A-7" });
        let plain = vec![Field::new("customer_name", Reducer::Overwrite, "String")];
        assert!(sensitive_values(&state, &plain).is_empty());
        let args = json!({ "who": "Ada Lovelace", "n": 12345, "list": [1, "e"] });
        assert_eq!(json_text(&args, &[]), args.to_string());
        let out = output_messages("Ada Lovelace", &[], Some("stop"), &[]);
        assert_eq!(
            serde_json::from_str::<Value>(&out).expect("json"),
            json!([{"role": "assistant", "parts": [{"type": "text", "content": "Ada Lovelace"}], "finish_reason": "stop"}])
        );
    }
}
