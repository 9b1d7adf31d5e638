//! syn -> tool IR; the tokens the IR does not hold stay here.

use syn::spanned::Spanned;

use super::ir::ToolIr;
use crate::diag::{Spans, combine, unknown};
use crate::keywords::tool as kw;

pub struct Parsed {
    pub ir: ToolIr,
    pub spans: Spans,
    pub func: syn::ItemFn,
    /// The argument struct's type.
    pub args_ty: Option<syn::Type>,
    /// What the fn takes after its arguments.
    pub second: Second,
    /// `compensate = path`: the compensating tool.
    pub compensate: Option<syn::Path>,
    pub errors: Option<syn::Error>,
}

/// A tool fn's second parameter.
pub enum Second {
    /// None: `(args)`.
    Nothing,
    /// `cx: &ToolCx`: the call's context, no deps.
    Cx,
    /// `cx: &ToolCx<D>`: the call's context with the graph's deps `D`.
    CxWithDeps(syn::Type),
    /// `deps: &D`: the graph's deps alone.
    Deps(syn::Type),
}

impl Second {
    /// The deps type the tool reads, if any.
    pub fn deps(&self) -> Option<&syn::Type> {
        match self {
            Second::CxWithDeps(d) | Second::Deps(d) => Some(d),
            Second::Nothing | Second::Cx => None,
        }
    }
}

/// Reads `&ToolCx`, `&ToolCx<D>` (or `&ToolCx<'_, D>`) or `&D`.
fn second_param(ty: &syn::Type) -> Second {
    let syn::Type::Reference(r) = ty else { return Second::Deps(ty.clone()) };
    if let syn::Type::Path(p) = &*r.elem
        && p.qself.is_none()
        && let Some(last) = p.path.segments.last()
        && last.ident == "ToolCx"
    {
        if let syn::PathArguments::AngleBracketed(a) = &last.arguments {
            for arg in &a.args {
                if let syn::GenericArgument::Type(t) = arg {
                    return Second::CxWithDeps(t.clone());
                }
            }
        }
        return Second::Cx;
    }
    Second::Deps((*r.elem).clone())
}

pub fn parse(args: proc_macro2::TokenStream, input: proc_macro2::TokenStream) -> syn::Result<Parsed> {
    let func: syn::ItemFn = syn::parse2(input)
        .map_err(|e| syn::Error::new(e.span(), "`#[tool]` goes on an `async fn` with a typed argument struct"))?;
    let mut spans = Spans::default();
    let mut errors = None;
    let mut risk = None;
    let mut idempotent = false;
    let mut compensate: Option<syn::Path> = None;
    let parser = syn::meta::parser(|meta| {
        if meta.path.is_ident(kw::RISK) {
            let ident: syn::Ident = meta.value()?.parse()?;
            risk = Some((ident.to_string(), spans.loc(ident.span())));
            Ok(())
        } else if meta.path.is_ident(kw::IDEMPOTENT) {
            idempotent = true;
            Ok(())
        } else if meta.path.is_ident(kw::COMPENSATE) {
            let path: syn::Path = meta.value()?.parse().map_err(|e| {
                syn::Error::new(e.span(), "expected the compensating tool: `compensate = cancel_order`")
            })?;
            compensate = Some(path);
            Ok(())
        } else {
            let name = meta.path.get_ident().map(ToString::to_string).unwrap_or_default();
            Err(meta.error(unknown(
                "`#[tool]` argument",
                &name,
                kw::ARGS,
                &format!(
                    "`risk = {}`, optionally followed by `{}` and `{} = tool`",
                    kw::RISKS.join(" | "),
                    kw::IDEMPOTENT,
                    kw::COMPENSATE
                ),
            )))
        }
    });
    if let Err(e) = syn::parse::Parser::parse2(parser, args) {
        combine(&mut errors, e);
    }
    let description = func
        .attrs
        .iter()
        .filter(|a| a.path().is_ident("doc"))
        .filter_map(|a| match &a.meta {
            syn::Meta::NameValue(nv) => match &nv.value {
                syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(s), .. }) => Some(s.value().trim().to_string()),
                _ => None,
            },
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
        .trim()
        .to_string();
    let mut args_ty = None;
    let mut args_by_value = false;
    let mut second = Second::Nothing;
    for (i, input) in func.sig.inputs.iter().enumerate() {
        if let syn::FnArg::Typed(t) = input {
            if i == 0 {
                args_by_value = !matches!(&*t.ty, syn::Type::Reference(_));
                args_ty = Some((*t.ty).clone());
            } else if i == 1 {
                second = second_param(&t.ty);
            }
        }
    }
    let sig_span = if func.sig.asyncness.is_none() { func.sig.fn_token.span } else { func.sig.inputs.span() };
    let ir = ToolIr {
        name: func.sig.ident.to_string(),
        name_loc: spans.loc(func.sig.ident.span()),
        risk,
        idempotent,
        compensate: compensate.as_ref().map(|p| {
            let name = p.segments.last().map(|s| s.ident.to_string()).unwrap_or_default();
            (name, spans.loc(p.span()))
        }),
        args_parsed: errors.is_none(),
        description,
        is_async: func.sig.asyncness.is_some(),
        params: func.sig.inputs.len(),
        args_by_value,
        has_return: !matches!(func.sig.output, syn::ReturnType::Default),
        sig_loc: spans.loc(if func.sig.inputs.is_empty() { func.sig.ident.span() } else { sig_span }),
    };
    Ok(Parsed { ir, spans, func, args_ty, second, compensate, errors })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn second(sig: proc_macro2::TokenStream) -> Second {
        let f: syn::ItemFn = syn::parse2(quote::quote!(#sig {})).unwrap();
        let Some(syn::FnArg::Typed(t)) = f.sig.inputs.iter().nth(1) else { return Second::Nothing };
        second_param(&t.ty)
    }

    fn ty(d: Option<&syn::Type>) -> String {
        d.map(|t| quote::quote!(#t).to_string()).unwrap_or_default()
    }

    #[test]
    fn the_second_parameter_says_which_deps_a_tool_reads() {
        assert!(matches!(second(quote::quote!(async fn t(a: A))), Second::Nothing));
        assert!(matches!(second(quote::quote!(async fn t(a: A, cx: &ToolCx))), Second::Cx));
        assert!(matches!(second(quote::quote!(async fn t(a: A, cx: &agentflow::tool::ToolCx))), Second::Cx));
        let s = second(quote::quote!(async fn t(a: A, cx: &ToolCx<Deps>)));
        assert!(matches!(s, Second::CxWithDeps(_)));
        assert_eq!(ty(s.deps()), "Deps");
        let s = second(quote::quote!(async fn t(a: A, cx: &ToolCx<'_, my::Deps>)));
        assert_eq!(ty(s.deps()), "my :: Deps");
        let s = second(quote::quote!(async fn t(a: A, deps: &Deps)));
        assert!(matches!(s, Second::Deps(_)));
        assert_eq!(ty(s.deps()), "Deps");
    }
}
