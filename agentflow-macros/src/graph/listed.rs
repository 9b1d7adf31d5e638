//! The allow-list check rustc resolves: every `cx.run_tool(P, ..)` in a
//! node's body is rewritten so `P`'s type must be one of the types of the
//! node's `tools = [..]`. The text check in `check` gives the nicer message
//! for the common case; this one also sees through `use` (a `use
//! other::echo;` in the body names another tool than a listed `this::echo`).

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::visit_mut::VisitMut;

use crate::keywords::body;

/// Wraps the tool argument of each `run_tool` call in `block`.
pub fn check_run_tool_calls(block: &mut syn::Block, node: &str, tools: &[syn::Path]) {
    let mut list = quote!(());
    for t in tools.iter().rev() {
        list = quote!((&#t, #list));
    }
    ListedCalls { node, list }.visit_block_mut(block);
}

struct ListedCalls<'a> {
    node: &'a str,
    list: TokenStream,
}

impl VisitMut for ListedCalls<'_> {
    fn visit_expr_method_call_mut(&mut self, call: &mut syn::ExprMethodCall) {
        syn::visit_mut::visit_expr_method_call_mut(self, call);
        if call.method != body::RUN_TOOL {
            return;
        }
        let Some(first) = call.args.first_mut() else { return };
        let syn::Expr::Path(p) = first else { return };
        if p.qself.is_some() {
            return;
        }
        let span = p.span();
        let message = format!("tool `{{Self}}` is not in the `tools` list of node `{}`", self.node);
        let list = &self.list;
        // The helpers come from the macro (so lints of the caller's code skip them); the call
        // is spanned at the tool, where rustc reports a tool that is not listed.
        let call = quote_spanned! {span=> __agentflow_listed(&#list, #p) };
        let wrapped = quote! {{
            #[diagnostic::on_unimplemented(
                message = #message,
                label = "not a tool this node lists",
                note = "a node calls only the tools of its `#[node(tools = [..])]`: add this tool there \
                        (a `use` in the body that names another tool of the same name does not make it listed)"
            )]
            trait __AgentflowListedIn<L, I> {}
            #[diagnostic::do_not_recommend]
            impl<'a, H, T> __AgentflowListedIn<(&'a H, T), ()> for H {}
            #[diagnostic::do_not_recommend]
            impl<'a, X, H, T, I> __AgentflowListedIn<(&'a H, T), (I,)> for X where X: __AgentflowListedIn<T, I> {}
            fn __agentflow_listed<L, I, P: __AgentflowListedIn<L, I>>(_: &L, tool: P) -> P {
                tool
            }
            #call
        }};
        *first = syn::Expr::Verbatim(wrapped);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewritten(block: &str, tools: &[&str]) -> String {
        let mut block: syn::Block = syn::parse_str(block).unwrap();
        let tools: Vec<syn::Path> = tools.iter().map(|t| syn::parse_str(t).unwrap()).collect();
        check_run_tool_calls(&mut block, "work", &tools);
        quote!(#block).to_string()
    }

    #[test]
    fn each_run_tool_call_checks_its_tool_against_the_listed_types() {
        let out =
            rewritten("{ cx.run_tool(echo, a); async { cx.run_tool(beta::echo, b) }; }", &["alpha::echo", "b::x"]);
        // Both calls, the nested one too, with the list as a chain of references.
        assert_eq!(out.matches("__agentflow_listed (& (& alpha :: echo , (& b :: x , ())) ,").count(), 2, "{out}");
        assert!(out.contains(", echo)"), "{out}");
        assert!(out.contains(", beta :: echo)"), "{out}");
        assert!(out.contains("not in the `tools` list of node `work`"), "{out}");
    }

    #[test]
    fn other_calls_and_non_path_tools_are_left_alone() {
        let block = "{ cx.subgraph(echo, a); cx.run_tool(make(), a); cx.run_tool(<T as X>::Y, a); }";
        let out = rewritten(block, &["echo"]);
        assert!(!out.contains("__agentflow_listed"), "{out}");
    }
}
