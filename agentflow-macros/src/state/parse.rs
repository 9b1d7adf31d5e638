//! syn -> state IR. Keeps the field types and custom reducer paths on the side.

use syn::spanned::Spanned;

use super::ir::{FieldIr, REDUCERS, Reducer, StateIr};
use crate::diag::{Spans, combine, hint, unknown};
use crate::keywords::state as kw;

/// What the expander needs besides the IR: tokens the IR does not hold.
pub struct Parsed {
    pub ir: StateIr,
    pub spans: Spans,
    pub input: syn::DeriveInput,
    /// Field types, by field index.
    pub types: Vec<syn::Type>,
    /// `custom = path` paths, by field index.
    pub custom: Vec<Option<syn::Path>>,
    /// Syntax errors found while parsing, all of them.
    pub errors: Option<syn::Error>,
}

pub fn parse(input: syn::DeriveInput) -> syn::Result<Parsed> {
    let mut spans = Spans::default();
    let mut errors = None;
    let data = match &input.data {
        syn::Data::Struct(data) => data,
        syn::Data::Enum(e) => {
            return Err(syn::Error::new(
                e.enum_token.span,
                "`#[derive(State)]` needs a struct with named fields, not an enum; \
                 keep the enum as the type of a field: `struct S { phase: Phase }`",
            ));
        }
        syn::Data::Union(u) => {
            return Err(syn::Error::new(
                u.union_token.span,
                "`#[derive(State)]` needs a struct with named fields, not a union",
            ));
        }
    };
    let syn::Fields::Named(named) = &data.fields else {
        let span = match &data.fields {
            syn::Fields::Unnamed(f) => f.paren_token.span.join(),
            _ => input.ident.span(),
        };
        return Err(syn::Error::new(
            span,
            "`#[derive(State)]` needs a struct with named fields, like `struct Ticket { text: String }`; \
             each field gets a setter and a reducer by name",
        ));
    };
    if !input.generics.params.is_empty() {
        combine(
            &mut errors,
            syn::Error::new(input.generics.span(), "`#[derive(State)]` does not support generic structs"),
        );
    }
    let version = parse_version(&input.attrs, &mut errors);
    let mut fields = Vec::new();
    let mut types = Vec::new();
    let mut custom = Vec::new();
    for field in &named.named {
        let Some(ident) = &field.ident else { continue };
        let (reducer, path, span) = parse_reducer(field, &mut errors);
        fields.push(FieldIr { name: ident.to_string(), reducer, loc: spans.loc(span.unwrap_or_else(|| ident.span())) });
        types.push(field.ty.clone());
        custom.push(path);
    }
    let ir = StateIr { name: input.ident.to_string(), version, fields, loc: spans.loc(input.ident.span()) };
    Ok(Parsed { ir, spans, input, types, custom, errors })
}

fn parse_version(attrs: &[syn::Attribute], errors: &mut Option<syn::Error>) -> u32 {
    let mut version = 1;
    for attr in attrs.iter().filter(|a| a.path().is_ident(kw::ATTR)) {
        let result = attr.parse_nested_meta(|meta| {
            if meta.path.is_ident(kw::VERSION) {
                let lit: syn::LitInt = meta.value()?.parse()?;
                version = lit.base10_parse()?;
                Ok(())
            } else {
                let key = meta.path.get_ident().map(ToString::to_string).unwrap_or_default();
                Err(meta.error(unknown("`#[state]` argument", &key, &[kw::VERSION], "`version = N`")))
            }
        });
        if let Err(e) = result {
            combine(errors, e);
        }
    }
    version
}

fn parse_reducer(
    field: &syn::Field,
    errors: &mut Option<syn::Error>,
) -> (Reducer, Option<syn::Path>, Option<proc_macro2::Span>) {
    let mut found: Option<(Reducer, Option<syn::Path>, proc_macro2::Span)> = None;
    for attr in field.attrs.iter().filter(|a| a.path().is_ident(kw::REDUCE)) {
        let result = attr.parse_nested_meta(|meta| {
            let ident = meta.path.get_ident().map(ToString::to_string).unwrap_or_default();
            let span = meta.path.span();
            let (reducer, path) = match ident.as_str() {
                kw::APPEND => (Reducer::Append, None),
                kw::ADD => (Reducer::Add, None),
                kw::MERGE => (Reducer::Merge, None),
                kw::MESSAGES => (Reducer::Messages, None),
                kw::CUSTOM => (Reducer::Custom, Some(meta.value()?.parse::<syn::Path>()?)),
                other => {
                    return Err(meta.error(format!(
                        "unknown reducer `{other}`{}\nexpected one of `append`, `add`, `merge`, `messages`, \
                         `custom = path::to::fn`, or no `#[reduce]` to overwrite",
                        hint(other, REDUCERS.iter().copied())
                    )));
                }
            };
            if found.is_some() {
                return Err(meta.error("a field takes one reducer; remove one of them"));
            }
            found = Some((reducer, path, span));
            Ok(())
        });
        if let Err(e) = result {
            combine(errors, e);
        }
    }
    match found {
        Some((r, p, s)) => (r, p, Some(s)),
        None => (Reducer::Overwrite, None, None),
    }
}
