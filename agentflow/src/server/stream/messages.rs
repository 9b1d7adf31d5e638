//! A state's chat messages (the items of a `messages` field, as `Message` stores them: `id`,
//! `role`, `content`, `tool_calls`, `tool_call_id`) in the AG-UI vocabulary: the events that
//! stream one message whole, the message as a `MESSAGES_SNAPSHOT` lists it, and which messages
//! a reader's client already holds.
//!
//! A message's id is derived from its content (two `Message::ai("Sure.")` have one id), and the
//! `messages` reducer replaces a message whose id it holds. A client of the protocol appends a
//! `TEXT_MESSAGE_CONTENT` to the message of its id, so a message sent again would read twice
//! ("Sure.Sure."), and a tool call sent again would have its arguments twice: [`Known`] keeps
//! what the client holds, so that a repeat is not sent and a replacement is sent as a snapshot.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value, json};

/// One message of an update, with the events that stream it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct MessageItem {
    /// Its id (the message's, or one made from its place when it has none).
    pub(crate) id: String,
    /// What it holds, as a number: two messages of one id and one fingerprint are the same.
    pub(crate) fingerprint: u64,
    /// The ids of the tool calls it makes.
    pub(crate) calls: Vec<String>,
    /// The events that stream it, in order (none for an AI message without text or calls).
    pub(crate) events: Vec<Value>,
}

/// What a reader's client holds of a message it is about to be sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Nothing: send it.
    New,
    /// The same message: send nothing.
    Repeat,
    /// Another message of the same id, or one of its tool calls under another message: its
    /// messages must be sent again whole (a `MESSAGES_SNAPSHOT`).
    Replaced,
}

/// The messages (by id, with their fingerprints) and the tool calls (by id) a reader's client
/// holds.
#[derive(Debug, Clone, Default)]
pub(crate) struct Known {
    messages: HashMap<String, u64>,
    calls: HashSet<String>,
}

impl Known {
    /// What the client holds of `item`.
    pub(crate) fn verdict(&self, item: &MessageItem) -> Verdict {
        match self.messages.get(&item.id) {
            Some(&held) if held == item.fingerprint => Verdict::Repeat,
            Some(_) => Verdict::Replaced,
            None if item.calls.iter().any(|call| self.calls.contains(call)) => Verdict::Replaced,
            None => Verdict::New,
        }
    }

    /// The client now holds `item`.
    pub(crate) fn hold(&mut self, item: &MessageItem) {
        self.messages.insert(item.id.clone(), item.fingerprint);
        self.calls.extend(item.calls.iter().cloned());
    }

    /// The client now holds exactly `messages` (a snapshot's, as the state stores them).
    pub(crate) fn reset(&mut self, messages: &[Value]) {
        self.messages.clear();
        self.calls.clear();
        for (i, message) in messages.iter().enumerate() {
            if let Some(item) = message_item(message, &format!("snapshot-{i}")) {
                self.hold(&item);
            }
        }
    }
}

/// `message` (a stored message) with the events that stream it; `fallback`: the id of a message
/// without one. `None` for an item that is no JSON object.
pub(crate) fn message_item(message: &Value, fallback: &str) -> Option<MessageItem> {
    let map = message.as_object()?;
    let id = map.get("id").and_then(Value::as_str).map_or_else(|| fallback.to_string(), str::to_string);
    let content = text_of(map.get("content"));
    let mut events = Vec::new();
    let mut calls = Vec::new();
    match map.get("role").and_then(Value::as_str) {
        Some("tool") => {
            if let Some(call) = map.get("tool_call_id").and_then(Value::as_str) {
                events.push(json!({
                    "type": "TOOL_CALL_RESULT", "messageId": id, "toolCallId": call, "content": content, "role": "tool",
                }));
            }
        }
        Some(role @ ("ai" | "human" | "system")) => {
            if !content.is_empty() {
                events.push(json!({ "type": "TEXT_MESSAGE_START", "messageId": id, "role": ag_ui_role(role) }));
                events.push(json!({ "type": "TEXT_MESSAGE_CONTENT", "messageId": id, "delta": content }));
                events.push(json!({ "type": "TEXT_MESSAGE_END", "messageId": id }));
            }
            for (c, call) in tool_calls(map).iter().enumerate() {
                let call_id = call_id(call, &id, c);
                let name = call.get("name").and_then(Value::as_str).unwrap_or("?");
                events.push(
                    json!({ "type": "TOOL_CALL_START", "toolCallId": call_id, "toolCallName": name, "parentMessageId": id }),
                );
                let args = arguments(call);
                if !args.is_empty() {
                    events.push(json!({ "type": "TOOL_CALL_ARGS", "toolCallId": call_id, "delta": args }));
                }
                events.push(json!({ "type": "TOOL_CALL_END", "toolCallId": call_id }));
                calls.push(call_id);
            }
        }
        _ => {}
    }
    Some(MessageItem { id, fingerprint: fingerprint(message), calls, events })
}

/// `message` (a stored message) as an AG-UI `Message`, as a `MESSAGES_SNAPSHOT` lists it;
/// `None` for an item of no role the protocol has (`fallback`: the id of one without).
pub(crate) fn ag_ui_message(message: &Value, fallback: &str) -> Option<Value> {
    let map = message.as_object()?;
    let id = map.get("id").and_then(Value::as_str).map_or_else(|| fallback.to_string(), str::to_string);
    let content = text_of(map.get("content"));
    match map.get("role").and_then(Value::as_str)? {
        "tool" => {
            let call = map.get("tool_call_id").and_then(Value::as_str)?;
            Some(json!({ "id": id, "role": "tool", "content": content, "toolCallId": call }))
        }
        "ai" => {
            let mut out = json!({ "id": id, "role": "assistant" });
            if !content.is_empty() {
                out["content"] = Value::String(content);
            }
            let calls: Vec<Value> = tool_calls(map)
                .iter()
                .enumerate()
                .map(|(c, call)| {
                    let name = call.get("name").and_then(Value::as_str).unwrap_or("?");
                    json!({
                        "id": call_id(call, &id, c),
                        "type": "function",
                        "function": { "name": name, "arguments": arguments(call) },
                    })
                })
                .collect();
            if !calls.is_empty() {
                out["toolCalls"] = Value::Array(calls);
            }
            Some(out)
        }
        role @ ("human" | "system") => Some(json!({ "id": id, "role": ag_ui_role(role), "content": content })),
        _ => None,
    }
}

/// The AG-UI role of a stored message's role.
fn ag_ui_role(role: &str) -> &'static str {
    match role {
        "ai" => "assistant",
        "human" => "user",
        _ => "system",
    }
}

/// A stored message's tool calls.
fn tool_calls(message: &Map<String, Value>) -> &[Value] {
    message.get("tool_calls").and_then(Value::as_array).map_or(&[][..], Vec::as_slice)
}

/// A tool call's id (one made from its message and place when it has none).
fn call_id(call: &Value, message: &str, place: usize) -> String {
    call.get("id").and_then(Value::as_str).map_or_else(|| format!("{message}-call-{place}"), str::to_string)
}

/// A tool call's arguments as text: their JSON, or the text kept when they were not JSON on
/// the wire.
fn arguments(call: &Value) -> String {
    match call.get("arguments") {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

/// A message's content as text.
fn text_of(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        None | Some(Value::Null) => String::new(),
        Some(other) => other.to_string(),
    }
}

/// A 64-bit FNV-1a hash of `value`, the keys of its objects in order: two equal values hash
/// alike whatever order their keys came in.
pub(crate) fn fingerprint(value: &Value) -> u64 {
    let mut hash = Fnv(0xcbf2_9ce4_8422_2325);
    hash.value(value);
    hash.0
}

/// FNV-1a, each piece tagged and length-prefixed (`["ab"]` and `["a", "b"]` differ).
struct Fnv(u64);

impl Fnv {
    fn bytes(&mut self, bytes: &[u8]) {
        for byte in (bytes.len() as u64).to_le_bytes().iter().chain(bytes) {
            self.0 ^= u64::from(*byte);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }

    fn value(&mut self, value: &Value) {
        match value {
            Value::Null => self.bytes(b"n"),
            Value::Bool(b) => self.bytes(if *b { b"t" } else { b"f" }),
            Value::Number(n) => {
                self.bytes(b"#");
                self.bytes(n.to_string().as_bytes());
            }
            Value::String(s) => {
                self.bytes(b"s");
                self.bytes(s.as_bytes());
            }
            Value::Array(items) => {
                self.bytes(b"[");
                self.bytes(&(items.len() as u64).to_le_bytes());
                for item in items {
                    self.value(item);
                }
            }
            Value::Object(map) => {
                self.bytes(b"{");
                self.bytes(&(map.len() as u64).to_le_bytes());
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort_unstable();
                for key in keys {
                    self.bytes(key.as_bytes());
                    self.value(&map[key]);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_messages_events_and_its_snapshot_form() {
        let ai = json!({ "id": "ai-1", "role": "ai", "content": "", "tool_calls": [
            { "id": "call-1", "name": "refund", "arguments": { "order": 7 } },
            { "name": "lookup", "arguments": "{not json" },
        ] });
        let item = message_item(&ai, "x").unwrap();
        let types: Vec<&str> = item.events.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(
            types,
            [
                "TOOL_CALL_START",
                "TOOL_CALL_ARGS",
                "TOOL_CALL_END",
                "TOOL_CALL_START",
                "TOOL_CALL_ARGS",
                "TOOL_CALL_END"
            ]
        );
        assert_eq!(item.calls, ["call-1", "ai-1-call-1"]);
        assert_eq!(
            ag_ui_message(&ai, "x").unwrap(),
            json!({ "id": "ai-1", "role": "assistant", "toolCalls": [
                { "id": "call-1", "type": "function", "function": { "name": "refund", "arguments": r#"{"order":7}"# } },
                { "id": "ai-1-call-1", "type": "function", "function": { "name": "lookup", "arguments": "{not json" } },
            ] })
        );
        let tool = json!({ "id": "t-1", "role": "tool", "content": "done", "tool_call_id": "call-1" });
        assert_eq!(
            ag_ui_message(&tool, "x").unwrap(),
            json!({ "id": "t-1", "role": "tool", "content": "done", "toolCallId": "call-1" })
        );
        let human = json!({ "role": "human", "content": "hi" });
        assert_eq!(ag_ui_message(&human, "m-0").unwrap(), json!({ "id": "m-0", "role": "user", "content": "hi" }));
        assert_eq!(message_item(&human, "m-0").unwrap().events[0]["role"], "user");
        assert!(ag_ui_message(&json!({ "id": "a", "role": "critic" }), "x").is_none());
        assert!(message_item(&json!("text"), "x").is_none());
    }

    #[test]
    fn a_client_holding_a_message_gets_no_repeat_and_a_replacement_is_told_apart() {
        let sure = json!({ "id": "ai-1", "role": "ai", "content": "Sure." });
        let item = message_item(&sure, "x").unwrap();
        let mut known = Known::default();
        assert_eq!(known.verdict(&item), Verdict::New);
        known.hold(&item);
        assert_eq!(known.verdict(&item), Verdict::Repeat);
        // The same message with its keys in another order is the same message.
        let reordered: Value = serde_json::from_str(r#"{"content":"Sure.","role":"ai","id":"ai-1"}"#).unwrap();
        assert_eq!(known.verdict(&message_item(&reordered, "x").unwrap()), Verdict::Repeat);
        let other = message_item(&json!({ "id": "ai-1", "role": "ai", "content": "No." }), "x").unwrap();
        assert_eq!(known.verdict(&other), Verdict::Replaced);
        // A new message making a call the client holds under another message.
        let call = json!({ "id": "ai-2", "role": "ai", "tool_calls": [{ "id": "c", "name": "f", "arguments": {} }] });
        known.hold(&message_item(&call, "x").unwrap());
        let again = json!({ "id": "ai-3", "role": "ai", "tool_calls": [{ "id": "c", "name": "f", "arguments": {} }] });
        assert_eq!(known.verdict(&message_item(&again, "x").unwrap()), Verdict::Replaced);
        // A snapshot is what the client holds from then on.
        known.reset(&[json!({ "id": "ai-1", "role": "ai", "content": "No." })]);
        assert_eq!(known.verdict(&other), Verdict::Repeat);
        assert_eq!(known.verdict(&item), Verdict::Replaced);
        assert_eq!(known.verdict(&message_item(&again, "x").unwrap()), Verdict::New);
    }

    #[test]
    fn fingerprints_tell_values_apart_by_shape() {
        assert_ne!(fingerprint(&json!(["ab"])), fingerprint(&json!(["a", "b"])));
        assert_ne!(fingerprint(&json!({ "a": 1 })), fingerprint(&json!({ "a": "1" })));
        assert_ne!(fingerprint(&json!(null)), fingerprint(&json!(false)));
        assert_eq!(fingerprint(&json!({ "a": 1, "b": [true] })), fingerprint(&json!({ "b": [true], "a": 1 })));
    }
}
