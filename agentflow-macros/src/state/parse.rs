//! syn -> state IR. Keeps the field types and custom reducer paths on the side.

use syn::spanned::Spanned;

use super::ir::{FieldIr, Mark, REDUCERS, Reducer, StateIr};
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
        let marks = parse_marks(field, &mut errors).into_iter().map(|(m, s)| (m, spans.loc(s))).collect();
        fields.push(FieldIr {
            name: ident.to_string(),
            reducer,
            loc: spans.loc(span.unwrap_or_else(|| ident.span())),
            marks,
            secret: is_secret(&field.ty),
        });
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
                if kw::FIELD_MARKS.contains(&key.as_str()) {
                    return Err(meta.error(format!(
                        "`{key}` marks a field, not the struct: write `#[state({key})]` on each field it applies to"
                    )));
                }
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

/// The marks of a field's `#[state(..)]` attributes, each with where it is written.
fn parse_marks(field: &syn::Field, errors: &mut Option<syn::Error>) -> Vec<(Mark, proc_macro2::Span)> {
    let mut marks = Vec::new();
    for attr in field.attrs.iter().filter(|a| a.path().is_ident(kw::ATTR)) {
        let result = attr.parse_nested_meta(|meta| {
            let key = meta.path.get_ident().map(ToString::to_string).unwrap_or_default();
            let mark = match key.as_str() {
                kw::PII => Mark::Personal,
                kw::CREDENTIAL => Mark::Credential,
                kw::VERSION => {
                    return Err(meta.error(
                        "`version` belongs to the struct: write `#[state(version = N)]` above `struct`, not on a field",
                    ));
                }
                other => {
                    return Err(meta.error(unknown(
                        "field `#[state]` argument",
                        other,
                        kw::FIELD_MARKS,
                        "`pii` (personal data, masked) or `credential` (may hold credential-like values)",
                    )));
                }
            };
            marks.push((mark, meta.path.span()));
            Ok(())
        });
        if let Err(e) = result {
            combine(errors, e);
        }
    }
    marks
}

/// Whether `ty` is written as `Secret<..>` or `Option<Secret<..>>` (any path ending so).
pub fn is_secret(ty: &syn::Type) -> bool {
    let syn::Type::Path(p) = ty else { return false };
    let Some(last) = p.path.segments.last() else { return false };
    if last.ident == kw::SECRET {
        return true;
    }
    if last.ident != "Option" {
        return false;
    }
    matches!(&last.arguments, syn::PathArguments::AngleBracketed(args)
        if matches!(args.args.first(), Some(syn::GenericArgument::Type(inner)) if is_secret_itself(inner)))
}

fn is_secret_itself(ty: &syn::Type) -> bool {
    matches!(ty, syn::Type::Path(p) if p.path.segments.last().is_some_and(|s| s.ident == kw::SECRET))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_types_are_found_by_their_last_segment() {
        let secret = |ty: &str| is_secret(&syn::parse_str(ty).unwrap());
        assert!(secret("Secret<String>"));
        assert!(secret("agentflow::Secret<String>"));
        assert!(secret("Option<Secret<String>>"));
        assert!(secret("std::option::Option<agentflow::Secret<u32>>"));
        assert!(!secret("String"));
        assert!(!secret("Vec<Secret<String>>"));
        assert!(!secret("Option<String>"));
        assert!(!secret("SecretNote"));
    }

    #[test]
    fn field_marks_are_kept_in_order_with_repeats() {
        let input: syn::DeriveInput = syn::parse_quote! {
            struct S {
                #[state(pii)]
                email: String,
                #[state(credential, pii)]
                #[state(pii)]
                token: String,
                plain: u32,
            }
        };
        let parsed = parse(input).unwrap();
        assert!(parsed.errors.is_none());
        let marks = |i: usize| parsed.ir.fields[i].marks.iter().map(|(m, _)| *m).collect::<Vec<_>>();
        assert_eq!(marks(0), [Mark::Personal]);
        assert_eq!(marks(1), [Mark::Credential, Mark::Personal, Mark::Personal]);
        assert!(marks(2).is_empty());
    }

    #[test]
    fn unknown_and_misplaced_marks_are_errors() {
        let input: syn::DeriveInput = syn::parse_quote! {
            #[state(pii)]
            struct S {
                #[state(pi)]
                email: String,
                #[state(version = 2)]
                other: String,
            }
        };
        let parsed = parse(input).unwrap();
        let messages: Vec<String> = parsed.errors.unwrap().into_iter().map(|e| e.to_string()).collect();
        assert_eq!(messages.len(), 3, "{messages:?}");
        assert!(messages[0].contains("marks a field, not the struct"), "{messages:?}");
        assert!(messages[1].contains("did you mean `pii`?"), "{messages:?}");
        assert!(messages[2].contains("belongs to the struct"), "{messages:?}");
    }
}
