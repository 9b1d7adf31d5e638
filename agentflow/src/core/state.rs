//! The state a graph works on, and the typed partial updates nodes return.
//!
//! Implement [`State`] with `#[derive(State)]`; the derive generates the
//! update type, one setter per field, and the reducer calls.

use std::fmt::Debug;

use serde::Serialize;
use serde::de::DeserializeOwned;

/// A set of state fields, one bit per field in declaration order.
///
/// `#[derive(State)]` supports at most 64 fields per state struct.
pub type FieldMask = u64;

/// How the value a node writes into a field is merged with the value there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ReducerKind {
    /// The new value replaces the old one (the default).
    Overwrite,
    /// `Vec<T>`: the new items are appended.
    Append,
    /// Numbers: the new value is added.
    Add,
    /// Maps: keys are inserted or replaced.
    Merge,
    /// Message lists: appended, but a message with an id already present replaces it.
    Messages,
    /// A user function `fn(&mut T, T)`.
    Custom,
}

impl ReducerKind {
    /// Whether two writes to the field in one super-step conflict.
    pub const fn is_overwrite(self) -> bool {
        matches!(self, ReducerKind::Overwrite)
    }
}

/// One field of a [`State`], as the derive describes it.
///
/// Made with [`Field::new`] and the marks [`Field::personal`] and [`Field::credential`];
/// new marks may be added.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Field {
    /// The field's name.
    pub name: &'static str,
    /// How writes to it are merged.
    pub reducer: ReducerKind,
    /// The field's Rust type as written in the struct, without whitespace
    /// (`Vec<String>`, `Option<u32>`). Graph descriptions carry it, so a
    /// tool without the graph's types (the `agentflow` command-line tool)
    /// can refuse an update the state's types could not read back.
    pub ty: &'static str,
    /// The field holds personal data (`#[state(pii)]`): it is masked as `•••` for anyone
    /// without [`Operation::SeePersonalData`](crate::access::Operation::SeePersonalData).
    pub personal: bool,
    /// The field may hold values that look like credentials (`#[state(credential)]`): the
    /// credential scan lets them through, and they are stored only by a store that seals
    /// payloads.
    pub credential: bool,
}

impl Field {
    /// A field with no marks.
    pub const fn new(name: &'static str, reducer: ReducerKind, ty: &'static str) -> Self {
        Field { name, reducer, ty, personal: false, credential: false }
    }

    /// The same field, marked as personal data.
    pub const fn personal(mut self) -> Self {
        self.personal = true;
        self
    }

    /// The same field, marked as allowed to hold credential-like values.
    pub const fn credential(mut self) -> Self {
        self.credential = true;
        self
    }
}

/// The state of a graph: a struct whose fields each have a reducer.
///
/// Derive it with `#[derive(State)]`; a hand-written impl must keep
/// [`State::FIELDS`] in the same order as the bits of [`Update::touched`].
pub trait State: Clone + Debug + Send + Sync + Serialize + DeserializeOwned + 'static {
    /// The typed partial update nodes return: only the fields they set.
    /// Stored as JSON with the fields set; a field set to a value written as
    /// `null` (an `Option` field cleared with `None`) reads back as set to
    /// it, not as left alone (`null` for a field whose type has no null reads
    /// as not set).
    type Update: Update;
    /// The schema version (`#[state(version = N)]`, default 1). Stored
    /// checkpoints of another version are refused unless migrated.
    const VERSION: u32;
    /// The fields, in declaration order.
    const FIELDS: &'static [Field];
    /// The Rust name of the state type, for messages.
    const NAME: &'static str;

    /// Merges `update` into `self` through each field's reducer.
    fn apply(&mut self, update: Self::Update);

    /// An empty update; chain setters on it: `Ticket::update().intent(i)`.
    fn update() -> Self::Update {
        Self::Update::default()
    }

    /// The mask of fields whose reducer is [`ReducerKind::Overwrite`].
    fn overwrite_mask() -> FieldMask {
        Self::FIELDS.iter().enumerate().filter(|(_, f)| f.reducer.is_overwrite()).fold(0, |m, (i, _)| m | (1 << i))
    }

    /// The names of the fields in `mask`, in declaration order.
    fn field_names(mask: FieldMask) -> Vec<&'static str> {
        Self::FIELDS.iter().enumerate().filter(|(i, _)| mask & (1 << i) != 0).map(|(_, f)| f.name).collect()
    }
}

/// A partial update of a [`State`]: the fields a node set, nothing else.
pub trait Update: Default + Clone + Debug + Send + Sync + Serialize + DeserializeOwned + 'static {
    /// The fields this update sets, one bit per field in declaration order.
    fn touched(&self) -> FieldMask;

    /// Whether the update sets no field.
    fn is_empty(&self) -> bool {
        self.touched() == 0
    }

    /// Unsets the marked fields (`#[state(pii)]`, `#[state(credential)]`) among `names`: what
    /// an event shows an actor who may not see them. The derive implements it; the default
    /// unsets none.
    #[doc(hidden)]
    fn __clear_fields(&mut self, _names: &[&str]) {}
}
