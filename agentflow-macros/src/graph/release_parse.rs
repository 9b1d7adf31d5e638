//! syn -> [`ReleaseIr`]: the `id`, `version`, `locks` and `migrate(..)` arguments of
//! `#[graph(..)]`. The argument-rewriting fns of `args(tool = path)` stay here as paths for the
//! expansion.

use syn::meta::ParseNestedMeta;
use syn::parse::ParseStream;
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Token, parenthesized};

use super::ir::{MigrationIr, Named, ReleaseIr, ToolTarget};
use super::parse::path_name;
use crate::diag::{Spans, list, unknown};
use crate::keywords::{END, graph as graph_kw, migrate as kw};

/// The syn side of the release arguments: per migration, per `args(..)` entry, the fn that
/// rewrites the arguments (`None` for `cancel`).
#[derive(Default)]
pub struct ReleaseSyn {
    pub args: Vec<Vec<Option<syn::Path>>>,
}

/// Whether `key` is one of the release arguments this module parses.
pub fn is_release_arg(key: &str) -> bool {
    [graph_kw::ID, graph_kw::VERSION, graph_kw::LOCKS, graph_kw::MIGRATE].contains(&key)
}

/// Parses one release argument of `#[graph(..)]` into `ir` and `syn_side`.
pub fn parse_arg(
    meta: &ParseNestedMeta,
    key: &str,
    spans: &mut Spans,
    ir: &mut ReleaseIr,
    syn_side: &mut ReleaseSyn,
) -> syn::Result<()> {
    let twice = || meta.error(format!("`{key}` is given twice in `#[graph(..)]`; keep one"));
    match key {
        graph_kw::ID => {
            let lit: syn::LitStr = meta.value()?.parse()?;
            if ir.id.is_some() {
                return Err(twice());
            }
            ir.id = Some((lit.value(), spans.loc(lit.span())));
        }
        graph_kw::VERSION => {
            let lit: syn::LitInt = meta.value()?.parse()?;
            let n: u32 = lit.base10_parse()?;
            if ir.version.is_some() {
                return Err(twice());
            }
            // From `version` to its value, so the caret marks `version = N`.
            ir.version = Some((n, spans.range(meta.path.span(), lit.span())));
        }
        graph_kw::LOCKS => {
            let lit: syn::LitStr = meta.value()?.parse()?;
            if ir.locks.is_some() {
                return Err(twice());
            }
            ir.locks = Some((lit.value(), spans.loc(lit.span())));
        }
        graph_kw::MIGRATE => {
            let (migration, args) = parse_migrate(meta, spans)?;
            ir.migrations.push(migration);
            syn_side.args.push(args);
        }
        _ => return Err(meta.error(format!("`{key}` is not a release argument"))),
    }
    Ok(())
}

/// `migrate(from = K, nodes(a -> b), tools(a -> b, c -> cancel), args(t = path, u = cancel))`.
fn parse_migrate(meta: &ParseNestedMeta, spans: &mut Spans) -> syn::Result<(MigrationIr, Vec<Option<syn::Path>>)> {
    if !meta.input.peek(syn::token::Paren) {
        return Err(
            meta.error("expected `migrate(from = K, nodes(old -> new), tools(old -> new), args(tool = path::to::fn))`")
        );
    }
    let mut from = None;
    let mut nodes = Vec::new();
    let mut tools = Vec::new();
    let mut args = Vec::new();
    let mut arg_fns = Vec::new();
    meta.parse_nested_meta(|inner| {
        let key = inner.path.get_ident().map(ToString::to_string).unwrap_or_default();
        match key.as_str() {
            kw::FROM => {
                let lit: syn::LitInt = inner.value()?.parse()?;
                let n: u32 = lit.base10_parse()?;
                if from.is_some() {
                    return Err(inner.error("`from` is given twice in one `migrate(..)`; keep one"));
                }
                from = Some((n, spans.loc(lit.span())));
            }
            kw::NODES => {
                let content;
                parenthesized!(content in inner.input);
                for (a, b) in Punctuated::<(syn::Ident, syn::Ident), Token![,]>::parse_terminated_with(&content, arrow)?
                {
                    let a = Named { name: a.to_string(), loc: spans.loc(a.span()) };
                    let b = Named { name: b.to_string(), loc: spans.loc(b.span()) };
                    nodes.push((a, b));
                }
            }
            kw::TOOLS => {
                let content;
                parenthesized!(content in inner.input);
                for (a, b) in
                    Punctuated::<(syn::Path, syn::Path), Token![,]>::parse_terminated_with(&content, tool_arrow)?
                {
                    let a = Named { name: path_name(&a), loc: spans.loc(path_span(&a)) };
                    let b = if b.is_ident(kw::CANCEL) {
                        ToolTarget::Cancel
                    } else {
                        ToolTarget::Rename(Named { name: path_name(&b), loc: spans.loc(path_span(&b)) })
                    };
                    tools.push((a, b));
                }
            }
            kw::ARGS_MAP => {
                inner.parse_nested_meta(|arg| {
                    let tool = Named { name: path_name(&arg.path), loc: spans.loc(path_span(&arg.path)) };
                    let f: syn::Path = arg.value()?.parse()?;
                    let cancel = f.is_ident(kw::CANCEL);
                    args.push((tool, cancel));
                    arg_fns.push((!cancel).then_some(f));
                    Ok(())
                })?;
            }
            _ => {
                return Err(inner.error(unknown(
                    "`migrate(..)` argument",
                    &key,
                    kw::ARGS,
                    &format!("one of {}", list(kw::ARGS)),
                )));
            }
        }
        Ok(())
    })?;
    let Some((from, from_loc)) = from else {
        return Err(meta.error(
            "`migrate(..)` needs the version it migrates from: `migrate(from = K, ..)`, leading to version K + 1",
        ));
    };
    Ok((MigrationIr { from, from_loc, nodes, tools, args }, arg_fns))
}

/// `old -> new` of `nodes(..)`; `new` may be `END`.
fn arrow(input: ParseStream) -> syn::Result<(syn::Ident, syn::Ident)> {
    let a: syn::Ident = input.parse()?;
    input.parse::<Token![->]>().map_err(|e| {
        syn::Error::new(e.span(), format!("expected `{a} -> new_node` (or `{a} -> {END}`) in `nodes(..)`"))
    })?;
    Ok((a, input.parse()?))
}

/// `old -> new` or `old -> cancel` of `tools(..)`.
fn tool_arrow(input: ParseStream) -> syn::Result<(syn::Path, syn::Path)> {
    let a: syn::Path = input.parse()?;
    input.parse::<Token![->]>().map_err(|e| {
        let a = path_name(&a);
        syn::Error::new(e.span(), format!("expected `{a} -> new_tool` (or `{a} -> {}`) in `tools(..)`", kw::CANCEL))
    })?;
    Ok((a, input.parse()?))
}

/// A path's last segment, where a message about it goes.
fn path_span(path: &syn::Path) -> proc_macro2::Span {
    path.segments.last().map_or_else(|| path.span(), |s| s.ident.span())
}
