//! syn -> `mcp_tools!` IR: `#[attrs] vis mod name from "path" { tool: risk [idempotent], .. }`,
//! one or more; the tokens the IR does not hold (attributes, visibility, idents) stay here.

use syn::parse::{ParseStream, Parser};
use syn::{Token, braced};

use super::ir::{Entry, ModuleIr};
use super::names::unraw;
use crate::diag::{Spans, unknown};
use crate::keywords::mcp as kw;

/// One module of the call, as written.
pub struct ModuleSyn {
    pub attrs: Vec<syn::Attribute>,
    pub vis: syn::Visibility,
    pub ident: syn::Ident,
    pub path: syn::LitStr,
    /// The risk map's tool names, parallel to the IR's entries.
    pub entry_idents: Vec<syn::Ident>,
}

pub struct Parsed {
    pub modules: Vec<(ModuleSyn, ModuleIr)>,
    pub spans: Spans,
}

const SHAPE: &str = "expected `pub mod name from \"path/to/snapshot.json\" { tool: risk, .. }`";

pub fn parse(input: proc_macro2::TokenStream) -> syn::Result<Parsed> {
    let mut spans = Spans::default();
    let parser = |input: ParseStream| {
        let mut modules = Vec::new();
        while !input.is_empty() {
            modules.push(module(input, &mut spans)?);
        }
        Ok(modules)
    };
    let modules = parser.parse2(input)?;
    if modules.is_empty() {
        return Err(syn::Error::new(proc_macro2::Span::call_site(), format!("`mcp_tools!` is empty; {SHAPE}")));
    }
    Ok(Parsed { modules, spans })
}

fn module(input: ParseStream, spans: &mut Spans) -> syn::Result<(ModuleSyn, ModuleIr)> {
    let attrs = input.call(syn::Attribute::parse_outer)?;
    let vis: syn::Visibility = input.parse()?;
    input.parse::<Token![mod]>().map_err(|e| syn::Error::new(e.span(), SHAPE))?;
    let ident: syn::Ident = input.parse()?;
    let from: syn::Ident = input.parse().map_err(|e| syn::Error::new(e.span(), after_name(&ident)))?;
    if from != kw::FROM {
        return Err(syn::Error::new(from.span(), after_name(&ident)));
    }
    let path: syn::LitStr = input.parse().map_err(|e| syn::Error::new(e.span(), after_name(&ident)))?;
    let content;
    braced!(content in input);
    let mut entries = Vec::new();
    let mut entry_idents = Vec::new();
    while !content.is_empty() {
        let (ident, entry) = entry(&content, spans)?;
        entries.push(entry);
        entry_idents.push(ident);
        if content.is_empty() {
            break;
        }
        content.parse::<Token![,]>()?;
    }
    let ir = ModuleIr {
        name: unraw(&ident.to_string()).to_string(),
        name_loc: spans.loc(ident.span()),
        path: path.value(),
        path_loc: spans.loc(path.span()),
        entries,
    };
    Ok((ModuleSyn { attrs, vis, ident, path, entry_idents }, ir))
}

fn after_name(ident: &syn::Ident) -> String {
    format!("expected `from \"path/to/snapshot.json\"` after `mod {ident}`, the snapshot's path relative to this file")
}

/// `get_sum: read` or `get_sum: external idempotent`.
fn entry(input: ParseStream, spans: &mut Spans) -> syn::Result<(syn::Ident, Entry)> {
    let name: syn::Ident = input.parse()?;
    let risks = kw::RISKS.join(" | ");
    input
        .parse::<Token![:]>()
        .map_err(|e| syn::Error::new(e.span(), format!("expected `{name}: risk`, the risk one of {risks}")))?;
    let risk: syn::Ident = input
        .parse()
        .map_err(|e| syn::Error::new(e.span(), format!("expected the risk of `{name}`: one of {risks}")))?;
    let mut idempotent = false;
    if input.peek(syn::Ident) {
        let flag: syn::Ident = input.parse()?;
        if flag != kw::IDEMPOTENT {
            return Err(syn::Error::new(
                flag.span(),
                unknown(
                    "word after a risk",
                    &flag.to_string(),
                    &[kw::IDEMPOTENT],
                    &format!("`{}` or `,`", kw::IDEMPOTENT),
                ),
            ));
        }
        idempotent = true;
    }
    let entry = Entry {
        name: unraw(&name.to_string()).to_string(),
        loc: spans.loc(name.span()),
        risk: risk.to_string(),
        risk_loc: spans.loc(risk.span()),
        idempotent,
    };
    Ok((name, entry))
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    #[test]
    fn reads_modules_and_their_risk_maps() {
        let p = parse(quote! {
            /// Docs.
            pub mod everything from "../mcp/everything.json" {
                echo: read,
                gzip_file_as_resource: external idempotent,
                r#type: read,
            }
            mod other from "other.json" {}
        })
        .unwrap();
        assert_eq!(p.modules.len(), 2);
        let (syn, ir) = &p.modules[0];
        assert_eq!(syn.attrs.len(), 1);
        assert_eq!((ir.name.as_str(), ir.path.as_str()), ("everything", "../mcp/everything.json"));
        let entries: Vec<(&str, &str, bool)> =
            ir.entries.iter().map(|e| (e.name.as_str(), e.risk.as_str(), e.idempotent)).collect();
        assert_eq!(
            entries,
            [("echo", "read", false), ("gzip_file_as_resource", "external", true), ("type", "read", false)]
        );
        assert!(p.modules[1].1.entries.is_empty());
    }

    fn error(tokens: proc_macro2::TokenStream) -> String {
        parse(tokens).err().map(|e| e.to_string()).unwrap_or_default()
    }

    #[test]
    fn syntax_errors_say_what_was_expected() {
        assert!(error(quote!()).starts_with("`mcp_tools!` is empty"));
        assert!(error(quote!(pub everything)).starts_with("expected `pub mod name from"));
        assert!(
            error(quote!(mod everything "x.json" {}))
                .starts_with("expected `from \"path/to/snapshot.json\"` after `mod everything`")
        );
        assert!(error(quote!(mod everything at "x.json" {})).starts_with("expected `from"));
        assert_eq!(
            error(quote!(mod e from "x.json" { echo })),
            "expected `echo: risk`, the risk one of read | reversible | external | irreversible"
        );
        assert_eq!(
            error(quote!(mod e from "x.json" { echo: read idempotnet })),
            "unknown word after a risk `idempotnet`; did you mean `idempotent`? expected `idempotent` or `,`"
        );
    }
}
