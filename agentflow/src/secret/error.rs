//! What can go wrong reading or writing a secret. No message ever holds a secret's value.

/// Resolving, parsing or storing a secret failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SecretError {
    /// The text is not a reference `scheme:name`.
    #[error(
        "`{reference}` is not a secret reference: write `scheme:name` (for example `env:OPENAI_KEY` or \
         `file:github-token`), with a scheme of lowercase letters and digits and a name without `/`, `\\` or \
         control characters"
    )]
    BadReference {
        /// The text given (a reference, not a value).
        reference: String,
    },
    /// No store is registered for the reference's scheme.
    #[error(
        "no secret store for scheme `{scheme}` (reference `{reference}`); register one with \
         `Secrets::new().with(\"{scheme}\", store)`"
    )]
    UnknownScheme {
        /// The scheme.
        scheme: String,
        /// The reference.
        reference: String,
    },
    /// The store has no secret under this reference.
    #[error("secret `{reference}` is not set: {hint}")]
    Missing {
        /// The reference.
        reference: String,
        /// Where it should have been (an environment variable, a file).
        hint: String,
    },
    /// The store does not give out this secret: its name is not among the ones the
    /// application listed (for example [`EnvSecrets::only`](super::EnvSecrets::only)).
    #[error(
        "secret `{reference}` is not one this application gives out; list its name where the store is made \
         (for example `EnvSecrets::only([..])`) if the graph may use it"
    )]
    NotAllowed {
        /// The reference.
        reference: String,
    },
    /// The secret's text does not parse as the type asked for.
    #[error("secret `{reference}` does not parse as `{ty}`; store it in that type's text form")]
    Parse {
        /// The reference.
        reference: String,
        /// The type asked for.
        ty: &'static str,
    },
    /// The store cannot be written.
    #[error(
        "the secret store for scheme `{scheme}` is read-only; put run-time secrets into a writable one such as `FileSecrets`"
    )]
    ReadOnly {
        /// The scheme.
        scheme: String,
    },
    /// Reading or writing the store's backing files failed.
    #[error("secret `{reference}`: {source}; check the secret directory exists and this process may read and write it")]
    Io {
        /// The reference.
        reference: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}
