//! How a surface that shows stored JSON (the command-line tool, the inbox) shows a secret.

use serde_json::Value;

/// The one key of a stored secret: `{"secretRef": "env:OPENAI_KEY"}`.
pub const SECRET_REF_KEY: &str = "secretRef";

/// The reference of a stored secret: `Some("env:OPENAI_KEY")` for
/// `{"secretRef": "env:OPENAI_KEY"}`, `None` for anything else.
pub fn secret_ref_of(value: &Value) -> Option<&str> {
    match value {
        Value::Object(map) if map.len() == 1 => map.get(SECRET_REF_KEY)?.as_str(),
        _ => None,
    }
}

/// Replaces every stored secret in `value` by the text `••• env:OPENAI_KEY`, for display.
/// Leaves `value` as it is (no copy) when it holds none.
pub fn mask_secret_refs(value: &mut Value) {
    if let Some(reference) = secret_ref_of(value) {
        *value = Value::String(format!("••• {reference}"));
        return;
    }
    match value {
        Value::Array(items) => items.iter_mut().for_each(mask_secret_refs),
        Value::Object(map) => map.values_mut().for_each(mask_secret_refs),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secrets_show_as_dots_with_their_reference() {
        let mut v = json!({"key": {"secretRef": "env:K"}, "list": [{"secretRef": "file:t"}, {"a": 1}],
                           "other": {"secretRef": "env:K", "extra": 1}});
        mask_secret_refs(&mut v);
        assert_eq!(
            v,
            json!({"key": "••• env:K", "list": ["••• file:t", {"a": 1}], "other": {"secretRef": "env:K", "extra": 1}})
        );
    }
}
