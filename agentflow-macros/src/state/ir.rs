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
    /// The marks of `#[state(pii, credential)]`, each where it is written, repeats included
    /// so the check can report them.
    pub marks: Vec<(Mark, Loc)>,
    /// The type is written as `Secret<..>` or `Option<Secret<..>>` (judged by the last path
    /// segment's name, as the derive sees only tokens).
    pub secret: bool,
}

/// A field mark of `#[state(..)]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// `pii`: personal data, masked for anyone who may not see it.
    Personal,
    /// `credential`: may hold credential-like values, stored only sealed.
    Credential,
}

impl Mark {
    /// The keyword, as written in the attribute.
    pub fn keyword(self) -> &'static str {
        match self {
            Mark::Personal => crate::keywords::state::PII,
            Mark::Credential => crate::keywords::state::CREDENTIAL,
        }
    }
}

impl FieldIr {
    /// Whether the field carries `mark`.
    pub fn has(&self, mark: Mark) -> bool {
        self.marks.iter().any(|(m, _)| *m == mark)
    }
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
