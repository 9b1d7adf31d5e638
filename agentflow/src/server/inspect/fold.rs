//! A thread's state without the graph's Rust types: the snapshot and the updates are JSON
//! (the stored form of the state and of `State::Update`, whose fields are the state's), and
//! the graph's stored description names each field's reducer, so the state is folded here
//! the way the derive's `apply` folds it. A custom reducer cannot be run without the user's
//! code: such a field is left out and the fold says so.
//!
//! Updates name the fields by their Rust names, the snapshot by the names the state's `serde`
//! attributes give them (`#[serde(rename_all = "camelCase")]` stores `log_lines` as
//! `logLines`). An update naming a key the document does not hold is therefore not folded
//! exactly, and the fold says so, unless the key is a field that may be skipped when
//! serialized (an `Option`, or a collection or string skipped while empty, with
//! `skip_serializing_if`) of a document stored under the field names.

use std::collections::{BTreeMap, BTreeSet};

use agentflow_store::{StateChain, Store};
use serde_json::{Map, Value};

use super::error::InspectError;
use super::field_type::{field_types, integer_bounds};

/// A state's fields as a graph's description lists them.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Fields {
    /// Each field's reducer (`overwrite`, `append`, `add`, `merge`, `messages`, `custom`), by
    /// the field's Rust name.
    pub reducers: BTreeMap<String, String>,
    /// The fields whose Rust type `skip_serializing_if` commonly leaves out while empty: an
    /// `Option`, a collection, a `String` (none for a description written before descriptions
    /// carried types).
    optional: BTreeSet<String>,
    /// Each field's Rust type, whitespace removed, by the field's Rust name (empty for a
    /// description written before descriptions carried types).
    types: BTreeMap<String, String>,
}

impl Fields {
    /// Whether `state`, which does not hold `name`, reads as field `name` being empty: `name`
    /// is a field that may be skipped ([`Fields::optional`]), and `state` is stored under the
    /// field names (each of its keys is a field, and each field that may not be skipped is
    /// there), so the key is an empty value skipped when serialized, not a field stored under
    /// another name.
    fn skipped_none(&self, name: &str, state: &Map<String, Value>) -> bool {
        self.optional.contains(name)
            && state.keys().all(|k| self.reducers.contains_key(k))
            && self.reducers.keys().all(|f| self.optional.contains(f) || state.contains_key(f))
    }
}

/// The state's fields, from a description.
pub fn fields(description: Option<&Value>) -> Option<Fields> {
    let listed = description?.get("state")?.get("fields")?.as_array()?;
    let reducers = listed
        .iter()
        .filter_map(|f| Some((f.get("name")?.as_str()?.to_string(), f.get("reducer")?.as_str()?.to_string())))
        .collect();
    let types: BTreeMap<String, String> = field_types(description)
        .into_iter()
        .map(|(name, ty)| (name, ty.chars().filter(|c| !c.is_whitespace()).collect()))
        .collect();
    let optional = types.iter().filter(|(_, ty)| may_be_skipped(ty)).map(|(name, _)| name.clone()).collect();
    Some(Fields { reducers, optional, types })
}

/// Whether the Rust type `ty` (whitespace removed) is one `skip_serializing_if` commonly
/// leaves out while empty: an `Option`, a standard collection or a `String`
/// (`std::option::Option<u32>`, `Vec<String>`, `String`).
fn may_be_skipped(ty: &str) -> bool {
    let head = ty.split('<').next().unwrap_or(ty);
    let name = head.rsplit("::").next().unwrap_or(head);
    let generic = ty.ends_with('>');
    match name {
        "Option" | "Vec" | "VecDeque" | "HashMap" | "BTreeMap" | "HashSet" | "BTreeSet" => generic,
        "String" => !generic,
        _ => false,
    }
}

/// Why a fold is not exact, as the error of a store's compaction callback (told apart from
/// a store failure by its type).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Inexact(String);

/// A folded state and what could not be folded exactly.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct Folded {
    /// The state as JSON.
    pub state: Value,
    /// Why the state may differ from what the graph's own types would compute.
    pub warnings: Vec<String>,
}

/// Folds a chain (snapshot, then each step's updates in order).
pub fn fold(thread: &str, chain: &StateChain, fields: Option<&Fields>) -> Result<Folded, InspectError> {
    let decode = |what: &str, seq: u64, e: serde_json::Error| {
        InspectError::store(format!("thread `{thread}`: the {what} at checkpoint {seq} is not JSON: {e}"))
    };
    let mut out = Folded {
        state: serde_json::from_slice(&chain.snapshot).map_err(|e| decode("state snapshot", chain.snapshot_seq, e))?,
        warnings: Vec::new(),
    };
    if fields.is_none() && chain.steps.iter().any(|s| !s.delta.is_empty()) {
        out.warnings.push(
            "the store has no description of this thread's graph (written by an older agentflow), so updates were \
             folded as if every field were overwritten"
                .to_string(),
        );
    }
    for step in &chain.steps {
        for blob in &step.delta {
            let update: Value = serde_json::from_slice(blob).map_err(|e| decode("update", step.seq, e))?;
            apply(&mut out, &update, fields, step.seq);
        }
    }
    Ok(out)
}

/// Folds the state of `thread` at checkpoint `seq`.
pub fn state_at(store: &dyn Store, thread: &str, seq: u64, fields: Option<&Fields>) -> Result<Folded, InspectError> {
    let chain = store.state_chain(thread, seq).map_err(InspectError::store)?.ok_or_else(|| {
        InspectError::NotFound(format!(
            "thread `{thread}` has no checkpoint {seq}; list them with `agentflow history {thread}`"
        ))
    })?;
    fold(thread, &chain, fields)
}

/// Applies one update (a JSON object of the fields it sets) through the reducers. A key the
/// state does not hold (and that is no skipped `None`, see [`Fields`]) is set as named, with a
/// warning: the state may store that field under another name.
fn apply(out: &mut Folded, update: &Value, fields: Option<&Fields>, seq: u64) {
    let Some(update_fields) = update.as_object() else {
        out.warnings.push(format!("the update at checkpoint {seq} is not a JSON object; it was skipped"));
        return;
    };
    if !out.state.is_object() {
        out.state = Value::Object(Map::new());
    }
    let Some(state) = out.state.as_object_mut() else { return };
    for (name, value) in update_fields {
        let reducer = fields.and_then(|f| f.reducers.get(name)).map_or("overwrite", String::as_str);
        // A field with a custom reducer is left out below, and said so there.
        if let Some(known) = fields
            && reducer != "custom"
            && !state.contains_key(name)
            && !known.skipped_none(name, state)
        {
            out.warnings.push(format!(
                "the update at checkpoint {seq} sets `{name}`, a key the stored state does not hold (the state may \
                 store its fields under other names, with `#[serde(rename ..)]`), so the state cannot be computed \
                 without the graph's Rust types"
            ));
        }
        let ty = fields.and_then(|f| f.types.get(name)).map(String::as_str);
        let current = state.get_mut(name);
        match (reducer, current) {
            ("append", Some(Value::Array(items))) => match value {
                Value::Array(more) => items.extend(more.iter().cloned()),
                other => items.push(other.clone()),
            },
            ("messages", Some(Value::Array(_))) if ty.is_some_and(|ty| !holds_messages(ty)) => {
                out.warnings.push(format!(
                    "field `{name}` is a `{}`, whose items the `messages` reducer matches by the graph's own `HasId`, \
                     so its value after checkpoint {seq} cannot be computed without the graph's Rust types",
                    ty.unwrap_or_default()
                ));
            }
            ("messages", Some(Value::Array(items))) => {
                for item in value.as_array().into_iter().flatten() {
                    let id = item.get("id");
                    match items.iter().position(|old| id.is_some() && old.get("id") == id) {
                        Some(i) => items[i] = item.clone(),
                        None => items.push(item.clone()),
                    }
                }
            }
            ("add", Some(current @ Value::Number(_))) => match add(current, value, ty) {
                Some(sum) => *current = sum,
                None => out.warnings.push(format!(
                    "field `{name}` is a `{}`, whose sum at checkpoint {seq} cannot be computed exactly without the \
                     graph's Rust types",
                    ty.unwrap_or_default()
                )),
            },
            ("merge", Some(Value::Object(map))) => {
                if let Value::Object(more) = value {
                    map.extend(more.iter().map(|(k, v)| (k.clone(), v.clone())));
                }
            }
            ("custom", _) => {
                state.remove(name);
                out.warnings.push(format!(
                    "field `{name}` has a custom reducer, so its value after checkpoint {seq} cannot be computed \
                     without the graph's Rust types; it is left out"
                ));
            }
            (_, _) => {
                state.insert(name.clone(), value.clone());
            }
        }
    }
}

/// `add` on JSON numbers, as the `Add` reducer computes it for a field of Rust type `ty`:
/// integers saturate at the type's bounds, an `f32` adds in single precision, an `f64` in
/// double. `None` if that cannot be computed here: another type (a user's own number type, a
/// 128-bit integer out of the 64-bit range), or a float sum that is not finite. Without a type
/// (a description from before descriptions carried them), integers saturate at the 64-bit
/// bounds and anything else adds as `f64`.
fn add(current: &Value, value: &Value, ty: Option<&str>) -> Option<Value> {
    let integer = |v: &Value| v.as_i64().map(i128::from).or_else(|| v.as_u64().map(i128::from));
    let from_integer = |n: i128| match u64::try_from(n) {
        Ok(n) => Some(Value::from(n)),
        Err(_) => i64::try_from(n).ok().map(Value::from),
    };
    let float = |sum: f64| serde_json::Number::from_f64(sum).filter(|_| sum.is_finite()).map(Value::Number);
    let bounds = match ty.map(|ty| ty.rsplit("::").next().unwrap_or(ty)) {
        None => (i128::from(i64::MIN), i128::from(u64::MAX)),
        Some("f64") => return float(current.as_f64()? + value.as_f64()?),
        #[allow(clippy::cast_possible_truncation)]
        Some("f32") => return float(f64::from(current.as_f64()? as f32 + value.as_f64()? as f32)),
        Some("u128" | "i128") => return from_integer(integer(current)? + integer(value)?),
        Some(name) => integer_bounds(name)?,
    };
    match (integer(current), integer(value)) {
        (Some(a), Some(b)) => from_integer((a + b).clamp(bounds.0, bounds.1)),
        _ if ty.is_none() => match (current.as_f64(), value.as_f64()) {
            (Some(a), Some(b)) => float(a + b),
            _ => Some(value.clone()),
        },
        _ => None,
    }
}

/// Whether the Rust type `ty` (whitespace removed) is a `Vec` of agentflow's `Message`, whose
/// items the `messages` reducer matches by their `id` key.
fn holds_messages(ty: &str) -> bool {
    let Some(item) = ty.strip_suffix('>').and_then(|t| t.split_once('<')).map(|(_, item)| item) else {
        return false;
    };
    let head = ty.split('<').next().unwrap_or(ty);
    head.rsplit("::").next() == Some("Vec")
        && matches!(item, "Message" | "agentflow::Message" | "agentflow::message::Message")
}

/// What changed between two JSON values, by JSON pointer (RFC 6901) path.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct Diff {
    /// Paths only in the second value, with its value there.
    pub added: Vec<(String, Value)>,
    /// Paths only in the first value, with its value there.
    pub removed: Vec<(String, Value)>,
    /// Paths in both with different values: (path, before, after).
    pub changed: Vec<(String, Value, Value)>,
}

/// Compares `a` and `b`: objects key by key, arrays index by index, anything else as a whole.
pub fn diff(a: &Value, b: &Value) -> Diff {
    let mut out = Diff::default();
    walk("", a, b, &mut out);
    out
}

fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

fn walk(path: &str, a: &Value, b: &Value, out: &mut Diff) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for (k, va) in x {
                let p = format!("{path}/{}", escape(k));
                match y.get(k) {
                    Some(vb) => walk(&p, va, vb, out),
                    None => out.removed.push((p, va.clone())),
                }
            }
            for (k, vb) in y {
                if !x.contains_key(k) {
                    out.added.push((format!("{path}/{}", escape(k)), vb.clone()));
                }
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            for i in 0..x.len().max(y.len()) {
                let p = format!("{path}/{i}");
                match (x.get(i), y.get(i)) {
                    (Some(va), Some(vb)) => walk(&p, va, vb, out),
                    (Some(va), None) => out.removed.push((p, va.clone())),
                    (None, Some(vb)) => out.added.push((p, vb.clone())),
                    (None, None) => {}
                }
            }
        }
        _ if a != b => {
            out.changed.push((if path.is_empty() { "/".to_string() } else { path.to_string() }, a.clone(), b.clone()))
        }
        _ => {}
    }
}

/// The first reason a fold was not exact (for writes that must not guess).
pub fn require_exact(folded: &Folded) -> Result<(), Inexact> {
    match folded.warnings.first() {
        None => Ok(()),
        Some(w) => Err(Inexact(w.clone())),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn reducers(pairs: &[(&str, &str)]) -> Fields {
        Fields { reducers: pairs.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect(), ..Fields::default() }
    }

    fn typed(pairs: &[(&str, &str, &str)]) -> Fields {
        Fields {
            reducers: pairs.iter().map(|(n, r, _)| (n.to_string(), r.to_string())).collect(),
            types: pairs.iter().map(|(n, _, t)| (n.to_string(), t.to_string())).collect(),
            ..Fields::default()
        }
    }

    /// `add` folds as the reducer computes it for the field's type: saturating at the type's
    /// bounds, `f32` in single precision; a type it cannot compute is said so, not guessed.
    #[test]
    fn add_folds_as_the_fields_own_type_adds() {
        let f = typed(&[
            ("small", "add", "u8"),
            ("neg", "add", "i16"),
            ("single", "add", "f32"),
            ("double", "add", "f64"),
            ("money", "add", "Decimal"),
        ]);
        let mut out = Folded {
            state: json!({"small": 200, "neg": -32000, "single": 0.1, "double": 0.1, "money": 1}),
            warnings: vec![],
        };
        apply(&mut out, &json!({"small": 100, "neg": -1000, "single": 0.2, "double": 0.2}), Some(&f), 1);
        assert_eq!(out.state["small"], json!(255), "saturates at u8::MAX as the reducer does");
        assert_eq!(out.state["neg"], json!(-32768));
        assert_eq!(out.state["single"].as_f64().map(|v| v as f32), Some(0.1f32 + 0.2f32));
        assert_eq!(out.state["double"], json!(0.1f64 + 0.2f64));
        assert!(out.warnings.is_empty(), "{:?}", out.warnings);
        apply(&mut out, &json!({"money": 2}), Some(&f), 2);
        assert_eq!(out.state["money"], json!(1), "left as it was");
        assert_eq!(out.warnings.len(), 1, "{:?}", out.warnings);
        assert!(out.warnings[0].contains("`Decimal`"), "{:?}", out.warnings);
    }

    /// The `messages` reducer matches items by the graph's own `HasId`: only agentflow's
    /// `Message` is folded by its `id` key here.
    #[test]
    fn messages_fold_by_id_only_for_agentflows_message() {
        let f = typed(&[("chat", "messages", "Vec<Message>"), ("notes", "messages", "Vec<Note>")]);
        let mut out =
            Folded { state: json!({"chat": [{"id": "a", "t": 1}], "notes": [{"id": "a"}]}), warnings: vec![] };
        apply(&mut out, &json!({"chat": [{"id": "a", "t": 2}]}), Some(&f), 1);
        assert_eq!(out.state["chat"], json!([{"id": "a", "t": 2}]));
        assert!(out.warnings.is_empty());
        apply(&mut out, &json!({"notes": [{"id": "a", "x": 1}]}), Some(&f), 2);
        assert_eq!(out.warnings.len(), 1, "{:?}", out.warnings);
        assert!(out.warnings[0].contains("`Vec<Note>`"), "{:?}", out.warnings);
    }

    #[test]
    fn updates_fold_through_each_fields_reducer() {
        let r =
            reducers(&[("n", "add"), ("log", "append"), ("tags", "merge"), ("msgs", "messages"), ("x", "overwrite")]);
        let mut out = Folded {
            state: json!({"n": 1, "log": ["a"], "tags": {"k": 1}, "msgs": [{"id": "m1", "t": "old"}], "x": 1}),
            warnings: vec![],
        };
        apply(
            &mut out,
            &json!({"n": 2, "log": ["b"], "tags": {"j": 2, "k": 3}, "msgs": [{"id": "m1", "t": "new"}, {"id": "m2"}], "x": 5}),
            Some(&r),
            1,
        );
        assert_eq!(
            out.state,
            json!({"n": 3, "log": ["a", "b"], "tags": {"k": 3, "j": 2}, "msgs": [{"id": "m1", "t": "new"}, {"id": "m2"}], "x": 5})
        );
        assert!(out.warnings.is_empty());
    }

    #[test]
    fn a_custom_reducer_is_left_out_and_said() {
        let r = reducers(&[("c", "custom")]);
        let mut out = Folded { state: json!({"c": 1}), warnings: vec![] };
        apply(&mut out, &json!({"c": 2}), Some(&r), 4);
        assert_eq!(out.state, json!({}));
        assert!(out.warnings[0].contains("`c`") && out.warnings[0].contains("checkpoint 4"));
        assert!(require_exact(&out).is_err());
    }

    #[test]
    fn a_key_the_state_does_not_hold_is_said_unless_it_is_a_skipped_none() {
        let description = json!({ "state": { "fields": [
            { "name": "log_lines", "reducer": "append", "type": "Vec<String>" },
            { "name": "note", "reducer": "overwrite", "type": "Option<String>" },
        ] } });
        let f = fields(Some(&description)).unwrap();
        assert!(f.optional.contains("note") && f.optional.contains("log_lines"));
        // Stored under the field names, `None` skipped: the update sets it.
        let mut out = Folded { state: json!({ "log_lines": ["a"] }), warnings: vec![] };
        apply(&mut out, &json!({ "note": "n", "log_lines": ["b"] }), Some(&f), 2);
        assert_eq!(out.state, json!({ "log_lines": ["a", "b"], "note": "n" }));
        assert!(out.warnings.is_empty(), "{:?}", out.warnings);
        // A collection skipped while empty, stored under the field names: the update sets it.
        let mut out = Folded { state: json!({ "note": "n" }), warnings: vec![] };
        apply(&mut out, &json!({ "log_lines": ["b"] }), Some(&f), 2);
        assert_eq!(out.state, json!({ "note": "n", "log_lines": ["b"] }));
        assert!(out.warnings.is_empty(), "{:?}", out.warnings);
        // A field that may not be skipped, absent: stored under another name.
        let counted = json!({ "state": { "fields": [
            { "name": "log_lines", "reducer": "append", "type": "Vec<String>" },
            { "name": "count", "reducer": "add", "type": "u32" },
        ] } });
        let c = fields(Some(&counted)).unwrap();
        let mut out = Folded { state: json!({ "count": 1 }), warnings: vec![] };
        apply(&mut out, &json!({ "log_lines": ["b"] }), Some(&c), 2);
        assert!(out.warnings.is_empty(), "{:?}", out.warnings);
        let mut out = Folded { state: json!({ "logLines": ["a"] }), warnings: vec![] };
        apply(&mut out, &json!({ "count": 2 }), Some(&c), 2);
        assert!(require_exact(&out).is_err(), "`count` missing: {:?}", out.warnings);
        // Stored under other names (`rename_all = "camelCase"`): the `Option` field's absence
        // proves nothing either.
        for update in [json!({ "log_lines": ["b"] }), json!({ "note": "n" })] {
            let mut out = Folded { state: json!({ "logLines": ["a"] }), warnings: vec![] };
            apply(&mut out, &update, Some(&f), 3);
            assert!(out.warnings[0].contains("checkpoint 3") && out.warnings[0].contains("does not hold"));
            assert!(require_exact(&out).is_err());
        }
    }

    #[test]
    fn diff_names_added_removed_and_changed_paths() {
        let d = diff(
            &json!({"a": 1, "b": [1, 2], "c/d": 0, "gone": true}),
            &json!({"a": 2, "b": [1, 2, 3], "c/d": 0, "new": null}),
        );
        assert_eq!(d.changed, vec![("/a".to_string(), json!(1), json!(2))]);
        assert_eq!(d.added, vec![("/b/2".to_string(), json!(3)), ("/new".to_string(), json!(null))]);
        assert_eq!(d.removed, vec![("/gone".to_string(), json!(true))]);
    }
}
