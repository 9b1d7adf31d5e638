//! The release of a `#[graph(id = .., version = .., migrate(..))]`: its locks read and checked,
//! then the tokens: the `Release` constant handed to `with_release`, one `include_bytes!` per
//! lock read (so editing a lock rebuilds the graph), the `AGENTFLOW_LOCK` variable tracked, and
//! the generated `agentflow_graph_lock` test. A graph declaring neither `id` nor `version` reads
//! no file and gets none of these.

use std::path::PathBuf;

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};

use super::check::release::{check_release, shape, valid_id};
use super::ir::{END, ToolTarget};
use super::lock::{Locks, read_locks, shape_json};
use super::parse::Parsed;
use crate::diag::Diagnostics;
use crate::keywords::{graph as graph_kw, migrate as kw};

/// What the expansion of a released graph needs.
pub struct Prepared {
    /// `id`, or the module's name.
    id: String,
    /// `<locks>`, absolute: the runtime writes `<locks>/<id>/v<N>.lock`.
    root: PathBuf,
    locks: Locks,
    /// The `nodes` JSON of the lock.
    nodes: String,
}

/// Reads the locks of a released graph and runs its rules into `diags`; `None` for a graph
/// that declares neither `id` nor `version` (which only has its stray release arguments checked).
pub fn prepare(p: &Parsed, diags: &mut Diagnostics) -> Option<Prepared> {
    let rel = &p.release;
    if !rel.is_released() {
        check_release(&p.ir, rel, &Locks::default(), false, diags);
        return None;
    }
    let rewriting = std::env::var(kw::LOCK_ENV).is_ok_and(|v| v == kw::LOCK_WRITE);
    let id = rel.id.as_ref().map_or_else(|| p.ir.name.clone(), |i| i.0.clone());
    let root = crate::source_path::resolve(rel.locks.as_ref().map_or(graph_kw::DEFAULT_LOCKS, |l| l.0.as_str()));
    let locks = if rel.version() > 0 && valid_id(&id) {
        read_locks(root.join(&id), &id, rel.version())
    } else {
        Locks::default()
    };
    check_release(&p.ir, rel, &locks, rewriting, diags);
    let nodes = shape_json(&shape(&p.ir));
    Some(Prepared { id, root, locks, nodes })
}

/// `compile(..)` with the release recorded: `with_release(compile(..), RELEASE)`.
pub fn wrap(compiled: TokenStream, release: Option<&Prepared>) -> TokenStream {
    match release {
        Some(_) => quote!(::agentflow::__private::with_release(#compiled, __AGENTFLOW_RELEASE)),
        None => compiled,
    }
}

/// The items a released graph adds to its module: the `Release` constant, the lock tracking,
/// and (when the graph compiles) the generated test.
pub fn items(p: &Parsed, release: &Prepared, has_errors: bool) -> TokenStream {
    let rel = &p.release;
    let private = quote!(::agentflow::__private);
    let migrations = rel.migrations.iter().zip(&p.release_syn.args).map(|(m, fns)| {
        let from = m.from;
        let nodes = m.nodes.iter().map(|(a, b)| {
            let (a, b) = (&a.name, if b.name == END { END } else { b.name.as_str() });
            quote!((#a, #b))
        });
        let tools = m.tools.iter().map(|(a, b)| {
            let a = &a.name;
            match b {
                ToolTarget::Rename(b) => {
                    let b = &b.name;
                    quote!((#a, #private::ToolMigration::Rename(#b)))
                }
                ToolTarget::Cancel => quote!((#a, #private::ToolMigration::Cancel)),
            }
        });
        let args = m.args.iter().zip(fns).map(|((t, _), f)| {
            let t = &t.name;
            match f {
                // Spanned at the path, so a fn of the wrong type is reported there.
                Some(f) => {
                    let span = syn::spanned::Spanned::span(f);
                    let map = quote_spanned!(span=> #private::ArgsMigration::Map(#f));
                    quote!((#t, #map))
                }
                None => quote!((#t, #private::ArgsMigration::Cancel)),
            }
        });
        quote!(#private::GraphMigration::new(#from, &[#(#nodes),*], &[#(#tools),*], &[#(#args),*]))
    });
    let (id, version, nodes) = (&release.id, rel.version(), &release.nodes);
    let root = release.root.display().to_string();
    let reads = release.locks.files.iter().filter(|f| f.readable).map(|f| {
        let path = f.path.display().to_string();
        quote!(
            const _: &[u8] = ::core::include_bytes!(#path);
        )
    });
    let env = kw::LOCK_ENV;
    let test = (!has_errors).then(|| {
        quote! {
            /// Compares the graph with its committed locks (`AGENTFLOW_LOCK=write` writes the
            /// lock of its version instead): `agentflow graphs check`, `agentflow graphs lock`.
            #[cfg(test)]
            #[test]
            fn agentflow_graph_lock() {
                if let ::core::result::Result::Err(e) = ::agentflow::release::check_lock(&graph()) {
                    ::core::panic!("{e}")
                }
            }
        }
    });
    quote! {
        #[doc(hidden)]
        #[allow(dead_code)]
        const __AGENTFLOW_RELEASE: #private::Release =
            #private::Release::new(#id, #version, &[#(#migrations),*], #nodes, #root);
        #(#reads)*
        const _: ::core::option::Option<&str> = ::core::option_env!(#env);
        #test
    }
}
