//! The walk a value passes before it is kept: as serde_json would write it, refusing a NaN or
//! an infinity, and nesting deeper than a limit, with a [`ValueError`] naming the place.

use serde::ser::{self, Serialize};
use serde_json::Value;

use agentflow_store::MAX_JSON_DEPTH;

/// A value that would not read back as written; nothing was stored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ValueError {
    /// A float is NaN or infinite. JSON has no such numbers: it would be
    /// stored as `null` and read back changed.
    #[error(
        "`{path}` is {value}, which JSON cannot hold (it would be stored as null and read back changed); \
         keep it finite, or use an `Option` or an enum for \"no value\""
    )]
    NotFinite {
        /// Where, starting with the value's name: `state.prices[3]`.
        path: String,
        /// `NaN`, `inf` or `-inf`.
        value: &'static str,
    },
    /// Arrays and objects nest deeper than `limit`, so the JSON could not be
    /// read back (or would make the document around it unreadable).
    #[error(
        "`{path}` nests deeper than {limit} levels of arrays and objects, more than is read back; \
         flatten the value or keep the deep part as a string"
    )]
    TooDeep {
        /// Where the limit is first exceeded.
        path: String,
        /// [`MAX_DOCUMENT_DEPTH`](agentflow_store::MAX_DOCUMENT_DEPTH) for a whole document,
        /// [`MAX_JSON_DEPTH`] for a value that becomes part of one.
        limit: usize,
    },
    /// The value's `Serialize` implementation failed (for example a map
    /// whose keys are not strings or numbers).
    #[error("`{path}` does not serialise as JSON: {message}")]
    Unserializable {
        /// Where.
        path: String,
        /// The serialiser's message.
        message: String,
    },
}

/// Checks a JSON value from outside (a model's tool arguments, a reviewer's
/// conditions) against [`MAX_JSON_DEPTH`].
pub fn check_json(value: &Value, root: &'static str) -> Result<(), ValueError> {
    inspect(value, root, MAX_JSON_DEPTH)
}

/// Walks `value` as serde_json would write it. The first walk keeps no path;
/// only when it finds a problem does a second walk name the place.
pub(super) fn inspect<T: Serialize + ?Sized>(value: &T, root: &'static str, limit: usize) -> Result<(), ValueError> {
    let mut fast = Inspector { root, limit, depth: 0, path: None };
    if value.serialize(&mut fast).is_ok() {
        return Ok(());
    }
    let mut named = Inspector { root, limit, depth: 0, path: Some(Vec::new()) };
    match value.serialize(&mut named) {
        Ok(()) => Ok(()),
        Err(Found(e)) => Err(e),
    }
}

enum Seg {
    Field(&'static str),
    Key(String),
    Index(usize),
}

struct Inspector {
    root: &'static str,
    limit: usize,
    depth: usize,
    /// The path to the current value; `None` on the fast first walk.
    path: Option<Vec<Seg>>,
}

impl Inspector {
    fn path(&self) -> String {
        let mut out = self.root.to_string();
        for seg in self.path.iter().flatten() {
            match seg {
                Seg::Field(f) => {
                    out.push('.');
                    out.push_str(f);
                }
                Seg::Key(k) => {
                    let plain = !k.is_empty()
                        && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                        && !k.starts_with(|c: char| c.is_ascii_digit());
                    if plain {
                        out.push('.');
                        out.push_str(k);
                    } else {
                        out.push_str(&format!("[{k:?}]"));
                    }
                }
                Seg::Index(i) => out.push_str(&format!("[{i}]")),
            }
        }
        out
    }

    /// One more level of `[` or `{`.
    fn open(&mut self, levels: usize) -> Result<(), Found> {
        self.depth += levels;
        if self.depth > self.limit {
            return Err(Found(ValueError::TooDeep { path: self.path(), limit: self.limit }));
        }
        Ok(())
    }

    fn close(&mut self, levels: usize) {
        self.depth -= levels;
    }

    fn float(&self, v: f64) -> Result<(), Found> {
        if v.is_finite() {
            return Ok(());
        }
        let value = if v.is_nan() {
            "NaN"
        } else if v > 0.0 {
            "inf"
        } else {
            "-inf"
        };
        Err(Found(ValueError::NotFinite { path: self.path(), value }))
    }

    fn child<T: Serialize + ?Sized>(&mut self, seg: impl FnOnce() -> Seg, value: &T) -> Result<(), Found> {
        if let Some(path) = self.path.as_mut() {
            path.push(seg());
        }
        let result = value.serialize(&mut *self);
        if let Some(path) = self.path.as_mut() {
            path.pop();
        }
        result
    }
}

/// The problem found, carried out of the walk as the serialiser's error.
#[derive(Debug)]
struct Found(ValueError);

impl std::fmt::Display for Found {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for Found {}

impl ser::Error for Found {
    fn custom<M: std::fmt::Display>(msg: M) -> Self {
        // The path is filled in by the compound that sees the error first.
        Found(ValueError::Unserializable { path: String::new(), message: msg.to_string() })
    }
}

/// An array or object being walked.
struct Compound<'a> {
    ins: &'a mut Inspector,
    levels: usize,
    index: usize,
    key: Option<String>,
}

impl Compound<'_> {
    /// Names an error raised by a `Serialize` impl inside this compound.
    fn name(&self, err: Found) -> Found {
        match err.0 {
            ValueError::Unserializable { path, message } if path.is_empty() => {
                Found(ValueError::Unserializable { path: self.ins.path(), message })
            }
            other => Found(other),
        }
    }

    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Found> {
        let i = self.index;
        self.index += 1;
        self.ins.child(|| Seg::Index(i), value).map_err(|e| self.name(e))
    }

    fn field<T: Serialize + ?Sized>(&mut self, name: &'static str, value: &T) -> Result<(), Found> {
        self.ins.child(|| Seg::Field(name), value).map_err(|e| self.name(e))
    }

    fn end(self) -> Result<(), Found> {
        self.ins.close(self.levels);
        Ok(())
    }
}

macro_rules! ok_scalars {
    ($($method:ident: $ty:ty),* $(,)?) => {
        $(fn $method(self, _v: $ty) -> Result<(), Found> { Ok(()) })*
    };
}

impl<'a> ser::Serializer for &'a mut Inspector {
    type Ok = ();
    type Error = Found;
    type SerializeSeq = Compound<'a>;
    type SerializeTuple = Compound<'a>;
    type SerializeTupleStruct = Compound<'a>;
    type SerializeTupleVariant = Compound<'a>;
    type SerializeMap = Compound<'a>;
    type SerializeStruct = Compound<'a>;
    type SerializeStructVariant = Compound<'a>;

    ok_scalars! {
        serialize_bool: bool, serialize_i8: i8, serialize_i16: i16, serialize_i32: i32, serialize_i64: i64,
        serialize_i128: i128, serialize_u8: u8, serialize_u16: u16, serialize_u32: u32, serialize_u64: u64,
        serialize_u128: u128, serialize_char: char, serialize_str: &str, serialize_unit_struct: &'static str,
    }

    /// serde_json writes bytes as an array of numbers: one level.
    fn serialize_bytes(self, _v: &[u8]) -> Result<(), Found> {
        self.open(1)?;
        self.close(1);
        Ok(())
    }

    fn serialize_f32(self, v: f32) -> Result<(), Found> {
        self.float(f64::from(v))
    }

    fn serialize_f64(self, v: f64) -> Result<(), Found> {
        self.float(v)
    }

    fn serialize_none(self) -> Result<(), Found> {
        Ok(())
    }

    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), Found> {
        value.serialize(self)
    }

    fn serialize_unit(self) -> Result<(), Found> {
        Ok(())
    }

    fn serialize_unit_variant(self, _: &'static str, _: u32, _: &'static str) -> Result<(), Found> {
        Ok(())
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _: &'static str, value: &T) -> Result<(), Found> {
        value.serialize(self)
    }

    /// `{"Variant": value}`.
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), Found> {
        self.open(1)?;
        let result = self.child(|| Seg::Field(variant), value);
        self.close(1);
        result
    }

    fn serialize_seq(self, _: Option<usize>) -> Result<Compound<'a>, Found> {
        self.open(1)?;
        Ok(Compound { ins: self, levels: 1, index: 0, key: None })
    }

    fn serialize_tuple(self, len: usize) -> Result<Compound<'a>, Found> {
        self.serialize_seq(Some(len))
    }

    fn serialize_tuple_struct(self, _: &'static str, len: usize) -> Result<Compound<'a>, Found> {
        self.serialize_seq(Some(len))
    }

    /// `{"Variant": [..]}`.
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Compound<'a>, Found> {
        self.open(1)?;
        if let Some(path) = self.path.as_mut() {
            path.push(Seg::Field(variant));
        }
        self.open(1)?;
        Ok(Compound { ins: self, levels: 2, index: 0, key: None })
    }

    fn serialize_map(self, _: Option<usize>) -> Result<Compound<'a>, Found> {
        self.open(1)?;
        Ok(Compound { ins: self, levels: 1, index: 0, key: None })
    }

    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Compound<'a>, Found> {
        self.serialize_map(None)
    }

    /// `{"Variant": {..}}`.
    fn serialize_struct_variant(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Compound<'a>, Found> {
        self.serialize_tuple_variant(name, index, variant, len)
    }
}

impl ser::SerializeSeq for Compound<'_> {
    type Ok = ();
    type Error = Found;

    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Found> {
        self.element(value)
    }

    fn end(self) -> Result<(), Found> {
        Compound::end(self)
    }
}

impl ser::SerializeTuple for Compound<'_> {
    type Ok = ();
    type Error = Found;

    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Found> {
        self.element(value)
    }

    fn end(self) -> Result<(), Found> {
        Compound::end(self)
    }
}

impl ser::SerializeTupleStruct for Compound<'_> {
    type Ok = ();
    type Error = Found;

    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Found> {
        self.element(value)
    }

    fn end(self) -> Result<(), Found> {
        Compound::end(self)
    }
}

impl ser::SerializeTupleVariant for Compound<'_> {
    type Ok = ();
    type Error = Found;

    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Found> {
        self.element(value)
    }

    fn end(self) -> Result<(), Found> {
        if let Some(path) = self.ins.path.as_mut() {
            path.pop();
        }
        Compound::end(self)
    }
}

impl ser::SerializeMap for Compound<'_> {
    type Ok = ();
    type Error = Found;

    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), Found> {
        // Only the naming walk needs the key's text.
        if self.ins.path.is_some() {
            self.key = Some(key.serialize(KeyText).unwrap_or_else(|_| "?".to_string()));
        }
        Ok(())
    }

    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Found> {
        let key = self.key.take().unwrap_or_default();
        self.ins.child(|| Seg::Key(key), value).map_err(|e| self.name(e))
    }

    fn end(self) -> Result<(), Found> {
        Compound::end(self)
    }
}

impl ser::SerializeStruct for Compound<'_> {
    type Ok = ();
    type Error = Found;

    fn serialize_field<T: Serialize + ?Sized>(&mut self, name: &'static str, value: &T) -> Result<(), Found> {
        self.field(name, value)
    }

    fn end(self) -> Result<(), Found> {
        Compound::end(self)
    }
}

impl ser::SerializeStructVariant for Compound<'_> {
    type Ok = ();
    type Error = Found;

    fn serialize_field<T: Serialize + ?Sized>(&mut self, name: &'static str, value: &T) -> Result<(), Found> {
        self.field(name, value)
    }

    fn end(self) -> Result<(), Found> {
        if let Some(path) = self.ins.path.as_mut() {
            path.pop();
        }
        Compound::end(self)
    }
}

/// The text of a map key, for a path (serde_json writes keys as strings).
struct KeyText;

impl ser::Serializer for KeyText {
    type Ok = String;
    type Error = Found;
    type SerializeSeq = ser::Impossible<String, Found>;
    type SerializeTuple = ser::Impossible<String, Found>;
    type SerializeTupleStruct = ser::Impossible<String, Found>;
    type SerializeTupleVariant = ser::Impossible<String, Found>;
    type SerializeMap = ser::Impossible<String, Found>;
    type SerializeStruct = ser::Impossible<String, Found>;
    type SerializeStructVariant = ser::Impossible<String, Found>;

    fn serialize_bool(self, v: bool) -> Result<String, Found> {
        Ok(v.to_string())
    }
    fn serialize_i8(self, v: i8) -> Result<String, Found> {
        Ok(v.to_string())
    }
    fn serialize_i16(self, v: i16) -> Result<String, Found> {
        Ok(v.to_string())
    }
    fn serialize_i32(self, v: i32) -> Result<String, Found> {
        Ok(v.to_string())
    }
    fn serialize_i64(self, v: i64) -> Result<String, Found> {
        Ok(v.to_string())
    }
    fn serialize_u8(self, v: u8) -> Result<String, Found> {
        Ok(v.to_string())
    }
    fn serialize_u16(self, v: u16) -> Result<String, Found> {
        Ok(v.to_string())
    }
    fn serialize_u32(self, v: u32) -> Result<String, Found> {
        Ok(v.to_string())
    }
    fn serialize_u64(self, v: u64) -> Result<String, Found> {
        Ok(v.to_string())
    }
    fn serialize_f32(self, v: f32) -> Result<String, Found> {
        Ok(v.to_string())
    }
    fn serialize_f64(self, v: f64) -> Result<String, Found> {
        Ok(v.to_string())
    }
    fn serialize_char(self, v: char) -> Result<String, Found> {
        Ok(v.to_string())
    }
    fn serialize_str(self, v: &str) -> Result<String, Found> {
        Ok(v.to_string())
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<String, Found> {
        Err(ser::Error::custom("bytes key"))
    }
    fn serialize_none(self) -> Result<String, Found> {
        Err(ser::Error::custom("none key"))
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<String, Found> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<String, Found> {
        Err(ser::Error::custom("unit key"))
    }
    fn serialize_unit_struct(self, name: &'static str) -> Result<String, Found> {
        Ok(name.to_string())
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, variant: &'static str) -> Result<String, Found> {
        Ok(variant.to_string())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _: &'static str, value: &T) -> Result<String, Found> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<String, Found> {
        Err(ser::Error::custom("compound key"))
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, Found> {
        Err(ser::Error::custom("compound key"))
    }
    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, Found> {
        Err(ser::Error::custom("compound key"))
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Self::SerializeTupleStruct, Found> {
        Err(ser::Error::custom("compound key"))
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, Found> {
        Err(ser::Error::custom("compound key"))
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, Found> {
        Err(ser::Error::custom("compound key"))
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self::SerializeStruct, Found> {
        Err(ser::Error::custom("compound key"))
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, Found> {
        Err(ser::Error::custom("compound key"))
    }
}
