//! A resolved secret value: masked when printed, read only through an explicit call.

use std::fmt;

/// A secret's value, as [`Secret::resolve`](super::Secret::resolve) answers it. `Debug` prints
/// `•••`; read it with [`Exposed::expose`] at the place it is used (a request header), and do
/// not keep it in a state, an event or a log.
#[derive(Clone, PartialEq, Eq)]
pub struct Exposed<T>(T);

impl<T> Exposed<T> {
    /// Wraps a value read from a secret store.
    pub fn new(value: T) -> Self {
        Exposed(value)
    }

    /// The value. Use it where it is needed and let it go.
    pub fn expose(&self) -> &T {
        &self.0
    }

    /// The value, unwrapped.
    pub fn into_exposed(self) -> T {
        self.0
    }
}

impl<T> fmt::Debug for Exposed<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("•••")
    }
}
