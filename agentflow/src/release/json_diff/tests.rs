//! Differences of JSON values named by their place.

use serde_json::json;

use super::differences;

#[test]
fn each_place_is_named_with_its_values() {
    let before = json!({ "properties": { "amount": { "type": "integer" }, "note": {} }, "required": ["a"] });
    let after = json!({ "properties": { "amount": { "type": "number" }, "to": {} }, "required": ["a", "b"] });
    assert_eq!(
        differences(&before, &after),
        "at /properties/amount/type: \"integer\" -> \"number\"; at /properties/note: removed; \
         at /properties/to: added; at /required: [\"a\"] -> [\"a\",\"b\"]"
    );
    assert_eq!(differences(&before, &before), "");
    let many = json!({ "a": 1, "b": 1, "c": 1, "d": 1, "e": 1, "f/g": 1 });
    let text = differences(&json!({}), &many);
    assert!(text.ends_with("at /d: added; and 2 more"), "{text}");
}
