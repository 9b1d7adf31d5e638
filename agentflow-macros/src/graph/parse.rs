//! syn -> graph IR. The tokens the IR does not hold (types, the module's
//! items) stay here for the expansion.

use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::parse::{ParseStream, Parser};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::visit::Visit;
use syn::{Token, bracketed};

use super::ir::{GraphIr, Named, NodeIr, ReleaseIr, Route};
use super::release_parse::{ReleaseSyn, is_release_arg, parse_arg as parse_release_arg};
use super::signature::{ParsedSignature, as_written, parse_signature};
use crate::diag::{Spans, combine, list, unknown};
use crate::keywords::{self as kw, body, graph as graph_kw, node as node_kw, retry as retry_kw};

/// The parsed `#[graph]`: IR plus the tokens needed to expand it.
pub struct Parsed {
    pub ir: GraphIr,
    pub spans: Spans,
    pub module: syn::ItemMod,
    pub state: syn::Type,
    pub deps: syn::Type,
    pub nodes: Vec<NodeSyn>,
    /// `id`, `version`, `locks` and `migrate(..)`.
    pub release: ReleaseIr,
    /// The fns of `migrate(.., args(tool = path))`.
    pub release_syn: ReleaseSyn,
    pub errors: Option<syn::Error>,
}

/// The syn side of one node.
pub struct NodeSyn {
    /// Index of the fn among the module's items.
    pub item: usize,
    pub ident: syn::Ident,
    /// Parameter types, in order.
    pub params: Vec<syn::Type>,
    /// Whether the context-or-deps parameter is the context (`&Ctx<D>`) rather than `&D`.
    pub ctx_param: bool,
    /// A map worker's `#[payload]` parameter.
    pub payload: Option<PayloadSyn>,
    /// `parallel = N`.
    pub parallel: Option<usize>,
    /// Where the return type is written (or the fn name when there is none).
    pub ret_span: Span,
    /// `S` of a return type `Step<S>` or `Result<Step<S>, E>`, as written.
    pub ret_state: Option<syn::Type>,
    /// `RetryPolicy` expression.
    pub retry: TokenStream,
    /// Per-attempt timeout in milliseconds.
    pub timeout_ms: Option<u64>,
    pub interrupt: bool,
    pub sleep: bool,
    /// `tools = [..]`, as written: a name, or a path (`everything::get_sum`).
    pub tools: Vec<syn::Path>,
    /// `subgraphs = [..]`, as written.
    pub subgraphs: Vec<syn::Ident>,
}

/// A map worker's `#[payload] name: &T` (or `name: T`) parameter.
pub struct PayloadSyn {
    /// Its position among the parameters.
    pub at: usize,
    /// `T`.
    pub ty: syn::Type,
    /// Whether it is taken as `&T`.
    pub by_ref: bool,
}

pub fn parse(args: TokenStream, input: TokenStream) -> syn::Result<Parsed> {
    let mut module: syn::ItemMod = syn::parse2(input).map_err(|e| {
        syn::Error::new(
            e.span(),
            "`#[graph]` goes on an inline module: `#[graph(state = S, start = n)] mod name { .. }`",
        )
    })?;
    let mut spans = Spans::default();
    let mut errors = None;
    let attr_span = if args.is_empty() { module.ident.span() } else { args.span() };
    let mut state = None;
    let mut deps = None;
    let mut start = None;
    let mut max_steps = None;
    let mut max_depth = None;
    let mut release = ReleaseIr::default();
    let mut release_syn = ReleaseSyn::default();
    let mut arg_errors = None;
    let parser = syn::meta::parser(|meta| {
        let key = meta.path.get_ident().map(ToString::to_string).unwrap_or_default();
        let result = (|| {
            match key.as_str() {
                graph_kw::STATE => state = Some(meta.value()?.parse::<syn::Type>()?),
                graph_kw::DEPS => deps = Some(meta.value()?.parse::<syn::Type>()?),
                graph_kw::START => {
                    let ident: syn::Ident = meta.value()?.parse()?;
                    start = Some(Named { name: ident.to_string(), loc: spans.loc(ident.span()) });
                }
                graph_kw::MAX_STEPS => {
                    let lit: syn::LitInt = meta.value()?.parse()?;
                    let n: u32 = lit.base10_parse()?;
                    if n == 0 {
                        return Err(syn::Error::new(lit.span(), "`max_steps` must be at least 1"));
                    }
                    max_steps = Some(n);
                }
                graph_kw::MAX_DEPTH => {
                    let lit: syn::LitInt = meta.value()?.parse()?;
                    let n: u32 = lit.base10_parse()?;
                    if n == 0 {
                        return Err(syn::Error::new(
                            lit.span(),
                            "`max_depth` counts the graph itself, so it must be at least 1",
                        ));
                    }
                    max_depth = Some(n);
                }
                k if is_release_arg(k) => parse_release_arg(&meta, k, &mut spans, &mut release, &mut release_syn)?,
                _ => return Err(meta.error(unknown_arg("#[graph]", &key, graph_kw::ARGS))),
            }
            Ok(())
        })();
        recover(&meta, result, &mut arg_errors)
    });
    if let Err(e) = parser.parse2(args) {
        combine(&mut errors, e);
    }
    if let Some(e) = arg_errors {
        combine(&mut errors, e);
    }
    let state = state.unwrap_or_else(|| {
        combine(
            &mut errors,
            syn::Error::new(attr_span, "`#[graph]` needs the state type: `#[graph(state = MyState, ..)]`"),
        );
        syn::parse_quote!(())
    });
    let has_deps = deps.is_some();
    let deps = deps.unwrap_or_else(|| syn::parse_quote!(()));
    let Some((_, items)) = &mut module.content else {
        return Err(syn::Error::new(
            module.ident.span(),
            "`#[graph]` needs an inline module with the nodes inside: `mod name { .. }`, not `mod name;`",
        ));
    };
    let mut nodes = Vec::new();
    let mut node_irs = Vec::new();
    for (i, item) in items.iter_mut().enumerate() {
        let syn::Item::Fn(f) = item else {
            if let Some(attr) = node_attr_of(item) {
                combine(&mut errors, syn::Error::new(attr.span(), "`#[node]` goes on an `async fn`"));
            }
            continue;
        };
        let Some(pos) = f.attrs.iter().position(is_node_attr) else {
            continue;
        };
        let attr = f.attrs.remove(pos);
        let (syn_side, ir) = parse_node(i, f, &attr, &mut spans, &mut errors);
        nodes.push(syn_side);
        node_irs.push(ir);
    }
    let ir = GraphIr {
        name: module.ident.to_string(),
        loc: spans.loc(attr_span),
        state: type_name(&state),
        deps: has_deps.then(|| type_name(&deps)),
        start,
        max_steps,
        max_depth,
        nodes: node_irs,
    };
    Ok(Parsed { ir, spans, module, state, deps, nodes, release, release_syn, errors })
}

/// A type as a user would write it: `crate::Ticket`, not `crate :: Ticket`.
pub fn type_name(ty: &syn::Type) -> String {
    as_written(ty)
}

fn is_node_attr(attr: &syn::Attribute) -> bool {
    attr.path().segments.last().is_some_and(|s| s.ident == node_kw::ATTR)
}

fn node_attr_of(item: &syn::Item) -> Option<&syn::Attribute> {
    let attrs = match item {
        syn::Item::Struct(s) => &s.attrs,
        syn::Item::Enum(e) => &e.attrs,
        syn::Item::Const(c) => &c.attrs,
        syn::Item::Static(s) => &s.attrs,
        syn::Item::Mod(m) => &m.attrs,
        syn::Item::Impl(i) => &i.attrs,
        _ => return None,
    };
    attrs.iter().find(|a| is_node_attr(a))
}

fn unknown_arg(attr: &str, key: &str, allowed: &[&str]) -> String {
    unknown(&format!("`{attr}` argument"), key, allowed, &format!("one of {}", list(allowed)))
}

/// Records a bad argument and skips the rest of its value, so the arguments
/// after it are still read and a typo does not cascade into "no start node".
fn recover(
    meta: &syn::meta::ParseNestedMeta,
    result: syn::Result<()>,
    errors: &mut Option<syn::Error>,
) -> syn::Result<()> {
    if let Err(e) = result {
        combine(errors, e);
        while !meta.input.is_empty() && !meta.input.peek(Token![,]) {
            meta.input.parse::<proc_macro2::TokenTree>()?;
        }
    }
    Ok(())
}

fn parse_node(
    item: usize,
    f: &mut syn::ItemFn,
    attr: &syn::Attribute,
    spans: &mut Spans,
    errors: &mut Option<syn::Error>,
) -> (NodeSyn, NodeIr) {
    let mut goto = Vec::new();
    let mut goto_loc = None;
    let mut writes = None;
    let mut tools: Vec<syn::Path> = Vec::new();
    let mut subgraphs: Vec<syn::Ident> = Vec::new();
    let mut retry = quote!(::agentflow::RetryPolicy::none());
    let mut timeout_ms = None;
    let mut interrupt = false;
    let mut sleep = false;
    let mut parallel = None;
    let mut parallel_loc = None;
    if !matches!(attr.meta, syn::Meta::Path(_)) {
        let mut arg_errors = None;
        let result = attr.parse_nested_meta(|meta| {
            let key = meta.path.get_ident().map(ToString::to_string).unwrap_or_default();
            let result = (|| {
                match key.as_str() {
                    node_kw::GOTO => {
                        goto_loc = Some(spans.loc(meta.path.span()));
                        goto = names(meta.value()?, spans)?;
                    }
                    node_kw::WRITES => writes = Some(names(meta.value()?, spans)?),
                    node_kw::TOOLS => {
                        let input = meta.value()?;
                        let content;
                        bracketed!(content in input);
                        tools = Punctuated::<syn::Path, Token![,]>::parse_terminated(&content)?.into_iter().collect();
                    }
                    node_kw::SUBGRAPHS => {
                        let input = meta.value()?;
                        let content;
                        bracketed!(content in input);
                        subgraphs =
                            Punctuated::<syn::Ident, Token![,]>::parse_terminated(&content)?.into_iter().collect();
                    }
                    node_kw::TIMEOUT => timeout_ms = Some(duration_ms(&meta.value()?.parse()?)?),
                    node_kw::INTERRUPT => interrupt = true,
                    node_kw::SLEEP => sleep = true,
                    node_kw::PARALLEL => {
                        parallel_loc = Some(spans.loc(meta.path.span()));
                        let lit: syn::LitInt = meta.value()?.parse()?;
                        let n: usize = lit.base10_parse()?;
                        if n == 0 {
                            return Err(syn::Error::new(
                                lit.span(),
                                "`parallel` is how many instances of this map worker run at once and must be at least 1",
                            ));
                        }
                        parallel = Some(n);
                    }
                    node_kw::RETRY => retry = parse_retry(&meta)?,
                    _ => return Err(meta.error(unknown_arg("#[node]", &key, node_kw::ARGS))),
                }
                Ok(())
            })();
            recover(&meta, result, &mut arg_errors)
        });
        for e in [result.err(), arg_errors].into_iter().flatten() {
            combine(errors, e);
        }
    }
    let ident = f.sig.ident.clone();
    let ParsedSignature { sig, params, ctx_param, payload, payload_loc } = parse_signature(f, spans, errors);
    let ret_span = match &f.sig.output {
        syn::ReturnType::Type(_, ty) => ty.span(),
        syn::ReturnType::Default => ident.span(),
    };
    let ret_state = match &f.sig.output {
        syn::ReturnType::Type(_, ty) => step_state(ty),
        syn::ReturnType::Default => None,
    };
    let mut scan = BodyScan {
        spans,
        routes: Vec::new(),
        sets: Vec::new(),
        tool_uses: Vec::new(),
        subgraph_uses: Vec::new(),
        interrupt_calls: Vec::new(),
        sleep_calls: Vec::new(),
        errors: None,
    };
    scan.visit_block(&f.block);
    if let Some(e) = scan.errors.take() {
        combine(errors, e);
    }
    let ir = NodeIr {
        name: Named { name: ident.to_string(), loc: scan.spans.loc(ident.span()) },
        goto,
        goto_loc,
        writes,
        routes: scan.routes,
        sets: scan.sets,
        tools: tools.iter().map(|t| Named { name: path_name(t), loc: path_loc(t, scan.spans) }).collect(),
        tool_uses: scan.tool_uses,
        subgraphs: subgraphs.iter().map(|t| Named { name: t.to_string(), loc: scan.spans.loc(t.span()) }).collect(),
        subgraph_uses: scan.subgraph_uses,
        interrupt,
        interrupt_calls: scan.interrupt_calls,
        sleep,
        sleep_calls: scan.sleep_calls,
        sig,
        payload: payload_loc,
        parallel: parallel_loc,
    };
    let node = NodeSyn {
        item,
        ident,
        params,
        ctx_param,
        payload,
        parallel,
        ret_span,
        ret_state,
        retry,
        timeout_ms,
        interrupt,
        sleep,
        tools,
        subgraphs,
    };
    (node, ir)
}

/// `S` of `Step<S>` or `Result<Step<S>, E>` (any paths ending so).
fn step_state(ty: &syn::Type) -> Option<syn::Type> {
    let first_arg = |ty: &syn::Type, name: &str| -> Option<syn::Type> {
        let syn::Type::Path(p) = ty else { return None };
        let last = p.path.segments.last()?;
        if last.ident != name {
            return None;
        }
        let syn::PathArguments::AngleBracketed(args) = &last.arguments else { return None };
        match args.args.first()? {
            syn::GenericArgument::Type(t) => Some(t.clone()),
            _ => None,
        }
    };
    first_arg(ty, "Step").or_else(|| first_arg(&first_arg(ty, "Result")?, "Step"))
}

fn names(input: ParseStream, spans: &mut Spans) -> syn::Result<Vec<Named>> {
    let content;
    bracketed!(content in input);
    let list = Punctuated::<syn::Ident, Token![,]>::parse_terminated(&content)?;
    Ok(list.into_iter().map(|i| Named { name: i.to_string(), loc: spans.loc(i.span()) }).collect())
}

/// `500ms`, `2s`, `1m`.
fn duration_ms(lit: &syn::LitInt) -> syn::Result<u64> {
    let n: u64 = lit.base10_parse()?;
    let factor = match kw::DURATION_UNITS.iter().find(|(unit, _)| *unit == lit.suffix()) {
        Some(&(_, factor)) => factor,
        None if lit.suffix().is_empty() => {
            return Err(syn::Error::new(
                lit.span(),
                format!("missing unit on duration `{n}`; write `{n}ms`, `{n}s` or `{n}m`"),
            ));
        }
        None => {
            let units: Vec<&str> = kw::DURATION_UNITS.iter().map(|(unit, _)| *unit).collect();
            return Err(syn::Error::new(
                lit.span(),
                unknown("duration unit", lit.suffix(), &units, &format!("one of {}", list(&units))),
            ));
        }
    };
    n.checked_mul(factor).ok_or_else(|| syn::Error::new(lit.span(), "duration too long"))
}

/// `retry = 3` or `retry(attempts = 3, base = 10ms, max_delay = 1s, jitter = false)`.
fn parse_retry(meta: &syn::meta::ParseNestedMeta) -> syn::Result<TokenStream> {
    if meta.input.peek(Token![=]) {
        let lit: syn::LitInt = meta.value()?.parse()?;
        let n: u32 = lit.base10_parse()?;
        if n == 0 {
            return Err(syn::Error::new(lit.span(), "`retry` counts attempts in all and must be at least 1"));
        }
        return Ok(quote!(::agentflow::RetryPolicy::attempts(#n)));
    }
    let mut policy = quote!(::agentflow::RetryPolicy::attempts(1));
    meta.parse_nested_meta(|inner| {
        let key = inner.path.get_ident().map(ToString::to_string).unwrap_or_default();
        match key.as_str() {
            retry_kw::ATTEMPTS => {
                let n: u32 = inner.value()?.parse::<syn::LitInt>()?.base10_parse()?;
                policy = quote!(::agentflow::RetryPolicy { max_attempts: #n, ..#policy });
            }
            retry_kw::BASE | retry_kw::MAX_DELAY => {
                let ms = duration_ms(&inner.value()?.parse()?)?;
                let method = syn::Ident::new(&key, inner.path.span());
                policy = quote!(#policy.#method(::core::time::Duration::from_millis(#ms)));
            }
            retry_kw::JITTER => {
                let on: syn::LitBool = inner.value()?.parse()?;
                policy = quote!(#policy.jitter(#on));
            }
            _ => {
                return Err(inner.error(unknown_arg("retry", &key, retry_kw::ARGS)));
            }
        }
        Ok(())
    })?;
    Ok(policy)
}

/// The arguments of one `goto!`: targets and the optional update.
pub struct GotoArgs {
    pub targets: Vec<syn::Ident>,
    /// The payload list of each target written `each(worker, payloads)`, by position.
    pub each: Vec<Option<syn::Expr>>,
    pub update: Option<syn::Expr>,
}

/// One target of a `goto!`: `node`, `END` or `each(worker, payloads)`.
struct GotoTarget(syn::Ident, Option<syn::Expr>);

impl syn::parse::Parse for GotoTarget {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let ident: syn::Ident = input.parse()?;
        if ident == body::EACH && input.peek(syn::token::Paren) {
            let content;
            syn::parenthesized!(content in input);
            let worker: syn::Ident = content.parse()?;
            content.parse::<Token![,]>().map_err(|e| {
                syn::Error::new(e.span(), "expected `each(worker, payloads)`: the worker node, then its payloads")
            })?;
            let payloads: syn::Expr = content.parse()?;
            content.parse::<Option<Token![,]>>()?;
            if !content.is_empty() {
                return Err(content.error("expected `each(worker, payloads)`: the worker node, then its payloads"));
            }
            return Ok(GotoTarget(worker, Some(payloads)));
        }
        Ok(GotoTarget(ident, None))
    }
}

pub fn parse_goto(tokens: TokenStream) -> syn::Result<GotoArgs> {
    let parser = |input: ParseStream| {
        let targets: Vec<GotoTarget> = if input.peek(syn::token::Bracket) {
            let content;
            bracketed!(content in input);
            Punctuated::<GotoTarget, Token![,]>::parse_terminated(&content)?.into_iter().collect()
        } else {
            vec![input.parse::<GotoTarget>().map_err(|e| {
                syn::Error::new(
                    e.span(),
                    "expected `goto!(node)`, `goto!(node, update)`, `goto!([a, b], update)`, `goto!(END, update)` \
                     or `goto!(each(worker, payloads), update)`",
                )
            })?]
        };
        let (targets, each) = targets.into_iter().map(|GotoTarget(t, e)| (t, e)).unzip();
        let mut update = None;
        if input.parse::<Option<Token![,]>>()?.is_some() && !input.is_empty() {
            update = Some(input.parse::<syn::Expr>()?);
            input.parse::<Option<Token![,]>>()?;
        }
        if !input.is_empty() {
            return Err(input.error(
                "unexpected tokens in `goto!`; for a fan-out put the targets in brackets: `goto!([a, b], update)`",
            ));
        }
        Ok(GotoArgs { targets, each, update })
    };
    parser.parse2(tokens)
}

pub fn is_goto(mac: &syn::Macro) -> bool {
    mac.path.segments.last().is_some_and(|s| s.ident == body::GOTO)
}

/// `research` of `research::graph()`, the one form `cx.subgraph` takes.
fn child_graph(arg: &syn::Expr) -> Option<&syn::Ident> {
    let syn::Expr::Call(call) = arg else { return None };
    let syn::Expr::Path(p) = &*call.func else { return None };
    let segments: Vec<_> = p.path.segments.iter().collect();
    match (call.args.is_empty(), p.qself.is_none(), segments.as_slice()) {
        (true, true, [module, f]) if f.ident == "graph" && f.arguments.is_none() && module.arguments.is_none() => {
            Some(&module.ident)
        }
        _ => None,
    }
}

/// Finds the `goto!` call sites and the update chains of a node body.
struct BodyScan<'s> {
    spans: &'s mut Spans,
    routes: Vec<Route>,
    sets: Vec<Named>,
    tool_uses: Vec<Named>,
    subgraph_uses: Vec<Named>,
    interrupt_calls: Vec<crate::diag::Loc>,
    sleep_calls: Vec<(String, crate::diag::Loc)>,
    errors: Option<syn::Error>,
}

impl BodyScan<'_> {
    fn goto(&mut self, mac: &syn::Macro) {
        match parse_goto(mac.tokens.clone()) {
            Ok(args) => {
                let targets =
                    args.targets.iter().map(|t| Named { name: t.to_string(), loc: self.spans.loc(t.span()) }).collect();
                let each = args.each.iter().enumerate().filter(|(_, e)| e.is_some()).map(|(i, _)| i).collect();
                self.routes.push(Route { targets, each });
                for payloads in args.each.iter().flatten() {
                    self.visit_expr(payloads);
                }
                if let Some(update) = &args.update {
                    self.visit_expr(update);
                }
            }
            Err(e) => combine(&mut self.errors, e),
        }
    }
}

impl<'ast> Visit<'ast> for BodyScan<'_> {
    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        if is_goto(mac) {
            self.goto(mac);
        }
    }

    fn visit_expr_method_call(&mut self, call: &'ast syn::ExprMethodCall) {
        // Walk down `X::update().a(..).b(..)`: every method of such a chain
        // is a field setter.
        let mut chain = vec![call];
        let mut receiver = &*call.receiver;
        while let syn::Expr::MethodCall(inner) = receiver {
            chain.push(inner);
            receiver = &inner.receiver;
        }
        let is_update = matches!(receiver, syn::Expr::Call(c)
            if c.args.is_empty()
            && matches!(&*c.func, syn::Expr::Path(p) if p.path.segments.last().is_some_and(|s| s.ident == body::UPDATE)));
        for link in chain.iter().rev() {
            // `cx.run_tool(tool, args)`: a direct call of one of the node's tools.
            if link.method == body::RUN_TOOL
                && let Some(syn::Expr::Path(p)) = link.args.first()
                && p.qself.is_none()
            {
                self.tool_uses.push(Named { name: path_name(&p.path), loc: path_loc(&p.path, self.spans) });
            }
            // `cx.subgraph(graph::graph(), input)`: a child graph the node runs.
            if link.method == body::SUBGRAPH
                && let Some(arg) = link.args.first()
            {
                match child_graph(arg) {
                    Some(graph) => {
                        self.subgraph_uses.push(Named { name: graph.to_string(), loc: self.spans.loc(graph.span()) })
                    }
                    None => combine(
                        &mut self.errors,
                        syn::Error::new_spanned(
                            arg,
                            "write the child graph as `name::graph()`, with `name` in the node's `subgraphs = [..]` \
                             list, so the compiler can check what the node delegates to",
                        ),
                    ),
                }
            }
            if link.method == body::INTERRUPT {
                self.interrupt_calls.push(self.spans.loc(link.method.span()));
            }
            if body::SLEEPS.iter().any(|s| link.method == s) {
                self.sleep_calls.push((link.method.to_string(), self.spans.loc(link.method.span())));
            }
            if is_update && !body::NOT_SETTERS.contains(&link.method.to_string().as_str()) {
                self.sets.push(Named { name: link.method.to_string(), loc: self.spans.loc(link.method.span()) });
            }
            for arg in &link.args {
                self.visit_expr(arg);
            }
        }
        self.visit_expr(receiver);
    }
}

/// A tool's path as the checks compare it: `everything::get_sum` (a leading `::` kept).
pub fn path_name(path: &syn::Path) -> String {
    let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
    let lead = if path.leading_colon.is_some() { "::" } else { "" };
    format!("{lead}{}", segments.join("::"))
}

/// The place of a whole path, first segment to last.
fn path_loc(path: &syn::Path, spans: &mut Spans) -> crate::diag::Loc {
    match (path.segments.first(), path.segments.last()) {
        (Some(first), Some(last)) if path.segments.len() > 1 => spans.range(first.ident.span(), last.ident.span()),
        _ => spans.loc(path.span()),
    }
}
