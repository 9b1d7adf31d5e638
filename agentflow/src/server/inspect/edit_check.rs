//! An edited approval checked before it is recorded: the edited arguments against the tool's
//! JSON schema, as the graph's stored description keeps it, the way the tool gateway and the
//! tool's own decoding will check them when the approved call runs.

use agentflow_store::Store;
use serde_json::Value;

use super::description::description;
use super::error::InspectError;

/// The JSON schema of approval `id`'s tool, from its thread's stored graph description; `None`
/// when the approval, its thread or the description is not there, or the description names no
/// such tool.
pub fn tool_schema(store: &dyn Store, id: &str) -> Result<Option<Value>, InspectError> {
    let Some(record) = store.approval(id).map_err(InspectError::store)? else { return Ok(None) };
    let Some(thread) = store.thread(&record.thread).map_err(InspectError::store)? else { return Ok(None) };
    let Some(description) = description(store, &thread)? else { return Ok(None) };
    Ok(description["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|t| t["name"] == record.tool.as_str())
        .map(|t| t["parameters"].clone()))
}

/// Checks edited arguments as the gateway will check them when the approved call runs, with
/// only the tool's schema at hand: the gateway's own shape check
/// ([`check_args_shape`](crate::tool::check_args_shape): an object that reads back, no
/// field the tool does not have), then the integer ranges of the formats schemars writes for
/// Rust's types with the plain checks (a JSON schema validator does not know
/// the formats), then the whole JSON schema (`$ref`, `oneOf`, `pattern`,
/// `additionalProperties`, .., by a full validator). An edit that passes is one the tool's own
/// decoding accepts.
///
/// `schema` is the tool's ([`tool_schema`]); without one (the store holds no description of
/// the thread's graph) the edit cannot be checked and is refused. This is the check
/// [`ApprovalDesk::edit_checked`](crate::approval::ApprovalDesk::edit_checked) takes: `Err` says
/// why the edit was refused.
pub fn check_edit(tool: &str, schema: Option<&Value>, value: &Value) -> Result<(), String> {
    let Some(schema) = schema else {
        return Err(format!(
            "the store has no schema for `{tool}` (no description of the thread's graph), so the edit cannot be \
             checked; edit it from the app"
        ));
    };
    crate::tool::check_args_shape(value, schema).map_err(|e| e.to_string())?;
    check_schema(schema, value, "args")?;
    let validator = jsonschema::validator_for(schema).map_err(|e| {
        format!("the tool's stored schema cannot be used to check the edit ({e}); edit it from the app")
    })?;
    if let Some(e) = validator.iter_errors(value).next() {
        let at = e.instance_path().to_string();
        return Err(format!("`args{}`: {e}", at.replace('/', ".")));
    }
    Ok(())
}

/// Checks `value` against the parts of a JSON schema that tool argument schemas use: `type`,
/// `properties`, `required`, `additionalProperties: false`, `enum`, `items`, number bounds
/// (`minimum`, `maximum`, and the ranges of the integer `format`s schemars writes, `int32`,
/// `uint32`, ..) and nullable types (`["string", "null"]`). `$ref` and the combinators
/// (`anyOf`, `oneOf`, `allOf`) are not followed: [`check_edit`] runs a full validator after.
fn check_schema(schema: &Value, value: &Value, path: &str) -> Result<(), String> {
    let Some(schema) = schema.as_object() else { return Ok(()) };
    if let Some(types) = schema.get("type") {
        let names: Vec<&str> = match types {
            Value::String(s) => vec![s.as_str()],
            Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
            _ => vec![],
        };
        let fits = |t: &str| match t {
            "object" => value.is_object(),
            "array" => value.is_array(),
            "string" => value.is_string(),
            "boolean" => value.is_boolean(),
            "null" => value.is_null(),
            "number" => value.is_number(),
            "integer" => value.is_i64() || value.is_u64(),
            _ => true,
        };
        if !names.is_empty() && !names.iter().any(|t| fits(t)) {
            return Err(format!("`{path}` must be {}, not {}", names.join(" or "), value));
        }
    }
    if let Some(Value::Array(allowed)) = schema.get("enum")
        && !allowed.contains(value)
    {
        return Err(format!("`{path}` must be one of {}", Value::Array(allowed.clone())));
    }
    // The integer formats schemars writes for Rust's integer types: a value out of the type's
    // range would be refused by the tool's own decoding when the approved call runs.
    if let Some(format) = schema.get("format").and_then(Value::as_str)
        && (value.is_i64() || value.is_u64())
    {
        let n = value.as_i64().map(i128::from).or_else(|| value.as_u64().map(i128::from)).unwrap_or_default();
        let range: Option<(i128, i128)> = match format {
            "int32" => Some((i32::MIN.into(), i32::MAX.into())),
            "int64" => Some((i64::MIN.into(), i64::MAX.into())),
            "uint32" => Some((0, u32::MAX.into())),
            "uint64" | "uint" | "uint128" => Some((0, i128::MAX)),
            _ => None,
        };
        if let Some((min, max)) = range
            && !(min..=max).contains(&n)
        {
            return Err(format!("`{path}` must fit the tool's `{format}` field, not {value}"));
        }
    }
    if let Some(n) = value.as_f64() {
        if let Some(min) = schema.get("minimum").and_then(Value::as_f64)
            && n < min
        {
            return Err(format!("`{path}` must be at least {min}"));
        }
        if let Some(max) = schema.get("maximum").and_then(Value::as_f64)
            && n > max
        {
            return Err(format!("`{path}` must be at most {max}"));
        }
    }
    if let Value::Object(map) = value {
        let props = schema.get("properties").and_then(Value::as_object);
        for name in schema.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str) {
            if !map.contains_key(name) {
                return Err(format!("`{path}.{name}` is required"));
            }
        }
        for (k, v) in map {
            match props.and_then(|p| p.get(k)) {
                Some(sub) => check_schema(sub, v, &format!("{path}.{k}"))?,
                None if schema.get("additionalProperties") == Some(&Value::Bool(false)) => {
                    return Err(format!("`{path}.{k}` is not a field of the tool's arguments"));
                }
                None => {}
            }
        }
    }
    if let (Value::Array(items), Some(item)) = (value, schema.get("items")) {
        for (i, v) in items.iter().enumerate() {
            check_schema(item, v, &format!("{path}[{i}]"))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn an_edit_is_checked_against_the_whole_schema_and_refused_without_one() {
        let schema = json!({
            "type": "object",
            "properties": { "code": { "type": "string", "pattern": "^[A-Z]+$" } },
            "required": ["code"]
        });
        assert_eq!(check_edit("ship", Some(&schema), &json!({"code": "ABC"})), Ok(()));
        let refused = check_edit("ship", Some(&schema), &json!({"code": "abc"})).unwrap_err();
        assert!(refused.contains("args.code"), "the full validator's `pattern`: {refused}");
        let refused = check_edit("ship", None, &json!({"code": "ABC"})).unwrap_err();
        assert!(refused.contains("no schema for `ship`"), "{refused}");
    }

    #[test]
    fn schema_checks_types_required_and_unknown_fields() {
        let schema = json!({
            "type": "object",
            "properties": { "order_id": { "type": "string" }, "amount": { "type": "integer", "minimum": 0 } },
            "required": ["order_id", "amount"],
            "additionalProperties": false
        });
        assert_eq!(check_schema(&schema, &json!({"order_id": "A", "amount": 3}), "args"), Ok(()));
        assert!(check_schema(&schema, &json!({"order_id": "A"}), "args").unwrap_err().contains("args.amount"));
        assert!(
            check_schema(&schema, &json!({"order_id": "A", "amount": "3"}), "args").unwrap_err().contains("integer")
        );
        assert!(
            check_schema(&schema, &json!({"order_id": "A", "amount": -1}), "args").unwrap_err().contains("at least")
        );
        assert!(
            check_schema(&schema, &json!({"order_id": "A", "amount": 1, "x": 1}), "args")
                .unwrap_err()
                .contains("args.x")
        );
        assert!(check_schema(&schema, &json!([1]), "args").is_err());
        // schemars writes `u32` as `{"type": "integer", "format": "uint32", "minimum": 0}`.
        let amount = json!({ "type": "integer", "format": "uint32", "minimum": 0 });
        assert!(check_schema(&amount, &json!(4_294_967_296u64), "args.amount").unwrap_err().contains("uint32"));
        assert_eq!(check_schema(&amount, &json!(4_294_967_295u64), "args.amount"), Ok(()));
        let small = json!({ "type": "integer", "format": "int32" });
        assert!(check_schema(&small, &json!(-2_147_483_649i64), "n").is_err());
    }
}
