//! Checking a JSON value against a state field's Rust type, as the graph's description writes
//! it (`Vec<String>`, `Option<u32>`), without the type itself: a manual update (`agentflow
//! update --set`) can refuse a value that the app's own `serde` decoding of the field would
//! refuse, so no checkpoint is written that the app cannot read back.
//!
//! Only the standard types are understood: integers (with their ranges), floats, `bool`,
//! `char`, `String`, `Option`, `Box`/`Rc`/`Arc`, sequences and sets, maps with string keys,
//! tuples, arrays and `serde_json::Value`. Anything else (the user's own structs and enums, a
//! type alias) is not checked here; the caller falls back to comparing JSON kinds. Neither is
//! a type nested deeper than 64 levels (a description is stored data and may come from an
//! edited export file): past that depth a check stops and says the value fits partly, so its
//! cost stays bounded by the type's length times that depth.

use serde_json::Value;

/// What a check of a value against a type found.
#[derive(Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fit {
    /// Every part of the value was checked against a type this module understands.
    Checked,
    /// The value fits as far as the types could be checked; some of it is of a type not
    /// understood here.
    Partly,
}

/// How many levels of type arguments (`Option<..>`, tuple items, array elements, ..) a check
/// follows; deeper parts count as a type not understood here.
const MAX_DEPTH: usize = 64;

/// Checks `value` against the Rust type `ty` (whitespace removed); `Err` says why the type's
/// `serde` decoding would refuse it, naming the place (`path`) in the value.
pub fn check(ty: &str, value: &Value, path: &str) -> Result<Fit, String> {
    check_at(ty, value, path, 0)
}

/// [`check`] of a part `depth` levels down the field's type.
fn check_at(ty: &str, value: &Value, path: &str, depth: usize) -> Result<Fit, String> {
    if depth > MAX_DEPTH {
        return Ok(Fit::Partly);
    }
    let check = |ty: &str, value: &Value, path: &str| check_at(ty, value, path, depth + 1);
    let refuse =
        |want: &str| Err(format!("{path} must be {want} (the field's type is `{}`), not {}", cut(ty, 80), show(value)));
    if let Some(inner) = ty.strip_prefix('(').and_then(|t| t.strip_suffix(')')) {
        let parts = split_top(inner, ',');
        if parts.is_empty() {
            return if value.is_null() { Ok(Fit::Checked) } else { refuse("null") };
        }
        let Some(items) = value.as_array().filter(|a| a.len() == parts.len()) else {
            return refuse(&format!("an array of {} items", parts.len()));
        };
        return all(parts.iter().zip(items).enumerate().map(|(i, (t, v))| check(t, v, &format!("{path}[{i}]"))));
    }
    if let Some(inner) = ty.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
        let (elem, len) = match inner.rsplit_once(';') {
            Some((elem, len)) => (elem, len.parse::<usize>().ok()),
            None => (inner, None),
        };
        let Some(items) = value.as_array() else { return refuse("an array") };
        if let Some(n) = len
            && items.len() != n
        {
            return refuse(&format!("an array of {n} items"));
        }
        return all(items.iter().enumerate().map(|(i, v)| check(elem, v, &format!("{path}[{i}]"))));
    }
    let (head, args) = match ty.find('<') {
        Some(at) if ty.ends_with('>') => (&ty[..at], split_top(&ty[at + 1..ty.len() - 1], ',')),
        _ => (ty, Vec::new()),
    };
    let name = head.rsplit("::").next().unwrap_or(head);
    let arg = |i: usize| args.get(i).copied();
    match (name, arg(0)) {
        ("u8" | "u16" | "u32" | "u64" | "usize" | "i8" | "i16" | "i32" | "i64" | "isize", _) => {
            if integer_fits(name, value) { Ok(Fit::Checked) } else { refuse(&format!("an integer that fits `{name}`")) }
        }
        ("u128" | "i128", _) => {
            let fits = value.is_u64() || (value.is_i64() && (name == "i128" || value.as_i64() >= Some(0)));
            if fits { Ok(Fit::Checked) } else { refuse(&format!("an integer that fits `{name}`")) }
        }
        ("f32" | "f64", _) => {
            if value.is_number() {
                Ok(Fit::Checked)
            } else {
                refuse("a number")
            }
        }
        ("bool", _) => {
            if value.is_boolean() {
                Ok(Fit::Checked)
            } else {
                refuse("true or false")
            }
        }
        ("String", _) => {
            if value.is_string() {
                Ok(Fit::Checked)
            } else {
                refuse("a string")
            }
        }
        ("char", _) => {
            let one = value.as_str().is_some_and(|s| s.chars().count() == 1);
            if one { Ok(Fit::Checked) } else { refuse("a string of one character") }
        }
        ("Option", Some(t)) => {
            if value.is_null() {
                Ok(Fit::Checked)
            } else {
                check(t, value, path)
            }
        }
        ("Box" | "Rc" | "Arc", Some(t)) => check(t, value, path),
        ("Vec" | "VecDeque" | "LinkedList" | "BTreeSet" | "HashSet" | "BinaryHeap", Some(t)) => {
            let Some(items) = value.as_array() else { return refuse("an array") };
            all(items.iter().enumerate().map(|(i, v)| check(t, v, &format!("{path}[{i}]"))))
        }
        ("HashMap" | "BTreeMap" | "IndexMap", Some(k)) => {
            let Some(map) = value.as_object() else { return refuse("an object") };
            let keys = if k.rsplit("::").next() == Some("String") { Fit::Checked } else { Fit::Partly };
            let values = match arg(1) {
                Some(t) => all(map.iter().map(|(key, v)| check(t, v, &format!("{path}.{key}"))))?,
                None => Fit::Partly,
            };
            Ok(if keys == Fit::Checked && values == Fit::Checked { Fit::Checked } else { Fit::Partly })
        }
        ("Value", None) if head == "serde_json::Value" => Ok(Fit::Checked),
        _ => Ok(Fit::Partly),
    }
}

/// Each state field's Rust type, from a description (none for a description written before
/// descriptions carried types).
pub fn field_types(description: Option<&Value>) -> std::collections::BTreeMap<String, String> {
    let fields = description.and_then(|d| d.get("state")?.get("fields")?.as_array().cloned()).unwrap_or_default();
    fields
        .iter()
        .filter_map(|f| Some((f.get("name")?.as_str()?.to_string(), f.get("type")?.as_str()?.to_string())))
        .filter(|(_, ty)| !ty.is_empty())
        .collect()
}

/// Combines checks: the first refusal, else `Checked` only if every part was.
fn all(checks: impl Iterator<Item = Result<Fit, String>>) -> Result<Fit, String> {
    let mut fit = Fit::Checked;
    for c in checks {
        if c? == Fit::Partly {
            fit = Fit::Partly;
        }
    }
    Ok(fit)
}

/// Whether `value` is an integer in the range of the integer type `name`.
fn integer_fits(name: &str, value: &Value) -> bool {
    let Some((min, max)) = integer_bounds(name) else { return false };
    let n = value.as_i64().map(i128::from).or_else(|| value.as_u64().map(i128::from));
    n.is_some_and(|n| (min..=max).contains(&n))
}

/// The range of the integer type `name` (of those up to 64 bits), if it is one.
pub(crate) fn integer_bounds(name: &str) -> Option<(i128, i128)> {
    Some(match name {
        "u8" => (0, u8::MAX.into()),
        "u16" => (0, u16::MAX.into()),
        "u32" => (0, u32::MAX.into()),
        "u64" => (0, u64::MAX.into()),
        "usize" => (0, i128::try_from(usize::MAX).unwrap_or(i128::MAX)),
        "i8" => (i8::MIN.into(), i8::MAX.into()),
        "i16" => (i16::MIN.into(), i16::MAX.into()),
        "i32" => (i32::MIN.into(), i32::MAX.into()),
        "i64" => (i64::MIN.into(), i64::MAX.into()),
        "isize" => (i128::try_from(isize::MIN).unwrap_or(i128::MIN), i128::try_from(isize::MAX).unwrap_or(i128::MAX)),
        _ => return None,
    })
}

/// Splits `s` at `sep` outside of `<..>`, `(..)` and `[..]`; empty for an empty `s`.
fn split_top(s: &str, sep: char) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '<' | '(' | '[' => depth += 1,
            '>' | ')' | ']' => depth -= 1,
            c if c == sep && depth == 0 => {
                parts.push(&s[start..i]);
                start = i + c.len_utf8();
            }
            _ => {}
        }
    }
    if start < s.len() {
        parts.push(&s[start..]);
    }
    parts
}

/// A short rendering of a value for messages.
fn show(value: &Value) -> String {
    cut(&value.to_string(), 40)
}

/// `text` cut to `max` characters for a message.
fn cut(text: &str, max: usize) -> String {
    if text.chars().count() > max {
        format!("{}..", text.chars().take(max).collect::<String>())
    } else {
        text.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn refused(ty: &str, v: Value) -> bool {
        check(ty, &v, "`f`").is_err()
    }

    #[test]
    fn integers_are_checked_against_their_range() {
        assert!(refused("u32", json!(-1)));
        assert!(refused("u32", json!(4_294_967_296u64)));
        assert!(refused("u8", json!(256)));
        assert!(refused("i8", json!(-129)));
        assert!(refused("u32", json!(1.5)));
        assert!(refused("u32", json!("7")));
        assert_eq!(check("u32", &json!(4_294_967_295u64), "f"), Ok(Fit::Checked));
        assert_eq!(check("i64", &json!(-3), "f"), Ok(Fit::Checked));
        assert_eq!(check("u128", &json!(u64::MAX), "f"), Ok(Fit::Checked));
        assert!(refused("u128", json!(-1)));
    }

    #[test]
    fn containers_check_their_items_and_name_the_place() {
        let err = check("Vec<String>", &json!(["a", 1]), "`log`").unwrap_err();
        assert!(err.starts_with("`log`[1] must be a string"), "{err}");
        assert!(refused("Vec<String>", json!("a")));
        assert_eq!(check("Option<Vec<u8>>", &json!(null), "f"), Ok(Fit::Checked));
        assert!(refused("Option<Vec<u8>>", json!([300])));
        assert!(refused("std::collections::BTreeMap<String,u32>", json!({ "a": -1 })));
        assert_eq!(check("HashMap<String,bool>", &json!({ "a": true }), "f"), Ok(Fit::Checked));
        assert!(refused("(u8,String)", json!([1])));
        assert_eq!(check("(u8,String)", &json!([1, "x"]), "f"), Ok(Fit::Checked));
        assert!(refused("[u8;2]", json!([1, 2, 3])));
        assert!(refused("char", json!("ab")));
        assert_eq!(check("Box<f64>", &json!(2), "f"), Ok(Fit::Checked));
    }

    #[test]
    fn types_not_understood_here_are_left_to_the_caller() {
        assert_eq!(check("Priority", &json!("whatever"), "f"), Ok(Fit::Partly));
        assert_eq!(check("Value", &json!(1), "f"), Ok(Fit::Partly));
        assert_eq!(check("Vec<Message>", &json!([{}]), "f"), Ok(Fit::Partly));
        assert!(refused("Vec<Message>", json!({})));
        assert_eq!(check("serde_json::Value", &json!({ "a": [1] }), "f"), Ok(Fit::Checked));
        assert_eq!(check("HashMap<u32,String>", &json!({ "1": "x" }), "f"), Ok(Fit::Partly));
    }

    #[test]
    fn a_deeply_nested_type_is_checked_to_a_depth_and_then_left_to_the_caller() {
        let nest = |wrapper: &str, n: usize, inner: &str| format!("{}{inner}{}", wrapper.repeat(n), ">".repeat(n));
        // Within the depth, every level is checked.
        let shallow = nest("Option<", MAX_DEPTH, "u8");
        assert_eq!(check(&shallow, &json!(7), "f"), Ok(Fit::Checked));
        assert!(refused(&shallow, json!(300)));
        // Far deeper than any real type: no stack overflow, no quadratic scan, and a refusal
        // does not repeat the whole type.
        let started = std::time::Instant::now();
        let deep = |wrapper: &str| nest(wrapper, 100_000, "u32");
        let within = |n: usize, wrap: fn(Value) -> Value| (0..n).fold(json!(1), |v, _| wrap(v));
        assert_eq!(check(&deep("Box<"), &json!(1), "f"), Ok(Fit::Partly));
        assert_eq!(check(&deep("Option<"), &json!(1), "f"), Ok(Fit::Partly));
        assert_eq!(check(&deep("Option<"), &json!(null), "f"), Ok(Fit::Checked));
        let arrays = within(MAX_DEPTH + 10, |v| json!([v]));
        assert_eq!(check(&deep("Vec<"), &arrays, "f"), Ok(Fit::Partly));
        let objects = within(MAX_DEPTH + 10, |v| json!({ "k": v }));
        assert_eq!(check(&deep("HashMap<String,"), &objects, "f"), Ok(Fit::Partly));
        let err = check(&deep("Vec<"), &json!("x"), "`f`").unwrap_err();
        assert!(err.starts_with("`f` must be an array (the field's type is `Vec<Vec<"), "{err}");
        assert!(err.len() < 300, "{err}");
        let tuples = format!("{}u8{}", "(u8,".repeat(100_000), ")".repeat(100_000));
        let err = check(&tuples, &json!([1, [2, [3, 4]]]), "f").unwrap_err();
        assert!(err.starts_with("f[1][1][1] must be an array of 2 items"), "{err}");
        assert!(err.len() < 300, "{err}");
        assert!(started.elapsed() < std::time::Duration::from_secs(30), "{:?}", started.elapsed());
    }
}
