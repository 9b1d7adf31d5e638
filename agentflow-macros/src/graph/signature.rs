//! A node fn's signature: its parameters read into the IR's [`Signature`] (each as written,
//! for messages), its `#[payload]` parameter taken off for the expansion, and the lifetime of
//! a `&Ctx<D>` parameter written out.

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, quote};
use syn::spanned::Spanned;

use super::ir::{Param, Signature, Written};
use super::parse::PayloadSyn;
use crate::diag::{Loc, Spans, combine};
use crate::keywords::{body, node as node_kw};

/// What [`parse_signature`] reads from a node fn.
pub struct ParsedSignature {
    pub sig: Signature,
    /// Parameter types, in order.
    pub params: Vec<syn::Type>,
    /// Whether the context-or-deps parameter is the context (`&Ctx<D>`).
    pub ctx_param: bool,
    /// The `#[payload]` parameter, if there is one, and where its type is written.
    pub payload: Option<PayloadSyn>,
    pub payload_loc: Option<Loc>,
}

/// Reads the signature of node fn `f`, taking `#[payload]` off its parameter.
pub fn parse_signature(f: &mut syn::ItemFn, spans: &mut Spans, errors: &mut Option<syn::Error>) -> ParsedSignature {
    // `cx: &Ctx<Deps>` is the documented form, but an `async fn` may not
    // elide the lifetime inside a path; write the `'_` for the user.
    // `#[payload]` marks a map worker's payload parameter; the attribute is
    // the macro's, so it is taken off before rustc sees the fn.
    let mut payload = None;
    let mut payload_loc = None;
    for (i, input) in f.sig.inputs.iter_mut().enumerate() {
        if let syn::FnArg::Typed(t) = input {
            elide_ctx_lifetime(&mut t.ty);
            let before = t.attrs.len();
            t.attrs.retain(|a| !a.path().is_ident(node_kw::PAYLOAD));
            if t.attrs.len() != before {
                if payload.is_some() {
                    combine(errors, syn::Error::new(t.span(), "a node takes at most one `#[payload]` parameter"));
                    continue;
                }
                payload_loc = Some(spans.loc(t.ty.span()));
                let (ty, by_ref) = match &*t.ty {
                    // `&str` and `&[T]` borrow a decoded `String` and `Vec<T>`.
                    syn::Type::Reference(r) if r.mutability.is_none() => match &*r.elem {
                        syn::Type::Path(p) if p.qself.is_none() && p.path.is_ident("str") => {
                            (syn::parse_quote!(String), true)
                        }
                        syn::Type::Slice(slice) => {
                            let elem = &slice.elem;
                            (syn::parse_quote!(Vec<#elem>), true)
                        }
                        elem => (elem.clone(), true),
                    },
                    other => (other.clone(), false),
                };
                payload = Some(PayloadSyn { at: i, ty, by_ref });
            }
        }
    }
    let mut params = Vec::new();
    let mut param_locs = Vec::new();
    let mut written = Vec::new();
    let mut state = Param::Missing;
    for (i, input) in f.sig.inputs.iter().enumerate() {
        match input {
            syn::FnArg::Receiver(r) => {
                state = Param::Receiver;
                param_locs.push(spans.loc(r.self_token.span));
                written.push(Written { text: as_written(r), loc: whole(spans, r.to_token_stream()) });
            }
            syn::FnArg::Typed(t) => {
                let mut span = t.ty.span();
                if i == 0 {
                    state = match &*t.ty {
                        syn::Type::Reference(r) if r.mutability.is_some() => {
                            span = r.mutability.map_or(span, |m| m.span);
                            Param::RefMut
                        }
                        syn::Type::Reference(_) => Param::Ref,
                        _ => Param::Value,
                    };
                }
                param_locs.push(spans.loc(span));
                params.push((*t.ty).clone());
                let (pat, ty) = (&t.pat, &t.ty);
                written.push(Written { text: as_written(quote!(#pat: #ty)), loc: whole(spans, quote!(#pat #ty)) });
            }
        }
    }
    let payload_at = payload.as_ref().map(|p| p.at);
    let cx_at = (1..params.len()).find(|&i| Some(i) != payload_at);
    let ctx_param = cx_at.and_then(|i| params.get(i)).is_some_and(is_ctx_type);
    let ctx_at =
        f.sig.inputs.iter().enumerate().filter(|(_, a)| matches!(a, syn::FnArg::Typed(t) if is_ctx_type(&t.ty)));
    let sig = Signature {
        is_async: f.sig.asyncness.is_some(),
        state,
        params: param_locs,
        written,
        payload_at,
        ctx_at: ctx_at.map(|(i, _)| i).collect(),
        generics: (!f.sig.generics.params.is_empty()).then(|| spans.loc(f.sig.generics.params.span())),
        loc: spans.loc(f.sig.fn_token.span),
    };
    ParsedSignature { sig, params, ctx_param, payload, payload_loc }
}

/// Tokens as a user would write them: `ticker: &Vec<String>`, not `ticker : & Vec < String >`.
pub fn as_written(tokens: impl ToTokens) -> String {
    let mut s = tokens.to_token_stream().to_string();
    for (from, to) in
        [(" :: ", "::"), (":: ", "::"), (" : ", ": "), (" <", "<"), ("< ", "<"), (" >", ">"), (" ,", ","), ("& ", "&")]
    {
        s = s.replace(from, to);
    }
    s
}

/// The place from the first of `tokens` to the last.
fn whole(spans: &mut Spans, tokens: TokenStream) -> Loc {
    let mut tokens = tokens.into_iter();
    let first = tokens.next().map_or_else(Span::call_site, |t| t.span());
    let last = tokens.last().map_or(first, |t| t.span());
    spans.range(first, last)
}

/// Adds `'_` to a `&Ctx<D>` parameter type.
fn elide_ctx_lifetime(ty: &mut syn::Type) {
    let syn::Type::Reference(r) = ty else { return };
    let syn::Type::Path(p) = &mut *r.elem else { return };
    let Some(last) = p.path.segments.last_mut() else { return };
    if last.ident != body::CTX {
        return;
    }
    if let syn::PathArguments::AngleBracketed(args) = &mut last.arguments
        && !args.args.iter().any(|a| matches!(a, syn::GenericArgument::Lifetime(_)))
    {
        args.args.insert(0, syn::parse_quote!('_));
    }
}

/// `&Ctx<..>` (any path ending in `Ctx`).
fn is_ctx_type(ty: &syn::Type) -> bool {
    let syn::Type::Reference(r) = ty else {
        return false;
    };
    let syn::Type::Path(p) = &*r.elem else {
        return false;
    };
    p.path.segments.last().is_some_and(|s| s.ident == body::CTX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_read_as_they_are_written() {
        let f: syn::ItemFn = syn::parse_quote! {
            async fn analyst(_s: &Market, #[payload] ticker: &String, (a, b): (u32, Vec<u8>), cx: &Ctx<()>) {}
        };
        let texts: Vec<String> = f
            .sig
            .inputs
            .iter()
            .map(|a| match a {
                syn::FnArg::Typed(t) => {
                    let (pat, ty) = (&t.pat, &t.ty);
                    as_written(quote!(#pat: #ty))
                }
                syn::FnArg::Receiver(r) => as_written(r),
            })
            .collect();
        assert_eq!(texts, ["_s: &Market", "ticker: &String", "(a, b): (u32, Vec<u8>)", "cx: &Ctx<()>"]);
        assert_eq!(as_written(quote!(mut t: &'a mut std::string::String)), "mut t: &'a mut std::string::String");
    }
}
