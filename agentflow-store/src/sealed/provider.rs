//! Key-encryption keys: the [`KeyProvider`] trait and the providers built in, one reading the
//! keys from an environment variable, one from a file.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine;
use sha2::{Digest, Sha256};

use crate::sealed::cipher::{KEY_LEN, SecretKey};
use crate::sealed::error::SealError;

/// A key-encryption key (KEK): wraps the data keys of threads. Its bytes are wiped from
/// memory when dropped, and `Debug` shows only its id.
#[derive(Clone)]
pub struct Kek {
    id: String,
    pub(crate) key: Arc<SecretKey>,
}

impl std::fmt::Debug for Kek {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kek").field("id", &self.id).finish_non_exhaustive()
    }
}

impl Kek {
    /// A key from its 32 bytes. Its id is derived from them (the first 8 bytes of a SHA-256,
    /// in hex), so the same key has the same id wherever it is loaded from.
    pub fn new(bytes: [u8; KEY_LEN]) -> Self {
        let digest = Sha256::new().chain_update(b"agentflow.kek.id.v1").chain_update(bytes).finalize();
        let id = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
        Kek { id, key: Arc::new(SecretKey::new(bytes)) }
    }

    /// Parses a key written as 64 hex digits or as base64 of 32 bytes; `source_name` names
    /// where it came from in the error.
    pub fn parse(text: &str, source_name: &str) -> Result<Self, SealError> {
        let text = text.trim();
        let bad = |detail: &str| SealError::BadKey { source_name: source_name.to_string(), detail: detail.to_string() };
        let bytes = if text.len() == 2 * KEY_LEN && text.bytes().all(|b| b.is_ascii_hexdigit()) {
            (0..KEY_LEN).map(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16).unwrap_or(0)).collect::<Vec<u8>>()
        } else {
            base64::engine::general_purpose::STANDARD.decode(text).map_err(|_| {
                bad("a key-encryption key is 32 bytes written as 64 hex digits or as base64 (e.g. `openssl rand -base64 32`)")
            })?
        };
        let bytes: [u8; KEY_LEN] = bytes
            .try_into()
            .map_err(|_| bad("the key is not 32 bytes long; make one with `openssl rand -base64 32`"))?;
        Ok(Kek::new(bytes))
    }

    /// The key's id, kept with every data key it wraps.
    pub fn id(&self) -> &str {
        &self.id
    }
}

/// Where the key-encryption keys come from: a current key, which wraps new data keys (and the
/// data keys a rotation re-wraps), and older keys, which still unwrap the data keys they
/// wrapped until a rotation moves those to the current key.
pub trait KeyProvider: Send + Sync {
    /// The key that wraps new data keys.
    fn current(&self) -> &Kek;

    /// The key with id `id`, current or older; `None` if the provider does not hold it.
    fn key(&self, id: &str) -> Option<&Kek>;
}

/// A list of keys, the first current: what the built-in providers hold.
#[derive(Debug, Clone)]
struct KekList {
    keys: Vec<Kek>,
}

impl KekList {
    /// Parses keys separated by commas, whitespace or lines (`#` starts a comment line).
    fn parse(text: &str, source_name: &str) -> Result<Self, SealError> {
        let keys = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.starts_with('#'))
            .flat_map(|l| l.split([',', ' ', '\t']))
            .filter(|k| !k.is_empty())
            .map(|k| Kek::parse(k, source_name))
            .collect::<Result<Vec<_>, _>>()?;
        if keys.is_empty() {
            return Err(SealError::BadKey {
                source_name: source_name.to_string(),
                detail: "no key-encryption key given; make one with `openssl rand -base64 32`".to_string(),
            });
        }
        Ok(KekList { keys })
    }

    fn key(&self, id: &str) -> Option<&Kek> {
        self.keys.iter().find(|k| k.id == id)
    }
}

/// Key-encryption keys from an environment variable, read once when the provider is made: one
/// key (64 hex digits or base64 of 32 bytes), or several separated by commas, the first
/// current and the others older.
#[derive(Debug, Clone)]
pub struct EnvKeyProvider {
    keys: KekList,
}

impl EnvKeyProvider {
    /// Reads the keys from the environment variable `var`.
    pub fn from_env(var: &str) -> Result<Self, SealError> {
        let source_name = format!("environment variable `{var}`");
        let text = std::env::var(var).map_err(|_| SealError::BadKey {
            source_name: source_name.clone(),
            detail: "it is not set (or not UTF-8); set it to a key made with `openssl rand -base64 32`".to_string(),
        })?;
        Ok(EnvKeyProvider { keys: KekList::parse(&text, &source_name)? })
    }
}

impl KeyProvider for EnvKeyProvider {
    fn current(&self) -> &Kek {
        &self.keys.keys[0]
    }

    fn key(&self, id: &str) -> Option<&Kek> {
        self.keys.key(id)
    }
}

/// Key-encryption keys from a file, read once when the provider is opened: one key per line
/// (64 hex digits or base64 of 32 bytes), the first current and the others older; lines
/// starting with `#` are comments. Keep the file readable by the service's user only.
#[derive(Debug, Clone)]
pub struct FileKeyProvider {
    path: PathBuf,
    keys: KekList,
}

impl FileKeyProvider {
    /// Reads the keys from the file at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, SealError> {
        let path = path.as_ref().to_path_buf();
        let source_name = format!("key file {}", path.display());
        let text = std::fs::read_to_string(&path).map_err(|e| SealError::BadKey {
            source_name: source_name.clone(),
            detail: format!("cannot be read ({e}); check the path and its permissions"),
        })?;
        Ok(FileKeyProvider { keys: KekList::parse(&text, &source_name)?, path })
    }

    /// The file the keys were read from.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl KeyProvider for FileKeyProvider {
    fn current(&self) -> &Kek {
        &self.keys.keys[0]
    }

    fn key(&self, id: &str) -> Option<&Kek> {
        self.keys.key(id)
    }
}

/// Key-encryption keys held in memory (from a secrets manager the application reads itself,
/// or in tests): the first current, the others older.
#[derive(Debug, Clone)]
pub struct StaticKeyProvider {
    keys: KekList,
}

impl StaticKeyProvider {
    /// A provider of `current` and the `older` keys.
    pub fn new(current: Kek, older: Vec<Kek>) -> Self {
        let mut keys = vec![current];
        keys.extend(older);
        StaticKeyProvider { keys: KekList { keys } }
    }
}

impl KeyProvider for StaticKeyProvider {
    fn current(&self) -> &Kek {
        &self.keys.keys[0]
    }

    fn key(&self, id: &str) -> Option<&Kek> {
        self.keys.key(id)
    }
}

/// A shared key provider.
impl<P: KeyProvider + ?Sized> KeyProvider for Arc<P> {
    fn current(&self) -> &Kek {
        (**self).current()
    }

    fn key(&self, id: &str) -> Option<&Kek> {
        (**self).key(id)
    }
}
