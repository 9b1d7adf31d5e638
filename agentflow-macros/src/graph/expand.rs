//! Graph IR -> tokens: `goto!` rewritten to checked routes, one wrapper per
//! node, compile-time assertions for the facts only rustc can judge, and the
//! `graph()` constructor.

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::visit_mut::VisitMut;

use super::check::{Checked, check_all};
use super::ir::{END, GraphIr, NodeIr};
use super::parse::{Parsed, is_goto, parse, parse_goto};
use super::resolve::{Resolved, resolve};
use crate::diag::Diagnostics;

/// What a same-step write conflict suggests, by the field's type; the
/// derive records one per field (see `state::expand::reducer_hint`).
pub const HINT_NONE: u8 = 0;
pub const HINT_APPEND: u8 = 1;
pub const HINT_ADD: u8 = 2;
pub const HINT_MERGE: u8 = 3;
pub const HINT_MESSAGES: u8 = 4;

pub fn graph(args: TokenStream, input: TokenStream) -> TokenStream {
    let mut parsed = match parse(args, input) {
        Ok(parsed) => parsed,
        Err(e) => return e.to_compile_error(),
    };
    let resolved = resolve(&parsed.ir);
    let mut diags = Diagnostics::default();
    let checked = check_all(&parsed.ir, &resolved, &mut diags);
    let release = super::expand_release::prepare(&parsed, &mut diags);
    let errors = parsed.spans.render(diags, parsed.errors.take());
    let module = expand(parsed, &resolved, &checked, release.as_ref(), errors.is_some());
    let mut out = errors.map(|e| e.to_compile_error()).unwrap_or_default();
    out.extend(module);
    out
}

/// `#[node]` outside a `#[graph]` module: say where it belongs, keep the fn.
pub fn stray_node(_args: TokenStream, input: TokenStream) -> TokenStream {
    let message = "`#[node]` must be inside a `#[graph(..)]` module: move this fn into the `mod` that carries `#[graph(state = .., start = ..)]`";
    match syn::parse2::<syn::ItemFn>(input.clone()) {
        Ok(mut f) => {
            let err = syn::Error::new(f.sig.ident.span(), message).to_compile_error();
            // Its `goto!`s would each add an error of their own.
            ReplaceGoto(|_: &syn::Macro| quote!(::agentflow::__private::invalid_route())).visit_block_mut(&mut f.block);
            quote!(#err #f)
        }
        Err(_) => {
            let err = syn::Error::new(proc_macro2::Span::call_site(), message).to_compile_error();
            quote!(#err #input)
        }
    }
}

fn expand(
    mut p: Parsed,
    r: &Resolved,
    c: &Checked,
    release: Option<&super::expand_release::Prepared>,
    has_errors: bool,
) -> TokenStream {
    let release_items = release.map(|rel| super::expand_release::items(&p, rel, has_errors));
    let state = p.state.clone();
    let deps = p.deps.clone();
    let mut extra: Vec<TokenStream> = Vec::new();
    let mut specs = Vec::new();
    let fields = quote!(<#state as ::agentflow::State>::FIELDS);
    let state_name = p.ir.state.clone();

    let items = &mut p.module.content.as_mut().expect("parse checked the module is inline").1;
    for (i, (node, ir)) in p.nodes.iter().zip(&p.ir.nodes).enumerate() {
        // Rewrite the body's `goto!`s into checked routes.
        if let syn::Item::Fn(f) = &mut items[node.item] {
            // Routes are typed by the node's own return type when it names
            // one, so a node returning another state's `Step` is reported
            // once, at that return type, and not at every `goto!`.
            let step_state = node.ret_state.as_ref().unwrap_or(&state);
            let workers = &p.nodes;
            ReplaceGoto(|mac: &syn::Macro| route(ir, r, workers, step_state, mac)).visit_block_mut(&mut f.block);
            // The allow-list again, resolved by rustc (after our own errors, none).
            if !has_errors {
                super::listed::check_run_tool_calls(&mut f.block, &ir.name.name, &node.tools);
            }
        }
        // Fields named in `writes` must exist.
        for w in ir.writes.iter().flatten() {
            let span = p.spans.span(w.loc);
            let name = &w.name;
            let msg = format!("node `{}` writes `{name}`, which is not a field of `{state_name}`", ir.name.name);
            extra.push(quote_spanned! {span=>
                const _: () = if !::agentflow::__private::has_field(#fields, #name) { ::core::panic!(#msg) };
            });
        }
        if !r.is_canonical(i, &ir.name.name) {
            // A duplicate: renamed, so rustc does not report it a second time.
            if let syn::Item::Fn(f) = &mut items[node.item] {
                f.sig.ident = format_ident!("__agentflow_duplicate_{}_{}", node.ident, i, span = node.ident.span());
                f.attrs.push(syn::parse_quote!(#[allow(dead_code)]));
            }
            continue;
        }
        if !c.sig_ok[i] {
            continue;
        }
        let wrapper = format_ident!("__agentflow_node_{}", node.ident, span = node.ident.span());
        let ident = &node.ident;
        let mut args = Vec::new();
        for (k, ty) in node.params.iter().enumerate() {
            args.push(if k == 0 {
                quote!(<#ty as ::agentflow::__private::StateParam<'a, #state>>::from_state(state))
            } else if node.payload.as_ref().is_some_and(|p| p.at == k) {
                if node.payload.as_ref().is_some_and(|p| p.by_ref) { quote!(&payload) } else { quote!(payload) }
            } else if node.ctx_param {
                quote!(<#ty as ::agentflow::__private::CtxParam<'a, #deps>>::from_ctx(cx))
            } else {
                quote!(<#ty as ::agentflow::__private::DepsParam<'a, #deps>>::from_deps(::agentflow::__private::deps_of(cx)))
            });
        }
        // A map worker's instance decodes its payload first.
        let decode = node.payload.as_ref().map(|p| {
            let ty = &p.ty;
            let decode =
                quote_spanned!(syn::spanned::Spanned::span(ty)=> ::agentflow::__private::payload_of::<#ty, #deps>(cx));
            quote! {
                let payload = match #decode {
                    ::core::result::Result::Ok(payload) => payload,
                    ::core::result::Result::Err(e) => return ::core::result::Result::Err(e),
                };
            }
        });
        let into = quote_spanned!(node.ret_span=> <_ as ::agentflow::__private::IntoStep<#state>>::into_step(out));
        extra.push(quote! {
            #[doc(hidden)]
            fn #wrapper<'a>(
                state: &'a #state,
                cx: &'a ::agentflow::Ctx<'a, #deps>,
            ) -> ::agentflow::__private::NodeFuture<'a, #state> {
                ::std::boxed::Box::pin(async move {
                    #decode
                    let out = #ident(#(#args),*).await;
                    #into
                })
            }
        });
        let name = &ir.name.name;
        let targets = r.targets[i].iter().map(|&t| t as u32);
        let may_end = r.may_end[i];
        let retry = &node.retry;
        let timeout = match node.timeout_ms {
            Some(ms) => {
                quote!(::core::option::Option::Some(::core::time::Duration::from_millis(#ms)))
            }
            None => quote!(::core::option::Option::None),
        };
        let writes = match &ir.writes {
            Some(ws) => {
                let names = ws.iter().map(|w| &w.name);
                quote!(::core::option::Option::Some(::agentflow::__private::mask_of(#fields, &[#(#names),*])))
            }
            None => quote!(::core::option::Option::None),
        };
        let interrupt = node.interrupt;
        let sleep = node.sleep;
        let parallel = match (&node.payload, node.parallel) {
            (None, _) => quote!(::core::option::Option::None),
            (Some(_), Some(n)) => quote!(::core::option::Option::Some(#n)),
            (Some(_), None) => quote!(::core::option::Option::Some(::agentflow::DEFAULT_PARALLEL)),
        };
        // Each entry spanned at its name: an unknown tool is rustc's
        // "cannot find value" there (with its did-you-mean), and a non-tool
        // is "`x` is not a tool": a trait local to the entry carries the name
        // in its message, which `Tool`'s own message cannot (it would print
        // a plain fn's whole type).
        //
        // A tool that reads deps (`cx: &ToolCx<D>` or `deps: &D`) fits only
        // a graph whose deps are `D`; one that reads none fits any. Checked
        // here, per entry, so the error names the tool and both types.
        let entries = node.tools.iter().map(|t| {
            let span = t.segments.last().map_or_else(proc_macro2::Span::call_site, |s| s.ident.span());
            let t_name = super::parse::path_name(t);
            let msg = format!("`{t_name}` is not a tool");
            let deps_msg = format!(
                "tool `{t_name}` takes `&{{Self}}` as its deps, but node `{}` is in a graph whose deps are `{{D}}`",
                ir.name.name
            );
            let deps_label = "this tool reads `{Self}`, not the graph's `{D}`".to_string();
            quote_spanned! {span=> {
                #[diagnostic::on_unimplemented(
                    message = #deps_msg,
                    label = #deps_label,
                    note = "a tool reaches the graph's deps (`#[graph(deps = ..)]`) through `cx: &ToolCx<Deps>` or `deps: &Deps`; \
                            take the graph's deps type there, or `&ToolCx` alone (or nothing) for a tool that needs no deps"
                )]
                trait ToolDepsFit<D> {}
                #[diagnostic::do_not_recommend]
                impl<D> ToolDepsFit<D> for D {}
                #[diagnostic::do_not_recommend]
                impl<D> ToolDepsFit<D> for dyn ::agentflow::__private::NoDeps {}

                #[diagnostic::on_unimplemented(
                    message = #msg,
                    label = "not a tool",
                    note = "declare tools with `#[tool(risk = read)]` on an `async fn` taking a typed argument struct"
                )]
                trait ListedTool: ::agentflow::tool::Tool {
                    type Deps: ?Sized;
                    const NAME: &'static str;
                }
                #[diagnostic::do_not_recommend]
                impl<T: ::agentflow::tool::Tool + ::agentflow::__private::ToolDeps> ListedTool for T {
                    type Deps = <T as ::agentflow::__private::ToolDeps>::Deps;
                    const NAME: &'static str = <T as ::agentflow::__private::ToolDeps>::NAME;
                }
                const fn __agentflow_listed<T: ListedTool>(
                    tool: &'static T,
                ) -> (&'static dyn ::agentflow::tool::Tool, &'static str)
                where
                    <T as ListedTool>::Deps: ToolDepsFit<#deps>,
                {
                    (tool, <T as ListedTool>::NAME)
                }
                __agentflow_listed(&#t)
            }}
        });
        // The gateway finds a tool by its name: two listed tools of one name
        // (two MCP servers offering `echo`) would run one for the other.
        let n = node.tools.len();
        let mut clashes = Vec::new();
        for j in 0..n {
            for i in 0..j {
                let (a, b) = (super::parse::path_name(&node.tools[i]), super::parse::path_name(&node.tools[j]));
                let span = node.tools[j].segments.last().map_or_else(proc_macro2::Span::call_site, |s| s.ident.span());
                let msg = format!(
                    "node `{}` lists two tools the model would call by one name: `{a}` and `{b}`; \
                     the gateway finds a tool by its name, so one would run in place of the other. \
                     List only one of them in this node (split the work into two nodes), or take one \
                     server's snapshot without that tool (`agentflow mcp snapshot .. --exclude NAME`)",
                    ir.name.name
                );
                clashes.push(quote_spanned! {span=>
                    const _: () = if ::agentflow::__private::same_tool_name(__AGENTFLOW_TOOLS[#i].1, __AGENTFLOW_TOOLS[#j].1) {
                        ::core::panic!(#msg)
                    };
                });
            }
        }
        let picks = (0..n).map(|i| quote!(__AGENTFLOW_TOOLS[#i].0));
        let tools = quote! {{
            const __AGENTFLOW_TOOLS: [(&'static dyn ::agentflow::tool::Tool, &'static str); #n] = [#(#entries),*];
            #(#clashes)*
            const __AGENTFLOW_TOOL_SET: ::agentflow::tool::ToolSet = &[#(#picks),*];
            __AGENTFLOW_TOOL_SET
        }};
        let subgraph_names = ir.subgraphs.iter().map(|g| &g.name);
        specs.push(quote! {
            ::agentflow::__private::NodeSpec {
                name: #name,
                targets: const { &[#(::agentflow::NodeId::new(#targets)),*] },
                may_end: #may_end,
                retry: #retry,
                timeout: #timeout,
                writes: #writes,
                interrupt: #interrupt,
                sleep: #sleep,
                tools: #tools,
                run: #wrapper,
                parallel: #parallel,
                subgraphs: &[#(#subgraph_names),*],
            }
        });
    }
    // Same-step writes must go to fields with a reducer. The fix offered
    // depends on the field's type, which only the derive saw: it records a
    // hint per field, and the assertion picks the message for it.
    for conflict in &c.conflicts {
        let span = p.spans.span(conflict.loc);
        let field = &conflict.field;
        let msg = |fix: &str| {
            if conflict.first == conflict.second {
                format!(
                    "the instances of map worker `{}` always run in the same super-step and each write `{field}`, \
                     which has no reducer, so all but one write would be lost; {fix}",
                    conflict.first
                )
            } else {
                format!(
                    "nodes `{}` and `{}` can run in the same super-step and both write `{field}`, which has no reducer; {fix}",
                    conflict.first, conflict.second
                )
            }
        };
        let worker = conflict.first == conflict.second;
        let reduce = |r: &str| {
            msg(&if worker {
                format!("give `{field}` a reducer that combines the writes in payload order, `#[reduce({r})]`")
            } else {
                format!(
                    "give `{field}` a reducer that combines both writes, `#[reduce({r})]`, or route the nodes to different steps"
                )
            })
        };
        let (append, add, merge, messages) = (reduce("append"), reduce("add"), reduce("merge"), reduce("messages"));
        let none = msg(&if worker {
            format!(
                "no built-in reducer fits the type of `{field}`: combine the writes with `#[reduce(custom = path::to::fn)]`, \
                 or collect one result per instance in a `Vec` field with `#[reduce(append)]`"
            )
        } else {
            format!(
                "no built-in reducer fits the type of `{field}`: combine the writes with `#[reduce(custom = path::to::fn)]`, \
                 let each node write a field of its own, or route the nodes to different steps"
            )
        });
        let (h_append, h_add, h_merge, h_messages) = (HINT_APPEND, HINT_ADD, HINT_MERGE, HINT_MESSAGES);
        extra.push(quote_spanned! {span=>
            const _: () = if ::agentflow::__private::is_overwrite(#fields, #field) {
                const fn hint(hints: &[(&str, u8)], field: &str) -> u8 {
                    let mut i = 0;
                    while i < hints.len() {
                        let (name, want) = (hints[i].0.as_bytes(), field.as_bytes());
                        if name.len() == want.len() {
                            let mut j = 0;
                            while j < name.len() && name[j] == want[j] {
                                j += 1;
                            }
                            if j == name.len() {
                                return hints[i].1;
                            }
                        }
                        i += 1;
                    }
                    0
                }
                match hint(<#state>::__AGENTFLOW_REDUCER_HINTS, #field) {
                    #h_append => ::core::panic!(#append),
                    #h_add => ::core::panic!(#add),
                    #h_merge => ::core::panic!(#merge),
                    #h_messages => ::core::panic!(#messages),
                    _ => ::core::panic!(#none),
                }
            };
        });
    }
    // A write outside the list that resembles a listed name is an error only
    // if that name is a field; otherwise the field assertion above reports the typo.
    for g in &c.guarded {
        let span = p.spans.span(g.loc);
        let (close, msg) = (&g.close, &g.message);
        extra.push(quote_spanned! {span=>
            const _: () = if ::agentflow::__private::has_field(#fields, #close) { ::core::panic!(#msg) };
        });
    }
    let graph_name = p.ir.name.clone();
    let doc = format!("The compiled `{graph_name}` graph, checked at compile time.");
    let body = if has_errors {
        quote!(::core::unreachable!("the graph did not compile"))
    } else {
        let start = r.start.unwrap_or(0) as u32;
        let max_steps = match p.ir.max_steps {
            Some(n) => quote!(::core::option::Option::Some(#n)),
            None => quote!(::core::option::Option::None),
        };
        let fingerprint = fingerprint(&p.ir, &state_name);
        let compiled = super::expand_release::wrap(
            quote! {
                ::agentflow::__private::compile(::agentflow::__private::GraphSpec {
                    name: #graph_name,
                    start: ::agentflow::NodeId::new(#start),
                    max_steps: #max_steps,
                    fingerprint: #fingerprint,
                    nodes: ::std::vec![#(#specs),*],
                })
            },
            release,
        );
        quote! {
            ::agentflow::__private::with_tools_below(
                ::agentflow::__private::erase_deps(
                    #compiled,
                    |deps| deps,
                ),
                __agentflow_tools_below,
            )
        }
    };
    extra.push(quote! {
        #[doc = #doc]
        pub fn graph() -> ::agentflow::CompiledGraph<#state, #deps> {
            #body
        }
    });
    // How deep it delegates, checked against `max_depth`; the children are
    // named as the nodes list them, so an unknown one is rustc's error there.
    let mut children: Vec<&syn::Ident> = Vec::new();
    for g in p.nodes.iter().flat_map(|n| &n.subgraphs) {
        if *g != graph_name && !children.contains(&g) {
            children.push(g);
        }
    }
    // The tools of its subgraphs, at every level, with the graph and node
    // that list them, so the App can configure what guards them (a circuit
    // breaker for a child's tool) and check them before a run starts (a tool
    // the policy may hold for approval needs an owner).
    extra.push(quote! {
        #[doc(hidden)]
        #[allow(dead_code)]
        pub fn __agentflow_tools_below() -> ::std::vec::Vec<::agentflow::__private::ToolAt> {
            #[allow(unused_mut)]
            let mut tools: ::std::vec::Vec<::agentflow::__private::ToolAt> = ::std::vec::Vec::new();
            #(
                tools.extend(::agentflow::__private::tools_at(&#children::graph()));
                tools.extend(#children::__agentflow_tools_below());
            )*
            tools
        }
    });
    let max_depth = p.ir.max_depth.unwrap_or(crate::keywords::graph::DEFAULT_MAX_DEPTH) as usize;
    let depth_doc = format!("How deep `{graph_name}` delegates: 1, plus the deepest of its subgraphs' depths.");
    let name_span = p.module.ident.span();
    extra.push(quote! {
        #[doc(hidden)]
        #[allow(dead_code)]
        pub const SUBGRAPH_TREE: ::agentflow::__private::Chain =
            ::agentflow::__private::chain(#graph_name, &[#(&#children::SUBGRAPH_TREE),*]);
        #[doc = #depth_doc]
        #[allow(dead_code)]
        pub const DELEGATION_DEPTH: usize = SUBGRAPH_TREE.depth();
    });
    extra.push(quote_spanned! {name_span=>
        const _: () = ::agentflow::__private::check_depth(#graph_name, #max_depth, &SUBGRAPH_TREE);
    });
    extra.extend(release_items);
    for tokens in extra {
        items.push(syn::Item::Verbatim(tokens));
    }
    let module = &p.module;
    quote!(#module)
}

/// A stable hash of everything that decides how a stored run continues:
/// the state type, the nodes and their routes and writes.
fn fingerprint(ir: &GraphIr, state: &str) -> String {
    let mut canon = format!("state={state};start={:?};max={:?};", ir.start.as_ref().map(|s| &s.name), ir.max_steps);
    for n in &ir.nodes {
        let goto: Vec<&str> = n.goto.iter().map(|t| t.name.as_str()).collect();
        let writes: Option<Vec<&str>> = n.writes.as_ref().map(|w| w.iter().map(|x| x.name.as_str()).collect());
        canon.push_str(&format!("{}[{}|{:?}];", n.name.name, goto.join(","), writes));
        // Only map workers add to it, so other graphs keep their fingerprint.
        if n.payload.is_some() {
            canon.push_str("payload;");
        }
    }
    // FNV-1a, 64 bit.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in canon.bytes() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// The checked route a `goto!` of `node` becomes; one that failed the checks
/// becomes a stub that type-checks, so it adds no error of its own. The
/// stub still evaluates the update, so the variables it uses stay used.
fn route(
    node: &NodeIr,
    r: &Resolved,
    workers: &[super::parse::NodeSyn],
    state: &syn::Type,
    mac: &syn::Macro,
) -> TokenStream {
    let Ok(args) = parse_goto(mac.tokens.clone()) else {
        return quote!(::agentflow::__private::invalid_route::<#state>());
    };
    let update = match &args.update {
        Some(u) => quote!(#u),
        None => quote!(::core::default::Default::default()),
    };
    let invalid = || {
        let used = args.update.as_ref().map(|u| quote!(let _ = #u;));
        let payloads = args.each.iter().flatten().map(|p| quote!(let _ = #p;));
        quote!({ #used #(#payloads)* ::agentflow::__private::invalid_route::<#state>() })
    };
    let mut ids = Vec::new();
    let mut sends = Vec::new();
    for (t, each) in args.targets.iter().zip(&args.each) {
        let name = t.to_string();
        if !node.goto.iter().any(|g| g.name == name) {
            return invalid();
        }
        if name == END {
            if each.is_some() {
                return invalid();
            }
            continue;
        }
        let Some(&i) = r.index.get(&name) else { return invalid() };
        let payload = workers.get(i).and_then(|w| w.payload.as_ref());
        match (each, payload) {
            (None, None) => ids.push(i as u32),
            (Some(items), Some(p)) => sends.push(send(&node.name.name, &name, i as u32, &p.ty, items)),
            // Reported by the checks.
            _ => return invalid(),
        }
    }
    ids.sort_unstable();
    ids.dedup();
    quote! {
        {
            const __AGENTFLOW_NEXT: &[::agentflow::NodeId] = &[#(::agentflow::NodeId::new(#ids)),*];
            let __agentflow_step = ::agentflow::__private::route::<#state>(__AGENTFLOW_NEXT, #update);
            #(let __agentflow_step = #sends;)*
            __agentflow_step
        }
    }
}

/// `each(step, worker, payloads)` for `each(worker, payloads)` in a `goto!` of
/// `sender`: the payloads must be items of the worker's `#[payload]` type,
/// reported at the payload expression, naming both nodes.
fn send(sender: &str, worker: &str, id: u32, ty: &syn::Type, items: &syn::Expr) -> TokenStream {
    let ty_name = super::parse::type_name(ty);
    let message = format!(
        "`each({worker}, ..)` in node `{sender}` sends payloads of type `{{Self}}`, but `{worker}` takes `{ty_name}`"
    );
    let label = format!("these payloads are `{{Self}}`, not `{ty_name}`");
    let note = format!(
        "map worker `{worker}` declares `#[payload] _: &{ty_name}`; pass a collection or an iterator of `{ty_name}`, e.g. `Vec<{ty_name}>`"
    );
    let span = syn::spanned::Spanned::span(items);
    let checked = quote_spanned! {span=> __agentflow_payloads::<#ty, _>(#items)};
    let payloads = quote! {
        {
            #[diagnostic::on_unimplemented(message = #message, label = #label, note = #note)]
            trait PayloadOf<T> {}
            #[diagnostic::do_not_recommend]
            impl<T> PayloadOf<T> for T {}
            fn __agentflow_payloads<T, I: ::core::iter::IntoIterator>(items: I) -> I::IntoIter
            where
                I::Item: PayloadOf<T>,
            {
                items.into_iter()
            }
            #checked
        }
    };
    // The whole call carries the payloads' span, so a payload type that is
    // not `Payload` is reported there.
    quote_spanned! {span=>
        ::agentflow::__private::each(__agentflow_step, ::agentflow::NodeId::new(#id), #payloads)
    }
}

/// Replaces every `goto!` in a body (as expression or statement) with `.0`'s output.
struct ReplaceGoto<F>(F);

impl<F: FnMut(&syn::Macro) -> TokenStream> VisitMut for ReplaceGoto<F> {
    fn visit_expr_mut(&mut self, expr: &mut syn::Expr) {
        if let syn::Expr::Macro(m) = expr
            && is_goto(&m.mac)
        {
            *expr = syn::Expr::Verbatim((self.0)(&m.mac));
            return;
        }
        syn::visit_mut::visit_expr_mut(self, expr);
    }

    fn visit_stmt_mut(&mut self, stmt: &mut syn::Stmt) {
        if let syn::Stmt::Macro(m) = stmt
            && is_goto(&m.mac)
        {
            *stmt = syn::Stmt::Expr(syn::Expr::Verbatim((self.0)(&m.mac)), m.semi_token);
            return;
        }
        syn::visit_mut::visit_stmt_mut(self, stmt);
    }
}
