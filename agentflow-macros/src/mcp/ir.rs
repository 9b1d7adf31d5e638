//! The `mcp_tools!` IR: the call as written, and the snapshot's tools typed. Plain data, no syn.

use crate::diag::Loc;

/// One `mod name from "path" { .. }` of the call.
#[derive(Debug, Clone)]
pub struct ModuleIr {
    /// The module's name, which is the server's name at run time.
    pub name: String,
    pub name_loc: Loc,
    /// The snapshot's path as written (relative to the calling file's directory).
    pub path: String,
    pub path_loc: Loc,
    /// The risk map, as written.
    pub entries: Vec<Entry>,
}

/// `get_sum: read idempotent`.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The tool's Rust name, without `r#`.
    pub name: String,
    pub loc: Loc,
    pub risk: String,
    pub risk_loc: Loc,
    pub idempotent: bool,
}

/// A tool of the snapshot, with its Rust names and types.
#[derive(Debug, Clone, PartialEq)]
pub struct SnapTool {
    /// The name the server calls it by (`get-sum`).
    pub name: String,
    /// The tool item's name (`get_sum`), without `r#`.
    pub rust: String,
    /// The argument struct's name (`GetSumArgs`).
    pub args: String,
    pub title: Option<String>,
    pub description: String,
    /// The server's hints, `(key, compact JSON value)`, in the snapshot's order.
    pub annotations: Vec<(String, String)>,
    /// The input schema as JSON text, without `$schema`: what the model is shown.
    pub schema: String,
    /// The argument struct first, then the structs of its nested objects.
    pub types: Vec<StructDef>,
}

/// A generated struct.
#[derive(Debug, Clone, PartialEq)]
pub struct StructDef {
    pub name: String,
    pub doc: String,
    /// `#[serde(deny_unknown_fields)]`: every struct of declared properties (a free-form
    /// top-level object only with `additionalProperties: false`).
    pub deny_unknown: bool,
    pub body: Body,
}

/// What a generated struct holds.
#[derive(Debug, Clone, PartialEq)]
pub enum Body {
    /// Named fields, one per property.
    Fields(Vec<Field>),
    /// An object whose properties the schema does not list: a transparent newtype over a JSON map.
    Map,
}

/// A field of a generated struct.
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    /// The field's name, without `r#`.
    pub rust: String,
    /// The property's name.
    pub json: String,
    pub ty: Ty,
    /// Not in `required`: `Option<ty>`, left out when `None`.
    pub optional: bool,
    pub doc: String,
}

/// A field's type.
#[derive(Debug, Clone, PartialEq)]
pub enum Ty {
    String,
    F64,
    I64,
    Bool,
    /// Anything the schema does not pin to one of the others.
    Value,
    /// An object without listed properties.
    Map,
    Vec(Box<Ty>),
    /// A generated struct, by name.
    Struct(String),
}
