//! Built-in reducers: how a field merges the values nodes write into it.
//!
//! `#[derive(State)]` checks at compile time that each field's reducer fits its
//! type through these traits; a mismatch (`append` on a `String`) points at
//! the attribute and says which types the reducer accepts.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasher, Hash};

/// Fields with `#[reduce(append)]`: the written items are appended.
#[diagnostic::on_unimplemented(
    message = "reducer `append` does not fit a field of type `{Self}`",
    label = "`append` needs a `Vec<T>` field",
    note = "use `#[reduce(add)]` for numbers, `#[reduce(merge)]` for maps, or no `#[reduce]` to overwrite"
)]
pub trait Append {
    /// Appends `other` to `self`.
    fn append(&mut self, other: Self);
}

impl<T> Append for Vec<T> {
    fn append(&mut self, mut other: Self) {
        Vec::append(self, &mut other);
    }
}

/// Fields with `#[reduce(add)]`: the written value is added.
#[diagnostic::on_unimplemented(
    message = "reducer `add` does not fit a field of type `{Self}`",
    label = "`add` needs a number field (integers or floats)",
    note = "use `#[reduce(append)]` for `Vec<T>`, `#[reduce(merge)]` for maps, or no `#[reduce]` to overwrite"
)]
pub trait Add {
    /// Adds `other` to `self`.
    fn add(&mut self, other: Self);
}

macro_rules! impl_add {
    (saturating: $($t:ty)*) => {$(
        impl Add for $t {
            fn add(&mut self, other: Self) {
                // Overflow saturates instead of panicking: a counter in a long
                // run must not bring the executor down.
                *self = self.saturating_add(other);
            }
        }
    )*};
    (float: $($t:ty)*) => {$(
        impl Add for $t {
            fn add(&mut self, other: Self) {
                *self += other;
            }
        }
    )*};
}
impl_add!(saturating: u8 u16 u32 u64 u128 usize i8 i16 i32 i64 i128 isize);
impl_add!(float: f32 f64);

/// Fields with `#[reduce(merge)]`: written keys are inserted or replaced.
#[diagnostic::on_unimplemented(
    message = "reducer `merge` does not fit a field of type `{Self}`",
    label = "`merge` needs a map field (`HashMap<K, V>` or `BTreeMap<K, V>`)",
    note = "use `#[reduce(append)]` for `Vec<T>`, `#[reduce(add)]` for numbers, or no `#[reduce]` to overwrite"
)]
pub trait Merge {
    /// Inserts every entry of `other`, replacing existing keys.
    fn merge(&mut self, other: Self);
}

impl<K: Hash + Eq, V, H: BuildHasher> Merge for HashMap<K, V, H> {
    fn merge(&mut self, other: Self) {
        self.extend(other);
    }
}

impl<K: Ord, V> Merge for BTreeMap<K, V> {
    fn merge(&mut self, other: Self) {
        self.extend(other);
    }
}

/// Something with a stable identity, so a newer version can replace it: the
/// identity the `#[reduce(messages)]` reducer matches on. Implement it for
/// your own item type to use that reducer; it is implemented for
/// [`Message`](crate::core::message::Message).
#[diagnostic::on_unimplemented(
    message = "`{Self}` has no id: it does not implement `HasId`",
    label = "needed by `#[reduce(messages)]`, which replaces items by id",
    note = "implement `HasId` for `{Self}`, or use `#[reduce(append)]` to append items without ids"
)]
pub trait HasId {
    /// The identity.
    fn id(&self) -> &str;
}

/// Fields with `#[reduce(messages)]`: appended, but an item whose id is
/// already present replaces the old one in place.
#[diagnostic::on_unimplemented(
    message = "reducer `messages` does not fit a field of type `{Self}`",
    label = "`messages` needs a `Vec<T>` whose items implement `HasId` (e.g. `Vec<Message>`)",
    note = "use `#[reduce(append)]` to append items without ids"
)]
pub trait Messages {
    /// Appends `other`, replacing items with the same id.
    fn merge_messages(&mut self, other: Self);
}

// Reported as "`messages` does not fit `Vec<String>`" rather than as the
// nested "`String: HasId` is not satisfied".
#[diagnostic::do_not_recommend]
impl<T: HasId> Messages for Vec<T> {
    fn merge_messages(&mut self, other: Self) {
        for item in other {
            match self.iter().position(|old| old.id() == item.id()) {
                Some(i) => self[i] = item,
                None => self.push(item),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    struct M(&'static str, u32);
    impl HasId for M {
        fn id(&self) -> &str {
            self.0
        }
    }

    #[test]
    fn messages_replace_same_id_in_place() {
        let mut v = vec![M("a", 1), M("b", 1)];
        v.merge_messages(vec![M("a", 2), M("c", 1)]);
        assert_eq!(v, vec![M("a", 2), M("b", 1), M("c", 1)]);
    }

    #[test]
    fn add_saturates_integers() {
        let mut x = u8::MAX - 1;
        Add::add(&mut x, 5);
        assert_eq!(x, u8::MAX);
        let mut f = 1.5f64;
        Add::add(&mut f, 1.0);
        assert_eq!(f, 2.5);
    }

    #[test]
    fn merge_replaces_keys() {
        let mut m = BTreeMap::from([(1, "a"), (2, "b")]);
        Merge::merge(&mut m, BTreeMap::from([(2, "c"), (3, "d")]));
        assert_eq!(m, BTreeMap::from([(1, "a"), (2, "c"), (3, "d")]));
    }
}
