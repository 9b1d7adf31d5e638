//! The tool IR: plain data, no syn.

use crate::diag::Loc;

pub use crate::keywords::tool::RISKS;

/// One `#[tool]` fn as the checks see it.
#[derive(Debug, Clone)]
pub struct ToolIr {
    /// The fn name, which is the tool's name.
    pub name: String,
    pub name_loc: Loc,
    /// `risk = ..`, with where it was written.
    pub risk: Option<(String, Loc)>,
    /// `idempotent`: the tool honours its idempotency key, so a call whose
    /// outcome is uncertain may be run again with the same key.
    pub idempotent: bool,
    /// `compensate = ..`: the tool that undoes a completed call, with where it was written.
    pub compensate: Option<(String, Loc)>,
    /// Whether the attribute's arguments parsed; if not, a missing `risk`
    /// is a consequence of that error and not reported again.
    pub args_parsed: bool,
    /// The doc comment, the model's description of the tool.
    pub description: String,
    pub is_async: bool,
    /// Parameters: the argument struct, then optionally `&ToolCx`.
    pub params: usize,
    /// The first parameter is a pattern binding by value (not `self`, not a reference).
    pub args_by_value: bool,
    pub has_return: bool,
    pub sig_loc: Loc,
}
