//! A stored state chain folded as JSON, without the state's Rust types, by the reducers the
//! graph's stored description names: exactly, or not at all.
//!
//! A thread moved to a newer version of its graph whose state type changed too needs a snapshot
//! of its old state to migrate (the state migrations take a whole state). Its chain since the
//! last snapshot usually holds updates of the old type, which the new build cannot apply
//! through the old type's reducers; this fold applies them as JSON when every update is one it
//! computes exactly as the derive's `apply` would (overwrite, append, merge, and add on a
//! number type it knows), and refuses otherwise.

use serde_json::{Map, Value};

use agentflow_store::StateChain;

/// The state at the end of `chain` as JSON, folded by the reducers and types the stored
/// `description` gives the state's fields; `None` when that cannot be done exactly (no
/// description, a custom or `messages` reducer, a key the stored state does not hold, a sum
/// out of its type's range).
pub(super) fn fold_exactly(chain: &StateChain, description: Option<&Value>) -> Option<Value> {
    let fields = description?.get("state")?.get("fields")?.as_array()?;
    let field = |name: &str| {
        let f = fields.iter().find(|f| f.get("name").and_then(Value::as_str) == Some(name))?;
        Some((f.get("reducer")?.as_str()?, f.get("type").and_then(Value::as_str).unwrap_or("")))
    };
    let mut state: Value = serde_json::from_slice(&chain.snapshot).ok()?;
    for step in &chain.steps {
        for blob in &step.delta {
            let update: Map<String, Value> = serde_json::from_slice(blob).ok()?;
            let fields = state.as_object_mut()?;
            for (name, value) in update {
                let (reducer, ty) = field(&name)?;
                let current = fields.get_mut(&name)?;
                apply(current, value, reducer, ty)?;
            }
        }
    }
    Some(state)
}

/// Applies one field's update; `None` when it cannot be computed exactly here.
fn apply(current: &mut Value, value: Value, reducer: &str, ty: &str) -> Option<()> {
    match (reducer, &mut *current, value) {
        ("overwrite", _, value) => *current = value,
        ("append", Value::Array(items), Value::Array(more)) => items.extend(more),
        ("merge", Value::Object(map), Value::Object(more)) => map.extend(more),
        ("add", Value::Number(_), Value::Number(more)) => *current = add(current, &more, ty)?,
        _ => return None,
    }
    Some(())
}

/// `a + b` for a field of Rust type `ty`, when it is in the type's range.
fn add(a: &Value, b: &serde_json::Number, ty: &str) -> Option<Value> {
    let name = ty.rsplit("::").next().unwrap_or(ty).trim();
    if name == "f64" {
        let sum = a.as_f64()? + b.as_f64()?;
        return serde_json::Number::from_f64(sum).filter(|_| sum.is_finite()).map(Value::Number);
    }
    let (lo, hi): (i128, i128) = match name {
        "u8" => (0, u8::MAX.into()),
        "u16" => (0, u16::MAX.into()),
        "u32" => (0, u32::MAX.into()),
        "u64" | "usize" => (0, u64::MAX.into()),
        "i8" => (i8::MIN.into(), i8::MAX.into()),
        "i16" => (i16::MIN.into(), i16::MAX.into()),
        "i32" => (i32::MIN.into(), i32::MAX.into()),
        "i64" | "isize" => (i64::MIN.into(), i64::MAX.into()),
        _ => return None,
    };
    let int = |v: &Value| v.as_i64().map(i128::from).or_else(|| v.as_u64().map(i128::from));
    let sum = int(a)? + int(&Value::Number(b.clone()))?;
    if !(lo..=hi).contains(&sum) {
        return None;
    }
    match u64::try_from(sum) {
        Ok(n) => Some(Value::from(n)),
        Err(_) => i64::try_from(sum).ok().map(Value::from),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentflow_store::ChainStep;
    use serde_json::json;

    fn chain(snapshot: Value, deltas: &[Value]) -> StateChain {
        let steps = deltas
            .iter()
            .enumerate()
            .map(|(i, d)| ChainStep { seq: i as u64 + 1, delta: vec![serde_json::to_vec(d).unwrap()] })
            .collect();
        StateChain { snapshot_seq: 0, snapshot: serde_json::to_vec(&snapshot).unwrap(), steps }
    }

    fn described(fields: &[(&str, &str, &str)]) -> Value {
        let fields: Vec<Value> = fields.iter().map(|(n, r, t)| json!({ "name": n, "reducer": r, "type": t })).collect();
        json!({ "state": { "fields": fields } })
    }

    #[test]
    fn updates_fold_as_the_reducers_fold_them_or_not_at_all() {
        let d = described(&[("log", "append", "Vec<String>"), ("n", "add", "u8"), ("x", "overwrite", "String")]);
        let c = chain(json!({ "log": ["a"], "n": 1, "x": "old" }), &[json!({ "log": ["b"], "n": 2, "x": "new" })]);
        assert_eq!(fold_exactly(&c, Some(&d)), Some(json!({ "log": ["a", "b"], "n": 3, "x": "new" })));
        // Out of the type's range, a custom reducer, a key the state does not hold, no description.
        assert_eq!(fold_exactly(&chain(json!({ "n": 250 }), &[json!({ "n": 10 })]), Some(&d)), None);
        let custom = described(&[("x", "custom", "String")]);
        assert_eq!(fold_exactly(&chain(json!({ "x": "a" }), &[json!({ "x": "b" })]), Some(&custom)), None);
        assert_eq!(fold_exactly(&chain(json!({}), &[json!({ "x": "b" })]), Some(&d)), None);
        assert_eq!(fold_exactly(&chain(json!({ "x": "a" }), &[json!({ "x": "b" })]), None), None);
    }
}
