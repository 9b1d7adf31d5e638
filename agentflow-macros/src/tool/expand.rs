//! Tool IR -> tokens: a unit struct named after the fn that implements
//! `agentflow::tool::Tool`. The fn body moves inside, so the only way to run
//! it is `Tool::invoke`, which needs a `ToolCx` only the gateway can make.

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;

use super::parse::{Parsed, Second, parse};
use crate::diag::Diagnostics;

pub fn tool(args: TokenStream, input: TokenStream) -> TokenStream {
    let mut parsed = match parse(args, input) {
        Ok(p) => p,
        Err(e) => return e.to_compile_error(),
    };
    let mut diags = Diagnostics::default();
    super::check::check_all(&parsed.ir, &mut diags);
    let errors = parsed.spans.render(diags, parsed.errors.take());
    let out = expand(&parsed, errors.is_some());
    let mut tokens = errors.map(|e| e.to_compile_error()).unwrap_or_default();
    tokens.extend(out);
    tokens
}

fn expand(p: &Parsed, has_errors: bool) -> TokenStream {
    let f = &p.func;
    let vis = &f.vis;
    let ident = &f.sig.ident;
    let name = ident.to_string();
    let docs: Vec<_> = f.attrs.iter().filter(|a| a.path().is_ident("doc")).collect();
    let description = &p.ir.description;
    // Spanned at the fn's name, so rustc's "similarly named ... defined here"
    // (for a typo in a node's `tools = [..]`) points at the tool, not the attribute.
    let struct_def = quote_spanned! {ident.span()=>
        #(#docs)*
        #[allow(non_camel_case_types)]
        #[derive(::core::clone::Clone, ::core::marker::Copy, ::core::fmt::Debug)]
        #vis struct #ident;
    };
    if has_errors {
        // Still a `Tool` (one that never runs: the crate does not compile),
        // so each node listing it adds no "is not a tool" error of its own.
        return quote! {
            #struct_def

            #[automatically_derived]
            #[::agentflow::__private::async_trait]
            impl ::agentflow::tool::Tool for #ident {
                fn name(&self) -> &'static str {
                    #name
                }
                fn description(&self) -> &'static str {
                    #description
                }
                fn risk(&self) -> ::agentflow::tool::Risk {
                    ::agentflow::tool::Risk::Irreversible
                }
                fn parameters(&self) -> ::agentflow::__private::serde_json::Value {
                    ::agentflow::__private::serde_json::Value::Null
                }
                fn validate(
                    &self,
                    _: &::agentflow::__private::serde_json::Value,
                ) -> ::core::result::Result<(), ::agentflow::tool::ArgumentError> {
                    ::core::result::Result::Ok(())
                }
                async fn invoke(
                    &self,
                    _: ::agentflow::__private::serde_json::Value,
                    _: &::agentflow::tool::ToolCx<'_, ::agentflow::tool::AnyDeps>,
                ) -> ::core::result::Result<::agentflow::__private::serde_json::Value, ::agentflow::tool::ToolError> {
                    ::core::unreachable!("the tool did not compile")
                }
            }

            #[automatically_derived]
            impl ::agentflow::__private::ToolDeps for #ident {
                type Deps = dyn ::agentflow::__private::NoDeps;
                const NAME: &'static str = #name;
            }
        };
    }
    let risk = match p.ir.risk.as_ref().map(|r| r.0.as_str()) {
        Some("reversible") => quote!(Reversible),
        Some("external") => quote!(External),
        Some("irreversible") => quote!(Irreversible),
        _ => quote!(Read),
    };
    let idempotent = p.ir.idempotent;
    let Some(args_ty) = &p.args_ty else { return struct_def };
    let body_fn = format_ident!("__agentflow_tool_{}", ident, span = ident.span());
    let mut inner = f.clone();
    inner.sig.ident = body_fn.clone();
    inner.vis = syn::Visibility::Inherited;
    inner.attrs.retain(|a| !a.path().is_ident("doc"));
    // `ToolCx` borrows the call's data, and an `async fn` may not leave a
    // path's lifetime out: the user writes `&ToolCx<Deps>`, the body gets
    // `&ToolCx<'_, Deps>`.
    if let Some(syn::FnArg::Typed(t)) = inner.sig.inputs.iter_mut().nth(1) {
        add_cx_lifetime(&mut t.ty);
    }
    let private = quote!(::agentflow::__private);
    let call = match &p.second {
        Second::Nothing => quote!(#body_fn(args)),
        Second::Cx => quote!(#body_fn(args, &#private::untyped_cx(cx))),
        Second::CxWithDeps(d) => quote!(#body_fn(args, &#private::typed_cx::<#d>(cx, #name)?)),
        Second::Deps(d) => quote!(#body_fn(args, #private::typed_cx::<#d>(cx, #name)?.deps())),
    };
    let deps_ty = match p.second.deps() {
        Some(d) => quote!(#d),
        None => quote!(dyn #private::NoDeps),
    };
    // The body on its own, for the tool's unit tests: only under `cfg(test)`
    // of the crate that declares the tool, so graph code cannot call it
    // around the gateway.
    let ret = match &f.sig.output {
        syn::ReturnType::Type(_, ty) => quote!(#ty),
        syn::ReturnType::Default => quote!(()),
    };
    let (test_params, test_call) = match &p.second {
        Second::Nothing => (quote!(), quote!(#body_fn(args))),
        Second::Cx => (quote!(), quote!(#body_fn(args, &#private::test_cx(#name, &())))),
        Second::CxWithDeps(d) => (quote!(deps: &#d), quote!(#body_fn(args, &#private::test_cx(#name, deps)))),
        Second::Deps(d) => (quote!(deps: &#d), quote!(#body_fn(args, deps))),
    };
    let test_doc = format!(
        "Runs `{name}`'s body on its own, for a unit test: no gateway, no policy, no journal. \
         The call id is `test-call`, the idempotency key `{name}`, the node `test`. \
         Exists only under `cfg(test)`."
    );
    let ret_span = match &f.sig.output {
        syn::ReturnType::Type(_, ty) => ty.span(),
        syn::ReturnType::Default => ident.span(),
    };
    // The conversion is spanned at the return type, so a wrong one is reported there.
    // `compensate = cancel_order`: the forward tool's types, and the
    // compensation built from them, spanned at the name so rustc's errors
    // (not a tool, arguments that cannot be built) point there.
    let (compensation_fn, reversible) = match &p.compensate {
        None => (quote!(), quote!()),
        Some(comp) => {
            let span = comp.span();
            let build = quote_spanned! {span=>
                ::agentflow::saga::compensation::<#ident, _>(&#comp)
            };
            (
                quote! {
                    fn compensation(&self) -> ::core::option::Option<::agentflow::tool::Compensation> {
                        ::core::option::Option::Some(#build)
                    }
                },
                quote! {
                    #[automatically_derived]
                    impl ::agentflow::saga::Reversible for #ident {
                        type Args = #args_ty;
                        type Output = <#ret as #private::ToolReturn>::Value;
                    }
                },
            )
        }
    };
    let value = quote_spanned!(ret_span=> __agentflow_value);
    let result = quote_spanned!(ret_span=> ::agentflow::__private::tool_result(#value));
    quote! {
        #struct_def

        const _: () = {
            #inner

            #[automatically_derived]
            #[::agentflow::__private::async_trait]
            impl ::agentflow::tool::Tool for #ident {
                fn name(&self) -> &'static str {
                    #name
                }
                fn description(&self) -> &'static str {
                    #description
                }
                fn risk(&self) -> ::agentflow::tool::Risk {
                    ::agentflow::tool::Risk::#risk
                }
                fn idempotent(&self) -> bool {
                    #idempotent
                }
                fn parameters(&self) -> ::agentflow::__private::serde_json::Value {
                    <#args_ty as ::agentflow::__private::ToolArgs>::schema()
                }
                fn validate(
                    &self,
                    args: &::agentflow::__private::serde_json::Value,
                ) -> ::core::result::Result<(), ::agentflow::tool::ArgumentError> {
                    <#args_ty as ::agentflow::__private::ToolArgs>::parse(args, &self.parameters()).map(|_| ())
                }
                async fn invoke(
                    &self,
                    args: ::agentflow::__private::serde_json::Value,
                    cx: &::agentflow::tool::ToolCx<'_, ::agentflow::tool::AnyDeps>,
                ) -> ::core::result::Result<::agentflow::__private::serde_json::Value, ::agentflow::tool::ToolError> {
                    let _ = cx;
                    let args = <#args_ty as ::agentflow::__private::ToolArgs>::parse(&args, &self.parameters())
                        .map_err(|e| ::agentflow::tool::ToolError::Correctable(e.0))?;
                    let #value = #call.await;
                    #result
                }
                #compensation_fn
            }

            #[automatically_derived]
            impl ::agentflow::saga::ToolArgsOf for #ident {
                type Args = #args_ty;
            }

            #reversible

            #[automatically_derived]
            impl #private::ToolDeps for #ident {
                type Deps = #deps_ty;
                const NAME: &'static str = #name;
            }

            #[cfg(test)]
            impl #ident {
                #[doc = #test_doc]
                #[allow(dead_code)]
                pub async fn test_call(&self, args: #args_ty, #test_params) -> #ret {
                    #test_call.await
                }
            }
        };
    }
}

/// `&ToolCx` -> `&ToolCx<'_>`, `&ToolCx<D>` -> `&ToolCx<'_, D>`; anything else unchanged.
fn add_cx_lifetime(ty: &mut syn::Type) {
    let syn::Type::Reference(r) = ty else { return };
    let syn::Type::Path(p) = &mut *r.elem else { return };
    let Some(last) = p.path.segments.last_mut() else { return };
    if last.ident != "ToolCx" {
        return;
    }
    let lifetime: syn::GenericArgument = syn::parse_quote!('_);
    match &mut last.arguments {
        syn::PathArguments::None => last.arguments = syn::PathArguments::AngleBracketed(syn::parse_quote!(<'_>)),
        syn::PathArguments::AngleBracketed(a) => {
            if !a.args.iter().any(|g| matches!(g, syn::GenericArgument::Lifetime(_))) {
                a.args.insert(0, lifetime);
            }
        }
        syn::PathArguments::Parenthesized(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_lifetime(ty: syn::Type) -> String {
        let mut ty = ty;
        add_cx_lifetime(&mut ty);
        quote!(#ty).to_string()
    }

    #[test]
    fn a_tool_cx_parameter_gets_the_lifetime_an_async_fn_needs() {
        assert_eq!(with_lifetime(syn::parse_quote!(&ToolCx)), "& ToolCx < '_ >");
        assert_eq!(with_lifetime(syn::parse_quote!(&ToolCx<Deps>)), "& ToolCx < '_ , Deps >");
        assert_eq!(with_lifetime(syn::parse_quote!(&ToolCx<'a, Deps>)), "& ToolCx < 'a , Deps >");
        assert_eq!(with_lifetime(syn::parse_quote!(&Deps)), "& Deps");
    }
}
