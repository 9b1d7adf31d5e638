//! A snapshot's JSON -> its tools with Rust names and types. Pure: no proc-macro types.

use serde_json::{Map, Value};

use super::ir::{Body, Field, SnapTool, StructDef, Ty};
use super::names::{pascal, snake, unique};
use crate::keywords::mcp::{MAX_TYPE_DEPTH, RESERVED};

/// The snapshot format this version reads (the runtime's `SNAPSHOT_FORMAT`).
pub const SNAPSHOT_FORMAT: u64 = 1;

/// Reads a snapshot file's bytes; the error says what is wrong, for a message that names the file.
pub fn read_snapshot(bytes: &[u8]) -> Result<Vec<SnapTool>, String> {
    let root: Value = serde_json::from_slice(bytes).map_err(|e| format!("it is not JSON: {e}"))?;
    let format = root.get("format").and_then(Value::as_u64);
    if format != Some(SNAPSHOT_FORMAT) {
        let found = root.get("format").map_or("no `format`".to_string(), |f| format!("format {f}"));
        return Err(format!(
            "it has {found}, and this version reads format {SNAPSHOT_FORMAT}: take it again with `agentflow mcp snapshot`"
        ));
    }
    let Some(tools) = root.get("tools").and_then(Value::as_array) else {
        return Err("it has no `tools` list".into());
    };
    let mut taken = Vec::new();
    let mut out: Vec<SnapTool> = Vec::new();
    for (i, tool) in tools.iter().enumerate() {
        let Some(name) = tool.get("name").and_then(Value::as_str) else {
            return Err(format!("tool {i} has no `name`"));
        };
        if out.iter().any(|t| t.name == name) {
            return Err(format!("the tool `{name}` is listed twice"));
        }
        let Some(schema) = tool.get("inputSchema").and_then(Value::as_object) else {
            return Err(format!("the tool `{name}` has no `inputSchema` object"));
        };
        out.push(snap_tool(name, tool, schema, &mut taken));
    }
    Ok(out)
}

/// The item name of a tool: snake case, with `_` after a name the module uses itself.
pub fn rust_name(tool: &str) -> String {
    let name = snake(tool);
    if RESERVED.contains(&name.as_str()) { format!("{name}_") } else { name }
}

fn snap_tool(name: &str, tool: &Value, schema: &Map<String, Value>, taken: &mut Vec<String>) -> SnapTool {
    let text = |key: &str| tool.get(key).and_then(Value::as_str).map(str::to_string);
    let annotations = tool
        .get("annotations")
        .and_then(Value::as_object)
        .map(|a| a.iter().filter(|(k, _)| *k != "title").map(|(k, v)| (k.clone(), v.to_string())).collect())
        .unwrap_or_default();
    let mut shown = schema.clone();
    shown.remove("$schema");
    let args = format!("{}Args", pascal(name));
    let mut types = Types { taken, out: Vec::new() };
    let doc = format!("The arguments of the MCP tool `{name}`.");
    let args = if schema.get("properties").is_some_and(Value::is_object) {
        types.object(schema, args, doc, 0)
    } else {
        let name = unique(args, types.taken);
        let deny_unknown = schema.get("additionalProperties") == Some(&Value::Bool(false));
        types.out.push(StructDef { name: name.clone(), doc, deny_unknown, body: Body::Map });
        name
    };
    let mut defs = types.out;
    // The argument struct was pushed last (after its fields' structs): put it first.
    defs.rotate_right(1);
    SnapTool {
        name: name.to_string(),
        rust: rust_name(name),
        args,
        title: text("title"),
        description: text("description").unwrap_or_default(),
        annotations,
        schema: Value::Object(shown).to_string(),
        types: defs,
    }
}

/// Collects the structs of one tool's arguments; `taken` holds every struct name of the module.
struct Types<'a> {
    taken: &'a mut Vec<String>,
    out: Vec<StructDef>,
}

impl Types<'_> {
    /// The type of a value described by `schema`, `name` being the struct name an object gets.
    fn ty(&mut self, schema: &Value, name: String, what: &str, depth: usize) -> Ty {
        let Some(obj) = schema.as_object() else { return Ty::Value };
        let combined = ["anyOf", "oneOf", "allOf", "not", "$ref", "if"].iter().any(|k| obj.contains_key(*k));
        if depth >= MAX_TYPE_DEPTH || combined {
            return Ty::Value;
        }
        match obj.get("type").and_then(Value::as_str) {
            Some("string") => Ty::String,
            Some("number") => Ty::F64,
            Some("integer") => Ty::I64,
            Some("boolean") => Ty::Bool,
            Some("array") => match obj.get("items") {
                Some(items @ Value::Object(_)) => {
                    Ty::Vec(Box::new(self.ty(items, format!("{name}Item"), &format!("an item of {what}"), depth + 1)))
                }
                _ => Ty::Vec(Box::new(Ty::Value)),
            },
            Some("object") if obj.get("properties").and_then(Value::as_object).is_some_and(|p| !p.is_empty()) => {
                let doc = obj
                    .get("description")
                    .and_then(Value::as_str)
                    .map_or_else(|| format!("{what}."), |d| format!("{d}\n\n{what}."));
                Ty::Struct(self.object(obj, name, doc, depth))
            }
            Some("object") => Ty::Map,
            _ => Ty::Value,
        }
    }

    /// An object with listed properties: a struct, pushed after the structs of its fields.
    fn object(&mut self, obj: &Map<String, Value>, name: String, doc: String, depth: usize) -> String {
        let name = unique(name, self.taken);
        let required: Vec<&str> = obj
            .get("required")
            .and_then(Value::as_array)
            .map_or_else(Vec::new, |r| r.iter().filter_map(Value::as_str).collect());
        let mut field_names = Vec::new();
        let mut fields = Vec::new();
        for (key, schema) in obj.get("properties").and_then(Value::as_object).into_iter().flatten() {
            let what = format!("`{key}` of `{name}`");
            let ty = self.ty(schema, format!("{name}{}", pascal(key)), &what, depth + 1);
            let rust = unique(snake(key), &mut field_names);
            let optional = !required.contains(&key.as_str());
            fields.push(Field { rust, json: key.clone(), ty, optional, doc: field_doc(schema, optional) });
        }
        // The declared properties are what the program was typed against: an undeclared
        // field is refused at every level, whatever `additionalProperties` says.
        self.out.push(StructDef { name: name.clone(), doc, deny_unknown: true, body: Body::Fields(fields) });
        name
    }
}

/// A field's doc: its description, the values it may take, and the server's default.
fn field_doc(schema: &Value, optional: bool) -> String {
    let mut parts = Vec::new();
    if let Some(d) = schema.get("description").and_then(Value::as_str) {
        parts.push(d.trim().to_string());
    }
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        let values: Vec<String> = values.iter().map(|v| format!("`{v}`")).collect();
        parts.push(format!("One of {}.", values.join(", ")));
    }
    if let Some(default) = schema.get("default")
        && optional
    {
        parts.push(format!("Left out, the server takes `{default}`."));
    }
    parts.join("\n\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn snapshot(tools: Value) -> Vec<u8> {
        json!({ "format": 1, "server": { "name": "t" }, "tools": tools }).to_string().into_bytes()
    }

    fn one(schema: Value) -> SnapTool {
        let mut tools = read_snapshot(&snapshot(json!([{ "name": "make-ticket", "inputSchema": schema }]))).unwrap();
        tools.remove(0)
    }

    fn fields(def: &StructDef) -> Vec<(&str, &str, &Ty, bool)> {
        let Body::Fields(f) = &def.body else { panic!("{def:?} has no fields") };
        f.iter().map(|f| (f.rust.as_str(), f.json.as_str(), &f.ty, f.optional)).collect()
    }

    #[test]
    fn scalar_types_and_optional_fields() {
        let t = one(json!({
            "type": "object",
            "properties": {
                "a": { "type": "number" }, "n": { "type": "integer" }, "s": { "type": "string" },
                "flag": { "type": "boolean", "default": false, "description": "A flag." },
                "any": {}, "either": { "anyOf": [{ "type": "string" }, { "type": "number" }] },
                "nullable": { "type": ["string", "null"] }, "r": { "$ref": "#/x" }
            },
            "required": ["a", "n", "s"],
            "$schema": "http://json-schema.org/draft-07/schema#"
        }));
        assert_eq!(t.name, "make-ticket");
        assert_eq!((t.rust.as_str(), t.args.as_str()), ("make_ticket", "MakeTicketArgs"));
        assert_eq!(t.types.len(), 1);
        assert_eq!(
            fields(&t.types[0]),
            vec![
                ("a", "a", &Ty::F64, false),
                ("any", "any", &Ty::Value, true),
                ("either", "either", &Ty::Value, true),
                ("flag", "flag", &Ty::Bool, true),
                ("n", "n", &Ty::I64, false),
                ("nullable", "nullable", &Ty::Value, true),
                ("r", "r", &Ty::Value, true),
                ("s", "s", &Ty::String, false),
            ]
        );
        let Body::Fields(f) = &t.types[0].body else { unreachable!() };
        assert_eq!(f[3].doc, "A flag.\n\nLeft out, the server takes `false`.");
        // The schema shown to the model leaves `$schema` out.
        assert!(!t.schema.contains("$schema"), "{}", t.schema);
        assert!(t.schema.contains("\"required\":[\"a\",\"n\",\"s\"]"), "{}", t.schema);
    }

    #[test]
    fn nested_objects_and_arrays_of_objects_become_structs() {
        let t = one(json!({
            "type": "object",
            "properties": {
                "customer": {
                    "type": "object",
                    "description": "Who asks.",
                    "properties": { "emailAddress": { "type": "string" }, "tier": { "type": "integer" } },
                    "required": ["emailAddress"],
                    "additionalProperties": false
                },
                "lines": { "type": "array", "items": { "type": "object", "properties": { "sku": { "type": "string" } } } },
                "tags": { "type": "array", "items": { "type": "string" } },
                "raw": { "type": "array" },
                "meta": { "type": "object" },
                "extra": { "type": "object", "properties": {}, "additionalProperties": { "type": "string" } }
            },
            "required": ["customer", "lines"]
        }));
        let names: Vec<&str> = t.types.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["MakeTicketArgs", "MakeTicketArgsCustomer", "MakeTicketArgsLinesItem"]);
        assert_eq!(
            fields(&t.types[0]),
            vec![
                ("customer", "customer", &Ty::Struct("MakeTicketArgsCustomer".into()), false),
                ("extra", "extra", &Ty::Map, true),
                ("lines", "lines", &Ty::Vec(Box::new(Ty::Struct("MakeTicketArgsLinesItem".into()))), false),
                ("meta", "meta", &Ty::Map, true),
                ("raw", "raw", &Ty::Vec(Box::new(Ty::Value)), true),
                ("tags", "tags", &Ty::Vec(Box::new(Ty::String)), true),
            ]
        );
        let customer = &t.types[1];
        // Undeclared fields are refused at every level, not only where `additionalProperties: false`.
        assert!(t.types.iter().all(|d| d.deny_unknown), "{:?}", t.types.iter().map(|d| &d.name).collect::<Vec<_>>());
        assert!(customer.doc.starts_with("Who asks."), "{}", customer.doc);
        assert_eq!(
            fields(customer),
            vec![("email_address", "emailAddress", &Ty::String, false), ("tier", "tier", &Ty::I64, true)]
        );
    }

    #[test]
    fn keywords_and_clashing_property_names() {
        let t = one(json!({
            "type": "object",
            "properties": { "type": { "type": "string" }, "fooBar": {}, "foo_bar": {}, "self": {} }
        }));
        let names: Vec<&str> = fields(&t.types[0]).iter().map(|f| f.0).collect();
        // Raw identifiers are made where the code is written: the IR holds the plain name.
        assert_eq!(names, ["foo_bar", "foo_bar2", "self", "type"]);
    }

    #[test]
    fn types_nest_only_so_deep() {
        let mut schema = json!({ "type": "string" });
        for _ in 0..(MAX_TYPE_DEPTH + 4) {
            schema = json!({ "type": "object", "properties": { "inner": schema }, "required": ["inner"] });
        }
        let t = one(schema);
        // The argument struct and MAX_TYPE_DEPTH - 1 nested ones; the level past them is a Value.
        assert_eq!(t.types.len(), MAX_TYPE_DEPTH);
        // Structs are listed outside in: the argument struct, then from the deepest out.
        let deepest = &t.types[1];
        assert_eq!(fields(deepest), vec![("inner", "inner", &Ty::Value, false)]);
    }

    #[test]
    fn an_object_without_listed_properties_is_a_map() {
        let t = one(json!({ "type": "object" }));
        assert_eq!(t.types[0].body, Body::Map);
        let t = one(json!({ "type": "object", "properties": {} }));
        assert_eq!(t.types[0].body, Body::Fields(vec![]));
    }

    #[test]
    fn tool_names_map_and_struct_names_stay_unique() {
        let tools = read_snapshot(&snapshot(json!([
            { "name": "getSum", "inputSchema": { "type": "object", "properties": {} } },
            { "name": "get", "inputSchema": { "type": "object", "properties": {
                "sum": { "type": "object", "properties": { "x": {} } } } } },
            { "name": "connect", "inputSchema": { "type": "object" } },
        ])))
        .unwrap();
        assert_eq!(tools[0].rust, "get_sum");
        assert_eq!(tools[0].args, "GetSumArgs");
        assert_eq!(tools[1].args, "GetArgs");
        assert_eq!(tools[1].types[1].name, "GetArgsSum");
        // `connect` is the module's own fn.
        assert_eq!(tools[2].rust, "connect_");
    }

    #[test]
    fn annotations_are_kept_for_the_messages() {
        let tools = read_snapshot(&snapshot(json!([{ "name": "echo", "title": "Echo", "description": "Echoes.",
            "inputSchema": { "type": "object" },
            "annotations": { "readOnlyHint": true, "title": "Echo", "idempotentHint": true } }])))
        .unwrap();
        assert_eq!(tools[0].title.as_deref(), Some("Echo"));
        assert_eq!(tools[0].description, "Echoes.");
        assert_eq!(
            tools[0].annotations,
            vec![("idempotentHint".to_string(), "true".to_string()), ("readOnlyHint".to_string(), "true".to_string())]
        );
    }

    #[test]
    fn bad_snapshots_say_what_is_wrong() {
        assert!(read_snapshot(b"{not json").unwrap_err().starts_with("it is not JSON"));
        let e = read_snapshot(br#"{"format": 2, "tools": []}"#).unwrap_err();
        assert!(e.contains("format 2, and this version reads format 1"), "{e}");
        assert!(read_snapshot(br#"{"tools": []}"#).unwrap_err().contains("no `format`"));
        assert_eq!(read_snapshot(br#"{"format": 1}"#).unwrap_err(), "it has no `tools` list");
        let e = read_snapshot(&snapshot(json!([{ "name": "a" }]))).unwrap_err();
        assert_eq!(e, "the tool `a` has no `inputSchema` object");
        let e = read_snapshot(&snapshot(json!([{ "inputSchema": {} }]))).unwrap_err();
        assert_eq!(e, "tool 0 has no `name`");
        let twice = json!([{ "name": "a", "inputSchema": {} }, { "name": "a", "inputSchema": {} }]);
        assert_eq!(read_snapshot(&snapshot(twice)).unwrap_err(), "the tool `a` is listed twice");
    }

    #[test]
    fn the_committed_snapshot_reads() {
        let bytes = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../mcp/everything.json")).unwrap();
        let tools = read_snapshot(&bytes).unwrap();
        let sum = tools.iter().find(|t| t.name == "get-sum").unwrap();
        assert_eq!((sum.rust.as_str(), sum.args.as_str()), ("get_sum", "GetSumArgs"));
        assert_eq!(fields(&sum.types[0]), vec![("a", "a", &Ty::F64, false), ("b", "b", &Ty::F64, false)]);
    }
}
