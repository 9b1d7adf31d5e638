//! `mcp_tools!` IR -> tokens: per module, the snapshot embedded, `connect`, and per tool a unit
//! struct implementing `agentflow::tool::Tool` with its argument structs.

use std::path::Path;

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};

use super::ir::{Body, Field, ModuleIr, SnapTool, StructDef, Ty};
use super::names::ident_text;
use super::parse::{ModuleSyn, parse};
use super::schema::read_snapshot;
use crate::diag::{Diagnostics, combine};
use crate::source_path::resolve;

pub fn mcp_tools(input: TokenStream) -> TokenStream {
    let parsed = match parse(input) {
        Ok(p) => p,
        Err(e) => return e.to_compile_error(),
    };
    let mut diags = Diagnostics::default();
    let mut unreadable = None;
    let mut out = TokenStream::new();
    for (syn, ir) in &parsed.modules {
        let file = resolve(&ir.path);
        let tools = std::fs::read(&file).map_err(|e| format!("cannot read it: {e}")).and_then(|b| read_snapshot(&b));
        match tools {
            Ok(tools) => {
                super::check::check_all(ir, &tools, &mut diags);
                out.extend(module(syn, ir, &tools, &file));
            }
            Err(e) => {
                let message = format!("the MCP snapshot `{}` ({}) cannot be used: {e}", ir.path, file.display());
                combine(&mut unreadable, syn::Error::new(syn.path.span(), message));
            }
        }
    }
    let mut tokens = parsed.spans.render(diags, unreadable).map(|e| e.to_compile_error()).unwrap_or_default();
    tokens.extend(out);
    tokens
}

/// An identifier for `name`, raw where it is a keyword.
fn ident(name: &str, span: Span) -> syn::Ident {
    match ident_text(name).strip_prefix("r#") {
        Some(raw) => syn::Ident::new_raw(raw, span),
        None => syn::Ident::new(&ident_text(name), span),
    }
}

fn module(syn: &ModuleSyn, ir: &ModuleIr, tools: &[SnapTool], file: &Path) -> TokenStream {
    let ModuleSyn { attrs, vis, ident: mod_ident, .. } = syn;
    let server = &ir.name;
    let file_text = file.display().to_string();
    let default_doc = (!attrs.iter().any(|a| a.path().is_ident("doc"))).then(|| {
        let doc = format!("The tools of the MCP server `{server}`, typed from the snapshot `{}`.", ir.path);
        quote!(#[doc = #doc])
    });
    let snapshot_doc =
        format!("The snapshot `{}`, as compiled in: `connect` compares the live server with it.", ir.path);
    let connect_doc = format!(
        "Starts or reaches the MCP server `{server}`, and refuses it if its tools drifted from the snapshot \
         `{}` (`McpError::Drift` names each change). Hand the client to `App::mcp`.",
        ir.path
    );
    let items: Vec<TokenStream> = tools
        .iter()
        .map(|t| {
            let entry = syn.entry_idents.iter().zip(&ir.entries).find(|(_, e)| e.name == t.rust);
            let span = entry.map_or_else(Span::call_site, |(i, _)| i.span());
            let risk = entry.map(|(_, e)| (e.risk.as_str(), e.idempotent));
            tool(t, server, span, risk)
        })
        .collect();
    let idents = tools.iter().map(|t| ident(&t.rust, Span::call_site()));
    quote! {
        #(#attrs)*
        #default_doc
        #vis mod #mod_ident {
            // Every tool of the snapshot is generated; a program uses those its nodes list.
            #![allow(dead_code)]
            /// The server's name: the module's, as `App::mcp` knows the connection.
            pub const SERVER: &str = #server;
            #[doc = #snapshot_doc]
            pub const SNAPSHOT: &[u8] = ::core::include_bytes!(#file_text);
            #[doc = #connect_doc]
            pub async fn connect(
                transport: ::agentflow::mcp::McpTransport,
            ) -> ::core::result::Result<::agentflow::mcp::McpClient, ::agentflow::mcp::McpError> {
                ::agentflow::mcp::McpClient::connect(SERVER, SNAPSHOT, transport).await
            }
            /// Every tool of the server's snapshot.
            pub const TOOLS: &[&dyn ::agentflow::tool::Tool] = &[#(&#idents),*];
            #(#items)*
        }
    }
}

/// One tool: its unit struct, argument structs and trait impls. `risk` is `None` for a tool
/// the call gave no class (an error is reported; it expands as irreversible meanwhile).
fn tool(t: &SnapTool, server: &str, span: Span, risk: Option<(&str, bool)>) -> TokenStream {
    let item = ident(&t.rust, span);
    let args = format_ident!("{}", t.args);
    let (risk_name, idempotent) = risk.unwrap_or(("irreversible", false));
    let risk_variant = match risk_name {
        "read" => quote!(Read),
        "reversible" => quote!(Reversible),
        "external" => quote!(External),
        _ => quote!(Irreversible),
    };
    let doc = tool_doc(t, server, risk_name, idempotent);
    let (name, description, schema) = (&t.name, &t.description, &t.schema);
    let structs = t.types.iter().map(struct_def);
    let private = quote!(::agentflow::__private);
    // Spanned at the name in the risk map, so rustc's "a unit struct with a similar name
    // exists" (for a typo in a node's `tools = [..]`) points there.
    let unit = quote_spanned! {span=>
        #[doc = #doc]
        #[allow(non_camel_case_types)]
        #[derive(::core::clone::Clone, ::core::marker::Copy, ::core::fmt::Debug)]
        pub struct #item;
    };
    quote! {
        #unit
        #(#structs)*

        const _: () = {
            // Parsed and compiled once, on first use.
            static SCHEMA: #private::McpSchema = #private::McpSchema::new(#schema);

            #[automatically_derived]
            #[#private::async_trait]
            impl ::agentflow::tool::Tool for #item {
                fn name(&self) -> &'static str {
                    #name
                }
                fn description(&self) -> &'static str {
                    #description
                }
                fn risk(&self) -> ::agentflow::tool::Risk {
                    ::agentflow::tool::Risk::#risk_variant
                }
                fn idempotent(&self) -> bool {
                    #idempotent
                }
                fn parameters(&self) -> #private::serde_json::Value {
                    ::core::clone::Clone::clone(SCHEMA.value())
                }
                fn validate(
                    &self,
                    args: &#private::serde_json::Value,
                ) -> ::core::result::Result<(), ::agentflow::tool::ArgumentError> {
                    SCHEMA.check::<#args>(args).map(|_| ())
                }
                async fn invoke(
                    &self,
                    args: #private::serde_json::Value,
                    cx: &::agentflow::tool::ToolCx<'_, ::agentflow::tool::AnyDeps>,
                ) -> ::core::result::Result<#private::serde_json::Value, ::agentflow::tool::ToolError> {
                    SCHEMA.check::<#args>(&args)
                        .map_err(|e| ::agentflow::tool::ToolError::Correctable(e.0))?;
                    // The arguments as the caller sent them and the gateway checked (and an
                    // approval bound), not as re-serialised from the struct.
                    #private::mcp_call(cx, SERVER, #name, args).await
                }
            }

            #[automatically_derived]
            impl ::agentflow::saga::ToolArgsOf for #item {
                type Args = #args;
            }

            #[automatically_derived]
            impl #private::ToolDeps for #item {
                type Deps = dyn #private::NoDeps;
                const NAME: &'static str = #name;
            }
        };
    }
}

fn tool_doc(t: &SnapTool, server: &str, risk: &str, idempotent: bool) -> String {
    let mut doc = String::new();
    if !t.description.trim().is_empty() {
        doc.push_str(t.description.trim());
        doc.push_str("\n\n");
    }
    let title = t.title.as_ref().map(|s| format!(" (\"{s}\")")).unwrap_or_default();
    let idem = if idempotent { ", idempotent" } else { "" };
    doc.push_str(&format!(
        "The MCP tool `{}`{title} of the server `{server}`: risk `{risk}`{idem}. Its arguments: [`{}`].",
        t.name, t.args
    ));
    if !t.annotations.is_empty() {
        let said: Vec<String> = t.annotations.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        doc.push_str(&format!(
            "\n\nThe server's annotations: {} (the server's hints, not trusted: this program classes it `{risk}`).",
            said.join(", ")
        ));
    }
    doc
}

fn struct_def(def: &StructDef) -> TokenStream {
    let name = format_ident!("{}", def.name);
    let doc = &def.doc;
    let derives = quote! {
        #[derive(
            ::core::fmt::Debug,
            ::core::clone::Clone,
            ::core::cmp::PartialEq,
            ::agentflow::__private::serde::Serialize,
            ::agentflow::__private::serde::Deserialize
        )]
        #[serde(crate = "::agentflow::__private::serde")]
    };
    match &def.body {
        Body::Map => quote! {
            #[doc = #doc]
            #derives
            #[serde(transparent)]
            pub struct #name(
                /// The arguments, as a JSON object.
                pub ::agentflow::__private::serde_json::Map<::std::string::String, ::agentflow::__private::serde_json::Value>,
            );
        },
        Body::Fields(fields) => {
            let deny = def.deny_unknown.then(|| quote!(#[serde(deny_unknown_fields)]));
            let fields = fields.iter().map(field);
            quote! {
                #[doc = #doc]
                #derives
                #deny
                pub struct #name {
                    #(#fields),*
                }
            }
        }
    }
}

fn field(f: &Field) -> TokenStream {
    let name = ident(&f.rust, Span::call_site());
    let json = &f.json;
    let doc = if f.doc.is_empty() { format!("`{json}`.") } else { f.doc.clone() };
    let ty = ty(&f.ty);
    if f.optional {
        quote! {
            #[doc = #doc]
            #[serde(rename = #json, default, skip_serializing_if = "::core::option::Option::is_none")]
            pub #name: ::core::option::Option<#ty>
        }
    } else {
        quote! {
            #[doc = #doc]
            #[serde(rename = #json)]
            pub #name: #ty
        }
    }
}

fn ty(t: &Ty) -> TokenStream {
    let json = quote!(::agentflow::__private::serde_json);
    match t {
        Ty::String => quote!(::std::string::String),
        Ty::F64 => quote!(f64),
        Ty::I64 => quote!(i64),
        Ty::Bool => quote!(bool),
        Ty::Value => quote!(#json::Value),
        Ty::Map => quote!(#json::Map<::std::string::String, #json::Value>),
        Ty::Vec(inner) => {
            let inner = ty(inner);
            quote!(::std::vec::Vec<#inner>)
        }
        Ty::Struct(name) => {
            let name = format_ident!("{}", name);
            quote!(#name)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keywords_become_raw_identifiers_and_the_rest_plain_ones() {
        assert_eq!(ident("type", Span::call_site()).to_string(), "r#type");
        assert_eq!(ident("self", Span::call_site()).to_string(), "self_");
        assert_eq!(ident("get_sum", Span::call_site()).to_string(), "get_sum");
    }
}
