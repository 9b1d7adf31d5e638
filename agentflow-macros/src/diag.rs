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
    SleepNotAllowed,
    MapPayload,
    SubgraphNotAllowed,
    SubgraphSelf,
    /// A reducer on a `Secret` field.
    SecretReducer,
    /// A field mark given twice, or one that does not fit the field.
    FieldMark,
    /// A name in `mcp_tools!`'s risk map that is no tool of the snapshot.
    UnknownTool,
    /// A snapshot tool `mcp_tools!` is given no risk class for.
    MissingRisk,
    /// Two MCP tools with one Rust name.
    NameClash,
    /// A wrong `id`, `version`, `locks` or `migrate(..)` of a released graph.
    ReleaseArg,
    /// A lock file that cannot be read or is malformed.
    LockUnreadable,
    /// The graph's shape differs from the lock of its own version.
    LockChanged,
    /// A node of an older version that threads may wait in, gone without a mapping.
    NodeGone,
    /// A tool of an older version that approvals may be pending for, gone without a mapping.
    ApprovalGone,
}

/// Collects every error of one macro invocation so they are emitted together.
///
/// A drop bomb, like serde's `Ctxt`: the collected errors must be handed to
/// [`Spans::render`] (or taken with [`Diagnostics::into_vec`]). Dropping the
/// sink unread would lose them silently and let a broken graph expand, so in
/// debug builds that panics, naming the bug in the macro rather than in the
/// user's code.
#[derive(Debug)]
pub struct Diagnostics {
    /// `None` once read.
    list: Option<Vec<Diagnostic>>,
}

impl Default for Diagnostics {
    fn default() -> Self {
        Diagnostics { list: Some(Vec::new()) }
    }
}

impl Diagnostics {
    pub fn push(&mut self, kind: Kind, loc: Loc, message: impl Into<String>) {
        if let Some(list) = &mut self.list {
            list.push(Diagnostic { kind, loc, message: message.into() });
        }
    }

    /// Takes the errors out, defusing the bomb.
    pub fn into_vec(mut self) -> Vec<Diagnostic> {
        self.list.take().unwrap_or_default()
    }
}

impl Drop for Diagnostics {
    fn drop(&mut self) {
        if cfg!(debug_assertions) && self.list.is_some() && !std::thread::panicking() {
            panic!("agentflow-macros bug: diagnostics dropped without being rendered");
        }
    }
}

/// The parser's side of [`Loc`]: a table of spans.
#[derive(Default)]
pub struct Spans {
    /// Where each place starts, and where it ends when it spans more than one token.
    spans: Vec<(Span, Option<Span>)>,
}

impl Spans {
    pub fn loc(&mut self, span: Span) -> Loc {
        self.spans.push((span, None));
        Loc(self.spans.len() as u32 - 1)
    }

    /// A place from the token at `start` to the token at `end`, both included.
    pub fn range(&mut self, start: Span, end: Span) -> Loc {
        self.spans.push((start, Some(end)));
        Loc(self.spans.len() as u32 - 1)
    }

    /// Where `loc` starts.
    pub fn span(&self, loc: Loc) -> Span {
        self.spans.get(loc.0 as usize).map_or_else(Span::call_site, |s| s.0)
    }

    /// An error underlining all of `loc`.
    fn error(&self, loc: Loc, message: String) -> syn::Error {
        match self.spans.get(loc.0 as usize) {
            Some(&(start, Some(end))) => {
                // `new_spanned` underlines from its first token to its last.
                let (first, last) = (proc_macro2::Ident::new("start", start), proc_macro2::Ident::new("end", end));
                syn::Error::new_spanned(quote::quote!(#first #last), message)
            }
            _ => syn::Error::new(self.span(loc), message),
        }
    }

    /// Renders diagnostics as one combined `syn::Error` (None when empty).
    pub fn render(&self, diags: Diagnostics, syntax: Option<syn::Error>) -> Option<syn::Error> {
        let mut all = syntax;
        for d in diags.into_vec() {
            let e = self.error(d.loc, d.message);
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

/// The closest candidate to `name`, if it is close enough to be a likely
/// typo. The one place that decides what counts as "close"; messages build
/// on it through [`hint`] and [`unknown`].
pub fn did_you_mean<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|c| (strsim::jaro_winkler(name, c), c))
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}

/// `"; did you mean `x`?"` for a close candidate, else `""`.
pub fn hint<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    did_you_mean(name, candidates).map(|s| format!("; did you mean `{s}`?")).unwrap_or_default()
}

/// `unknown {what} `name`; did you mean `x`? expected {expected}`, the one
/// shape of every "unknown argument / reducer / risk" message.
pub fn unknown(what: &str, name: &str, candidates: &[&str], expected: &str) -> String {
    let close =
        did_you_mean(name, candidates.iter().copied()).map(|s| format!("did you mean `{s}`? ")).unwrap_or_default();
    format!("unknown {what} `{name}`; {close}expected {expected}")
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
    fn unknown_names_get_one_shape_of_message() {
        assert_eq!(
            unknown("`#[graph]` argument", "strat", &["state", "start"], "one of `state`, `start`"),
            "unknown `#[graph]` argument `strat`; did you mean `start`? expected one of `state`, `start`"
        );
        assert_eq!(unknown("risk", "zzz", &["read"], "`read`"), "unknown risk `zzz`; expected `read`");
        assert_eq!(hint("clasify", ["classify"]), "; did you mean `classify`?");
        assert_eq!(hint("zzz", ["classify"]), "");
    }

    #[test]
    fn read_diagnostics_do_not_go_off() {
        let mut d = Diagnostics::default();
        d.push(Kind::Syntax, Loc::DUMMY, "x");
        assert_eq!(d.into_vec().len(), 1);
        let spans = Spans::default();
        assert!(spans.render(Diagnostics::default(), None).is_none());
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "diagnostics dropped without being rendered")]
    fn unread_diagnostics_go_off() {
        let mut d = Diagnostics::default();
        d.push(Kind::Syntax, Loc::DUMMY, "lost");
        drop(d);
    }

    #[test]
    fn lists_with_backticks() {
        assert_eq!(list(&["a", "b"]), "`a`, `b`");
    }
}
