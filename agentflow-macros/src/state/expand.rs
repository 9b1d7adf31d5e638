//! State IR -> tokens: the `State` impl, the update type and its setters.

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};

use super::ir::{Mark, Reducer};
use super::parse::{Parsed, parse};
use crate::diag::Diagnostics;

pub fn derive(input: TokenStream) -> TokenStream {
    let input = match syn::parse2::<syn::DeriveInput>(input) {
        Ok(input) => input,
        Err(e) => return e.to_compile_error(),
    };
    let parsed = match parse(input) {
        Ok(parsed) => parsed,
        Err(e) => return e.to_compile_error(),
    };
    let mut diags = Diagnostics::default();
    super::check::check_all(&parsed.ir, &mut diags);
    let errors = parsed.spans.render(diags, parsed.errors.clone());
    match errors {
        // The impl is still emitted when only field attributes were wrong, so
        // graphs using this state do not cascade into "trait not implemented".
        Some(e) => {
            let mut out = e.to_compile_error();
            out.extend(expand(&parsed));
            out
        }
        None => expand(&parsed),
    }
}

/// `tokens` with every span set to `span`, so an error inside them points there.
fn respan(tokens: TokenStream, span: proc_macro2::Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|mut tt| {
            if let proc_macro2::TokenTree::Group(g) = &tt {
                let mut inner = proc_macro2::Group::new(g.delimiter(), respan(g.stream(), span));
                inner.set_span(span);
                tt = proc_macro2::TokenTree::Group(inner);
            } else {
                tt.set_span(span);
            }
            tt
        })
        .collect()
}

fn expand(p: &Parsed) -> TokenStream {
    let ident = &p.input.ident;
    let vis = &p.input.vis;
    let update = format_ident!("{}Update", ident);
    let version = p.ir.version;
    let name = ident.to_string();
    let mut field_defs = Vec::new();
    let mut setters = Vec::new();
    let mut applies = Vec::new();
    let mut touched = Vec::new();
    let mut infos = Vec::new();
    let mut debugs = Vec::new();
    let mut helpers = Vec::new();
    let mut hints = Vec::new();
    let mut clears = Vec::new();
    for (i, f) in p.ir.fields.iter().enumerate() {
        let fname = format_ident!("{}", f.name);
        let ty = &p.types[i];
        let (fname_str, hint) = (&f.name, reducer_hint(ty));
        hints.push(quote!((#fname_str, #hint)));
        let span = p.spans.span(f.loc);
        // A `Secret` field with a reducer was reported; it expands as overwrite so
        // the error is not followed by "trait not implemented" ones.
        let reducer = if f.secret { &Reducer::Overwrite } else { &f.reducer };
        let reducer_tokens = match reducer {
            Reducer::Overwrite => quote!(Overwrite),
            Reducer::Append => quote!(Append),
            Reducer::Add => quote!(Add),
            Reducer::Merge => quote!(Merge),
            Reducer::Messages => quote!(Messages),
            Reducer::Custom => quote!(Custom),
        };
        let reduce = |dst: TokenStream, value: TokenStream| -> TokenStream {
            let call = |t: TokenStream, m: TokenStream| quote_spanned!(span=> <#ty as ::agentflow::__private::#t>::#m(#dst, #value));
            match reducer {
                Reducer::Overwrite => quote!(*#dst = #value),
                Reducer::Append => call(quote!(Append), quote!(append)),
                Reducer::Add => call(quote!(Add), quote!(add)),
                Reducer::Merge => call(quote!(Merge), quote!(merge)),
                Reducer::Messages => call(quote!(Messages), quote!(merge_messages)),
                Reducer::Custom => {
                    let helper = format_ident!("__agentflow_reduce_{}", f.name);
                    quote!(#update::#helper(#dst, #value))
                }
            }
        };
        // The custom reducer is named once, in a helper both call sites share,
        // so a wrong signature is reported once, at the path.
        if let (Reducer::Custom, Some(path)) = (reducer, &p.custom[i]) {
            let helper = format_ident!("__agentflow_reduce_{}", f.name);
            let path_span = path.segments.last().map_or(span, |s| s.ident.span());
            let ty_at_path = respan(quote!(#ty), path_span);
            let check = quote_spanned!(path_span=> let reducer: fn(&mut #ty_at_path, #ty_at_path) = #path;);
            helpers.push(quote! {
                #[doc(hidden)]
                fn #helper(dst: &mut #ty, value: #ty) {
                    #check
                    reducer(dst, value)
                }
            });
        }
        let kind = match reducer {
            Reducer::Overwrite => "replaces the current value".to_string(),
            Reducer::Append => "is appended (`append` reducer)".to_string(),
            Reducer::Add => "is added (`add` reducer)".to_string(),
            Reducer::Merge => "is merged key by key (`merge` reducer)".to_string(),
            Reducer::Messages => "is appended, replacing same-id messages (`messages` reducer)".to_string(),
            Reducer::Custom => "is merged by the custom reducer".to_string(),
        };
        let doc = format!("Sets `{}`: the value {kind}. Calling it twice combines both values the same way.", f.name);
        let set = reduce(quote!(old), quote!(value));
        let apply = reduce(quote!(&mut self.#fname), quote!(value));
        field_defs.push(quote! {
            #[doc = concat!("The value written to `", stringify!(#fname), "`, if any.")]
            #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "::agentflow::__private::present")]
            pub #fname: ::core::option::Option<#ty>,
        });
        setters.push(quote! {
            #[doc = #doc]
            #[must_use]
            pub fn #fname(mut self, value: #ty) -> Self {
                self.#fname = ::core::option::Option::Some(match self.#fname.take() {
                    ::core::option::Option::Some(mut current) => {
                        {
                            let old = &mut current;
                            #set;
                        }
                        current
                    }
                    ::core::option::Option::None => value,
                });
                self
            }
        });
        applies.push(quote! {
            if let ::core::option::Option::Some(value) = update.#fname { #apply; }
        });
        let bit = i as u32;
        touched.push(quote! {
            if self.#fname.is_some() { mask |= 1u64 << #bit; }
        });
        let fname_str = &f.name;
        // Debug output reaches logs and traces: a personal or credential field's value never does.
        let hidden = f.has(Mark::Personal) || f.has(Mark::Credential);
        if hidden {
            clears.push(quote! {
                if names.contains(&#fname_str) { self.#fname = ::core::option::Option::None; }
            });
        }
        debugs.push(if hidden {
            quote! {
                if self.#fname.is_some() { out.field(#fname_str, &::core::format_args!("•••")); }
            }
        } else {
            quote! {
                if let ::core::option::Option::Some(value) = &self.#fname { out.field(#fname_str, value); }
            }
        });
        let ty_str: String = quote!(#ty).to_string().chars().filter(|c| !c.is_whitespace()).collect();
        let personal = f.has(Mark::Personal).then(|| quote!(.personal()));
        let credential = f.has(Mark::Credential).then(|| quote!(.credential()));
        infos.push(quote! {
            ::agentflow::Field::new(#fname_str, ::agentflow::ReducerKind::#reducer_tokens, #ty_str)
                #personal #credential
        });
    }
    let update_doc = format!(
        "A partial update of [`{name}`]: only the fields a node sets. Start from `{name}::update()` and chain one setter per field."
    );
    quote! {
        #[doc = #update_doc]
        #[derive(::core::clone::Clone, ::core::default::Default,
                 ::agentflow::__private::serde::Serialize, ::agentflow::__private::serde::Deserialize)]
        #[serde(crate = "::agentflow::__private::serde")]
        #vis struct #update {
            #(#field_defs)*
        }

        #[automatically_derived]
        impl #update {
            #(#setters)*
            #(#helpers)*
        }

        // Shows only the fields the update sets.
        #[automatically_derived]
        impl ::core::fmt::Debug for #update {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                let mut out = f.debug_struct(::core::stringify!(#update));
                #(#debugs)*
                out.finish()
            }
        }

        #[automatically_derived]
        impl ::agentflow::Update for #update {
            fn touched(&self) -> u64 {
                let mut mask = 0u64;
                #(#touched)*
                mask
            }

            #[doc(hidden)]
            fn __clear_fields(&mut self, names: &[&str]) {
                let _ = names;
                #(#clears)*
            }
        }

        #[automatically_derived]
        impl #ident {
            /// An empty partial update; chain setters on it.
            #[must_use]
            #vis fn update() -> #update {
                ::core::default::Default::default()
            }

            /// Per field, which built-in reducer fits its type, for the
            /// `#[graph]` same-step write check's message.
            #[doc(hidden)]
            pub const __AGENTFLOW_REDUCER_HINTS: &'static [(&'static str, u8)] = &[#(#hints),*];
        }

        #[automatically_derived]
        impl ::agentflow::State for #ident {
            type Update = #update;
            const VERSION: u32 = #version;
            const NAME: &'static str = #name;
            const FIELDS: &'static [::agentflow::Field] = &[#(#infos),*];

            fn apply(&mut self, update: #update) {
                #(#applies)*
            }
        }
    }
}

/// Which built-in reducer fits a field of type `ty`, judged from how the type
/// is written (an alias gets no suggestion): `Vec<Message>` messages, `Vec`
/// append, numbers add, maps merge.
fn reducer_hint(ty: &syn::Type) -> u8 {
    use crate::graph::expand::{HINT_ADD, HINT_APPEND, HINT_MERGE, HINT_MESSAGES, HINT_NONE};
    let syn::Type::Path(p) = ty else { return HINT_NONE };
    let Some(last) = p.path.segments.last() else { return HINT_NONE };
    let name = last.ident.to_string();
    match name.as_str() {
        "Vec" => {
            let of_messages = matches!(&last.arguments, syn::PathArguments::AngleBracketed(args)
                if matches!(args.args.first(), Some(syn::GenericArgument::Type(syn::Type::Path(t)))
                    if t.path.segments.last().is_some_and(|s| s.ident == "Message")));
            if of_messages { HINT_MESSAGES } else { HINT_APPEND }
        }
        "u8" | "u16" | "u32" | "u64" | "u128" | "usize" | "i8" | "i16" | "i32" | "i64" | "i128" | "isize" | "f32"
        | "f64" => HINT_ADD,
        "HashMap" | "BTreeMap" => HINT_MERGE,
        _ => HINT_NONE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::expand::{HINT_ADD, HINT_APPEND, HINT_MERGE, HINT_MESSAGES, HINT_NONE};

    #[test]
    fn suggests_only_reducers_that_fit_the_type() {
        let hint = |ty: &str| reducer_hint(&syn::parse_str(ty).unwrap());
        assert_eq!(hint("String"), HINT_NONE);
        assert_eq!(hint("Option<String>"), HINT_NONE);
        assert_eq!(hint("Vec<String>"), HINT_APPEND);
        assert_eq!(hint("std::vec::Vec<agentflow::message::Message>"), HINT_MESSAGES);
        assert_eq!(hint("u32"), HINT_ADD);
        assert_eq!(hint("f64"), HINT_ADD);
        assert_eq!(hint("std::collections::HashMap<String, u32>"), HINT_MERGE);
        assert_eq!(hint("BTreeMap<String, u32>"), HINT_MERGE);
    }
}
