//! Checking a model's arguments before a tool runs.

use serde::de::DeserializeOwned;
use serde_json::Value;

/// Why a model's arguments were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ArgumentError(pub String);

/// Checks `args` against the tool's argument type `A` and its schema:
/// a JSON object, no field the schema does not know, and every field of the
/// right type (a number must be finite; JSON cannot carry NaN or infinity,
/// and a number too large for its type is refused).
///
/// Arguments nested deeper than [`MAX_JSON_DEPTH`] levels are refused too:
/// they become part of the thread's stored state, which must read back.
///
/// [`MAX_JSON_DEPTH`]: crate::persist::MAX_JSON_DEPTH
pub fn validate_args<A: DeserializeOwned>(args: &Value, schema: &Value) -> Result<A, ArgumentError> {
    check_args_shape(args, schema)?;
    A::deserialize(args).map_err(|e| ArgumentError(e.to_string()))
}

/// The part of [`validate_args`] that needs no Rust type, the gateway's own check of a call's
/// shape: `args` reads back from the store (nested at most [`MAX_JSON_DEPTH`] levels), is a
/// JSON object, and has no field the schema's `properties` does not list (whether or not the
/// schema says `additionalProperties: false`). Something that holds only the tool's schema
/// (the approval inbox checking an edit) checks this, then the schema itself.
///
/// [`MAX_JSON_DEPTH`]: crate::persist::MAX_JSON_DEPTH
pub fn check_args_shape(args: &Value, schema: &Value) -> Result<(), ArgumentError> {
    crate::durable::check_json(args, "args").map_err(|e| ArgumentError(e.to_string()))?;
    let Value::Object(fields) = args else {
        let got = match args {
            Value::String(s) => format!("a string ({s:?}); arguments must be a JSON object"),
            other => format!("{other}; arguments must be a JSON object"),
        };
        return Err(ArgumentError(format!("expected an object of arguments, got {got}")));
    };
    if let Some(known) = schema.get("properties").and_then(Value::as_object) {
        let unknown: Vec<&str> = fields.keys().filter(|k| !known.contains_key(*k)).map(String::as_str).collect();
        if !unknown.is_empty() {
            let allowed: Vec<&str> = known.keys().map(String::as_str).collect();
            return Err(ArgumentError(format!(
                "unknown field(s) {}; the arguments are {}",
                unknown.join(", "),
                allowed.join(", ")
            )));
        }
    }
    Ok(())
}

/// Cuts tool-call arguments that nest deeper than [`MAX_JSON_DEPTH`] down to one level past it
/// (the arrays and objects on that level are emptied), so the message that carries them can be
/// stored, and the gateway still refuses the call with `INVALID_ARGUMENT` as too deep. Arguments
/// within the limit are left as they are. Recurses at most `MAX_JSON_DEPTH + 1` levels.
///
/// [`MAX_JSON_DEPTH`]: crate::persist::MAX_JSON_DEPTH
pub(crate) fn clip_deep_args(args: &mut Value) {
    fn clip(v: &mut Value, level: usize) {
        match v {
            Value::Array(items) if level > crate::durable::MAX_JSON_DEPTH => items.clear(),
            Value::Object(map) if level > crate::durable::MAX_JSON_DEPTH => map.clear(),
            Value::Array(items) => items.iter_mut().for_each(|v| clip(v, level + 1)),
            Value::Object(map) => map.values_mut().for_each(|v| clip(v, level + 1)),
            _ => {}
        }
    }
    if crate::durable::check_json(args, "args").is_err() {
        clip(args, 1);
    }
}

/// JSON with object keys sorted, so equal arguments hash equally.
///
/// Exact: the text reads back (`serde_json::from_str`) as the very value it
/// was made from, floats bit for bit (serde_json's `float_roundtrip`), so
/// hashing the stored text or the value gives the same hash.
pub fn canonical_json(value: &Value) -> String {
    fn sort(v: &Value) -> Value {
        match v {
            Value::Object(map) => {
                let sorted: std::collections::BTreeMap<&String, Value> =
                    map.iter().map(|(k, v)| (k, sort(v))).collect();
                Value::Object(sorted.into_iter().map(|(k, v)| (k.clone(), v)).collect())
            }
            Value::Array(items) => Value::Array(items.iter().map(sort).collect()),
            other => other.clone(),
        }
    }
    sort(value).to_string()
}

/// The SHA-256 of the canonical JSON of `args`, in hex.
pub fn args_hash(args: &Value) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(canonical_json(args).as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(serde::Deserialize, Debug, PartialEq)]
    struct Args {
        a: f64,
        b: f64,
    }

    fn schema() -> Value {
        json!({ "type": "object", "properties": { "a": { "type": "number" }, "b": { "type": "number" } } })
    }

    #[test]
    fn accepts_good_arguments() {
        assert_eq!(validate_args::<Args>(&json!({"a": 3, "b": 4.5}), &schema()), Ok(Args { a: 3.0, b: 4.5 }));
    }

    #[test]
    fn refuses_unknown_fields_wrong_types_and_non_objects() {
        let e = validate_args::<Args>(&json!({"a": 1, "b": 2, "c": 3}), &schema()).unwrap_err();
        assert!(e.0.contains("unknown field(s) c"), "{e}");
        let e = validate_args::<Args>(&json!({"a": "three", "b": 2}), &schema()).unwrap_err();
        assert!(e.0.contains("invalid type"), "{e}");
        let e = validate_args::<Args>(&json!("{not json"), &schema()).unwrap_err();
        assert!(e.0.contains("must be a JSON object"), "{e}");
        let e = validate_args::<Args>(&json!({"a": 1}), &schema()).unwrap_err();
        assert!(e.0.contains("missing field `b`"), "{e}");
    }

    #[test]
    fn non_finite_numbers_cannot_arrive() {
        // JSON has no NaN or infinity; what a model might send instead is refused.
        let e = validate_args::<Args>(&json!({"a": "NaN", "b": 1}), &schema()).unwrap_err();
        assert!(e.0.contains("invalid type"), "{e}");
        assert!(serde_json::from_str::<Value>(r#"{"a": 1e999}"#).is_err());
    }

    #[test]
    fn arguments_nested_deeper_than_the_limit_are_refused() {
        let deep = (0..crate::durable::MAX_JSON_DEPTH).fold(json!(1), |inner, _| json!([inner]));
        let e = validate_args::<Args>(&json!({"a": deep, "b": 1}), &schema()).unwrap_err();
        assert!(e.0.contains("`args.a[0]"), "{e}");
        assert!(e.0.contains(&format!("nests deeper than {} levels", crate::durable::MAX_JSON_DEPTH)), "{e}");
    }

    #[test]
    fn deep_arguments_are_clipped_one_level_past_the_limit_and_still_refused() {
        let limit = crate::durable::MAX_JSON_DEPTH;
        let mut deep = json!({"a": (0..200).fold(json!(1), |inner, _| json!([inner])), "b": 1});
        clip_deep_args(&mut deep);
        let depth = |v: &Value| {
            let (mut d, mut cur) = (0, v);
            while let Some(next) = cur.as_array().map(|a| a.first()).or_else(|| cur.get("a").map(Some)) {
                d += 1;
                match next {
                    Some(n) => cur = n,
                    None => break,
                }
            }
            d
        };
        assert_eq!(depth(&deep), limit + 1);
        assert_eq!(deep["b"], 1);
        let e = validate_args::<Args>(&deep, &schema()).unwrap_err();
        assert!(e.0.contains(&format!("nests deeper than {limit} levels")), "{e}");
        let mut fits = json!({"a": (1..limit).fold(json!(1), |inner, _| json!([inner])), "b": 2});
        let before = fits.clone();
        clip_deep_args(&mut fits);
        assert_eq!(fits, before);
    }

    #[test]
    fn canonical_json_reads_back_exactly() {
        // Computed amounts whose shortest decimal form is long, and extremes.
        let mut x = 0.1f64;
        for i in 0..2_000u32 {
            x = x * 1.37 + f64::from(i) * 0.15;
            if x > 1e12 {
                x /= 1e9;
            }
            for v in [x, -x, x * 0.15, 1.0 / (x + 1.0)] {
                let value = json!({"amount": v, "nested": [v, {"z": v}]});
                let text = canonical_json(&value);
                let back: Value = serde_json::from_str(&text).unwrap();
                assert_eq!(back["amount"].as_f64().unwrap().to_bits(), v.to_bits(), "{text}");
                assert_eq!(canonical_json(&back), text);
            }
        }
        for v in [f64::MIN_POSITIVE, f64::MAX, f64::MIN, 5e-324, 0.224_999_999_999_999_98] {
            let back: Value = serde_json::from_str(&canonical_json(&json!(v))).unwrap();
            assert_eq!(back.as_f64().unwrap().to_bits(), v.to_bits());
        }
    }

    #[test]
    fn canonical_json_sorts_keys_deeply() {
        assert_eq!(
            canonical_json(&json!({"b": 1, "a": {"d": 2, "c": [ {"z": 1, "y": 2} ]}})),
            r#"{"a":{"c":[{"y":2,"z":1}],"d":2},"b":1}"#
        );
    }
}
