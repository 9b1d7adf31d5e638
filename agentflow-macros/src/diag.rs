//! Diagnostics that carry no syn types: a [`Loc`] stands for a place in the
//! source, and only the parser maps it back to a span.

use proc_macro2::Span;

/// An opaque place in the user's source, indexing the parser's span table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Loc(pub u32);

impl Loc {
    /// A place for IR built by hand in tests.
    #[cfg(test)]
    pub const DUMMY: Loc = Loc(u32::MAX);
}

/// One compile error, rendered with rustc's conventions (lowercase, no final period).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// Which rule fired, for tests.
    pub kind: Kind,
    /// Where the caret goes.
    pub loc: Loc,
    /// What the user reads.
    pub message: String,
}

/// The rule a diagnostic comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Syntax,
    UnknownTarget,
    MissingGotoList,
    IllegalTransition,
    DuplicateNode,
    MissingStart,
    UnknownStart,
    Unreachable,
    CannotReachEnd,
    CycleWithoutExit,
    CycleWithoutBound,
    WriteOutsideList,
    Signature,
    ToolNotAllowed,
    InterruptNotAllowed,
}

/// Collects every error of one macro invocation so they are emitted together.
#[derive(Debug, Default)]
pub struct Diagnostics {
    list: Vec<Diagnostic>,
}

impl Diagnostics {
    pub fn push(&mut self, kind: Kind, loc: Loc, message: impl Into<String>) {
        self.list.push(Diagnostic { kind, loc, message: message.into() });
    }

    pub fn len(&self) -> usize {
        self.list.len()
    }

    pub fn into_vec(self) -> Vec<Diagnostic> {
        self.list
    }
}

/// The parser's side of [`Loc`]: a table of spans.
#[derive(Default)]
pub struct Spans {
    spans: Vec<Span>,
}

impl Spans {
    pub fn loc(&mut self, span: Span) -> Loc {
        self.spans.push(span);
        Loc(self.spans.len() as u32 - 1)
    }

    pub fn span(&self, loc: Loc) -> Span {
        self.spans.get(loc.0 as usize).copied().unwrap_or_else(Span::call_site)
    }

    /// Renders diagnostics as one combined `syn::Error` (None when empty).
    pub fn render(&self, diags: Vec<Diagnostic>, syntax: Option<syn::Error>) -> Option<syn::Error> {
        let mut all = syntax;
        for d in diags {
            let e = syn::Error::new(self.span(d.loc), d.message);
            match &mut all {
                Some(all) => all.combine(e),
                None => all = Some(e),
            }
        }
        all
    }
}

/// Adds `e` to an optional combined error.
pub fn combine(all: &mut Option<syn::Error>, e: syn::Error) {
    match all {
        Some(all) => all.combine(e),
        None => *all = Some(e),
    }
}

/// The closest candidate to `name`, if it is close enough to be a likely typo.
pub fn did_you_mean<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|c| (strsim::jaro_winkler(name, c), c))
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}

/// `a`, `b`, `c` with backticks, for messages.
pub fn list<S: AsRef<str>>(names: &[S]) -> String {
    names.iter().map(|n| format!("`{}`", n.as_ref())).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_close_names_only() {
        assert_eq!(did_you_mean("clasify", ["classify", "draft"]), Some("classify"));
        assert_eq!(did_you_mean("zzz", ["classify", "draft"]), None);
    }

    #[test]
    fn lists_with_backticks() {
        assert_eq!(list(&["a", "b"]), "`a`, `b`");
    }
}
