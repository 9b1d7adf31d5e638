//! `Secret<T>`: a secret carried by its reference only.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;
use std::str::FromStr;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};

use super::error::SecretError;
use super::exposed::Exposed;
use super::reference::SecretRef;
use super::render::SECRET_REF_KEY;
use super::store::SecretStore;

/// A secret of type `T` (a `String` unless said otherwise), held by its reference. Made only
/// from a reference, never from a value; stored as `{"secretRef": "env:OPENAI_KEY"}`; printed
/// as `•••(env:OPENAI_KEY)`. Resolve it where it is used:
///
/// ```
/// use agentflow::secret::{EnvSecrets, Secret, Secrets};
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let key: Secret = Secret::reference("env:AGENTFLOW_DOC_KEY")?;
/// assert_eq!(format!("{key:?}"), "•••(env:AGENTFLOW_DOC_KEY)");
/// assert_eq!(serde_json::to_string(&key)?, r#"{"secretRef":"env:AGENTFLOW_DOC_KEY"}"#);
/// // SAFETY of the example: no other thread reads the environment.
/// unsafe { std::env::set_var("AGENTFLOW_DOC_KEY", "s3cr3t") };
/// let value = key.resolve(&Secrets::new().with(EnvSecrets::only(["AGENTFLOW_DOC_KEY"]))).await?;
/// assert_eq!(value.expose(), "s3cr3t");
/// assert_eq!(format!("{value:?}"), "•••");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
///
/// In a `#[derive(State)]` struct a `Secret` field keeps the overwrite reducer (a reducer that
/// combines values does not compile for it).
pub struct Secret<T = String> {
    reference: SecretRef,
    ty: PhantomData<fn() -> T>,
}

impl<T> Secret<T> {
    /// The secret named by `reference` (`scheme:name`).
    pub fn reference(reference: &str) -> Result<Self, SecretError> {
        SecretRef::parse(reference).map(Self::from_ref)
    }

    /// The secret named by a parsed reference.
    pub fn from_ref(reference: SecretRef) -> Self {
        Secret { reference, ty: PhantomData }
    }

    /// Its reference.
    pub fn secret_ref(&self) -> &SecretRef {
        &self.reference
    }

    /// Reads the secret from `store` and parses it as `T`.
    pub async fn resolve(&self, store: &(impl SecretStore + ?Sized)) -> Result<Exposed<T>, SecretError>
    where
        T: FromStr,
    {
        let text = store.get(&self.reference).await?;
        text.expose()
            .parse::<T>()
            .map(Exposed::new)
            .map_err(|_| SecretError::Parse { reference: self.reference.to_string(), ty: std::any::type_name::<T>() })
    }
}

impl<T> Clone for Secret<T> {
    fn clone(&self) -> Self {
        Secret { reference: self.reference.clone(), ty: PhantomData }
    }
}

impl<T> PartialEq for Secret<T> {
    fn eq(&self, other: &Self) -> bool {
        self.reference == other.reference
    }
}

impl<T> Eq for Secret<T> {}

impl<T> std::hash::Hash for Secret<T> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.reference.hash(state);
    }
}

impl<T> fmt::Debug for Secret<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "•••({})", self.reference)
    }
}

impl<T> fmt::Display for Secret<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "•••({})", self.reference)
    }
}

impl<T> serde::Serialize for Secret<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(1))?;
        map.serialize_entry(SECRET_REF_KEY, self.reference.as_str())?;
        map.end()
    }
}

impl<'de, T> serde::Deserialize<'de> for Secret<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(RefVisitor(PhantomData))
    }
}

/// Reads exactly `{"secretRef": "scheme:name"}`.
struct RefVisitor<T>(PhantomData<fn() -> T>);

impl<'de, T> Visitor<'de> for RefVisitor<T> {
    type Value = Secret<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(r#"a secret reference {"secretRef": "scheme:name"} (a secret is never given by value)"#)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found: Option<SecretRef> = None;
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            if key != SECRET_REF_KEY {
                return Err(de::Error::custom(format_args!(
                    "unexpected key `{key}` in a secret: only `{SECRET_REF_KEY}` is allowed (a secret is never given by value)"
                )));
            }
            if found.is_some() {
                return Err(de::Error::duplicate_field(SECRET_REF_KEY));
            }
            let text: Cow<'de, str> = map.next_value()?;
            found = Some(SecretRef::parse(&text).map_err(de::Error::custom)?);
        }
        found.map(Secret::from_ref).ok_or_else(|| de::Error::missing_field(SECRET_REF_KEY))
    }
}

impl<T> schemars::JsonSchema for Secret<T> {
    fn schema_name() -> Cow<'static, str> {
        "SecretRef".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "object",
            "description": "A reference to a secret, `scheme:name` (for example `env:OPENAI_KEY`); never the secret's value.",
            "properties": {
                "secretRef": { "type": "string", "pattern": "^[a-z][a-z0-9_-]*:[^/\\\\]+$" }
            },
            "required": ["secretRef"],
            "additionalProperties": false
        })
    }
}
