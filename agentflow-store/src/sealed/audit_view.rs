//! The audit chain as a caller of a sealing store sees it. The wrapped store chains the
//! details as it keeps them (sealed), and [`Store::verify_audit`](crate::Store::verify_audit)
//! checks that chain; the entries a caller reads carry the hashes of the details as written
//! (opened), recomputed on read, so a log read from a sealing store verifies and exports as one
//! read from any other store. A purged entry keeps its stored detail hash (of its sealed form:
//! what it was written as is gone), so purging changes the listed head of the chain. A
//! restored entry reads back with the hashes its dump gave it.

use crate::audit_chain::{detail_hash, is_purged, link};
use crate::record::AuditEntry;

/// Recomputes the detail hashes (but a purged entry's) and the links of `entries`, the log of
/// `thread` in order: over the sealed details for the wrapped store when a dump is restored.
pub(crate) fn rechain(thread: &str, entries: &mut [AuditEntry]) {
    rechain_but(thread, entries, &[]);
}

/// [`rechain`] over the opened details for a caller, but the entries whose `carried` is true
/// (restored ones) keep the hashes they carry.
pub(crate) fn rechain_but(thread: &str, entries: &mut [AuditEntry], carried: &[bool]) {
    let mut prev = String::new();
    for (i, e) in entries.iter_mut().enumerate() {
        if carried.get(i).copied().unwrap_or(false) {
            prev.clone_from(&e.link);
            continue;
        }
        if !is_purged(&e.detail) || e.detail_hash.is_empty() {
            e.detail_hash = detail_hash(&e.detail);
        }
        e.link = link(&prev, thread, e.seq, e.at, &e.actor, &e.kind, &e.detail_hash);
        prev.clone_from(&e.link);
    }
}
