//! The state derive's IR: plain data, no syn.

use crate::diag::Loc;

/// A state struct as the derive sees it.
#[derive(Debug, Clone)]
pub struct StateIr {
    /// The struct's name.
    pub name: String,
    /// `#[state(version = N)]`, default 1.
    pub version: u32,
    /// The fields, in declaration order.
    pub fields: Vec<FieldIr>,
    /// The struct's name, for errors about the whole struct.
    pub loc: Loc,
}

/// One field and its reducer.
#[derive(Debug, Clone)]
pub struct FieldIr {
    /// The field's name.
    pub name: String,
    /// How writes merge; index into the parser's type table is the field index.
    pub reducer: Reducer,
    /// The reducer attribute (or the field name when there is none).
    pub loc: Loc,
}

/// The reducer named in `#[reduce(..)]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reducer {
    Overwrite,
    Append,
    Add,
    Merge,
    Messages,
    /// `custom = path`; the path stays with the parser.
    Custom,
}

pub use crate::keywords::state::REDUCERS;
