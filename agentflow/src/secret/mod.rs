//! Secrets by reference, and the credential scan on durable writes.
//!
//! A [`Secret<T>`] holds only a reference (`env:OPENAI_KEY`, `file:github-token`): it serialises
//! as `{"secretRef": "env:OPENAI_KEY"}`, prints as `•••(env:OPENAI_KEY)`, and its value is read
//! only when a node or tool resolves it through a [`SecretStore`]. So a state, a tool's arguments
//! or a graph's deps can carry a secret without its value ever reaching the store, the events,
//! the stream, the logs or the command-line tool.
//!
//! Built-in stores: [`EnvSecrets`] (`env:NAME`, read-only), [`FileSecrets`] (`file:NAME`, a
//! directory of 0600 files, writable) and [`Secrets`], a registry that dispatches by scheme. A
//! secret obtained at run time (a token a tool receives) is put into a writable store first,
//! and only the [`SecretRef`] it answers enters the state.
//!
//! Nodes and tools reach secrets through the graph's deps: keep a [`Secrets`] (or any
//! [`SecretStore`]) in the deps struct and call [`Secret::resolve`] with it.
//!
//! Durable runs refuse to store a value that looks like a credential
//! ([`scan_json_text`], [`scan_value`]): the run fails before anything is written, naming the
//! JSON pointer and the kind of credential, never the value. Text stored or shown in clear
//! (a thread's status line) has credential-like parts replaced ([`redact_credentials`]). A URL
//! that may carry a token (a webhook's) is named in audit entries and logs as [`mask_url`]
//! shows it.

mod credential_scan;
mod env;
mod error;
mod exposed;
mod file;
mod mask_url;
mod redact;
mod reference;
mod registry;
mod render;
mod store;
mod value;

pub use credential_scan::{
    CredentialHit, CredentialKind, KEY_PLACEHOLDER, scan_json_text, scan_str, scan_value, scan_value_skipping,
};
pub use env::EnvSecrets;
pub use error::SecretError;
pub use exposed::Exposed;
pub use file::FileSecrets;
pub use mask_url::mask_url;
pub use redact::{describe_decode_error, redact_credentials};
pub use reference::SecretRef;
pub use registry::Secrets;
pub use render::{SECRET_REF_KEY, mask_secret_refs, secret_ref_of};
pub use store::SecretStore;
pub use value::Secret;

#[cfg(test)]
mod tests;
