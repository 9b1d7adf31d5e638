//! The cipher (XChaCha20-Poly1305) and the sealed envelope: `magic || version || key
//! generation || nonce || ciphertext || tag`, with the thread id and the payload's kind as
//! associated data, so a sealed value moved to another thread or field does not open.

use chacha20poly1305::aead::{AeadInPlace, KeyInit};
use chacha20poly1305::{Key, Tag, XChaCha20Poly1305, XNonce};
use zeroize::Zeroizing;

use crate::sealed::error::SealError;

/// The first byte of a sealed payload. No UTF-8 text starts with it (it is a continuation
/// byte), so a sealed payload is told from JSON or text written before sealing.
pub(crate) const MAGIC: u8 = 0xA7;
/// The envelope's format version.
pub(crate) const VERSION: u8 = 1;
/// Bytes of the random nonce (XChaCha20's extended nonce).
pub(crate) const NONCE_LEN: usize = 24;
/// Bytes of the Poly1305 tag.
pub(crate) const TAG_LEN: usize = 16;
/// Bytes before the ciphertext: magic, version, key generation, nonce.
pub(crate) const HEADER_LEN: usize = 2 + 4 + NONCE_LEN;
/// What sealing adds to a payload.
pub const SEAL_OVERHEAD: usize = HEADER_LEN + TAG_LEN;
/// Bytes of a key (data key or key-encryption key).
pub const KEY_LEN: usize = 32;

/// A nonce never used before with any key: 16 random bytes drawn from the operating system
/// once per process, then a counter. Unique across processes (two processes draw the same
/// 128-bit prefix with negligible probability) and within one, without a random draw per
/// payload (one costs more than sealing a small payload). The prefix is drawn again when the
/// process id changes, so a process forked from this one (which inherits the prefix and the
/// counter) never repeats a nonce its parent uses.
fn nonce() -> Result<[u8; NONCE_LEN], SealError> {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicU64, Ordering};
    static PREFIX: Mutex<Option<(u32, [u8; 16])>> = Mutex::new(None);
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let pid = std::process::id();
    let prefix = {
        let mut drawn = PREFIX.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match *drawn {
            Some((of, prefix)) if of == pid => prefix,
            _ => {
                let prefix = random::<16>()?;
                *drawn = Some((pid, prefix));
                prefix
            }
        }
    };
    let mut nonce = [0u8; NONCE_LEN];
    nonce[..16].copy_from_slice(&prefix);
    nonce[16..].copy_from_slice(&COUNTER.fetch_add(1, Ordering::Relaxed).to_be_bytes());
    Ok(nonce)
}

/// Random bytes from the operating system.
pub(crate) fn random<const N: usize>() -> Result<[u8; N], SealError> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).map_err(|e| SealError::Random { detail: e.to_string() })?;
    Ok(bytes)
}

/// A 256-bit key with its cipher; the key bytes are wiped from memory when dropped.
pub(crate) struct SecretKey {
    bytes: Zeroizing<[u8; KEY_LEN]>,
    cipher: XChaCha20Poly1305,
}

impl SecretKey {
    pub(crate) fn new(bytes: [u8; KEY_LEN]) -> Self {
        let bytes = Zeroizing::new(bytes);
        let cipher = XChaCha20Poly1305::new(Key::from_slice(bytes.as_slice()));
        SecretKey { bytes, cipher }
    }

    /// A fresh random key.
    pub(crate) fn generate() -> Result<Self, SealError> {
        Ok(SecretKey::new(random::<KEY_LEN>()?))
    }

    pub(crate) fn bytes(&self) -> &[u8; KEY_LEN] {
        &self.bytes
    }

    /// `nonce || ciphertext || tag` of `msg`, after `header` (written first, not encrypted).
    pub(crate) fn seal(&self, header: &[u8], msg: &[u8], aad: &[u8]) -> Result<Vec<u8>, SealError> {
        let nonce = nonce()?;
        let mut out = Vec::with_capacity(header.len() + NONCE_LEN + msg.len() + TAG_LEN);
        out.extend_from_slice(header);
        out.extend_from_slice(&nonce);
        let start = out.len();
        out.extend_from_slice(msg);
        let tag = self
            .cipher
            .encrypt_in_place_detached(XNonce::from_slice(&nonce), aad, &mut out[start..])
            .map_err(|_| SealError::Random { detail: "the cipher refused a message too long to seal".to_string() })?;
        out.extend_from_slice(&tag);
        Ok(out)
    }

    /// Opens `nonce || ciphertext || tag`; `None` if it is too short or does not authenticate.
    pub(crate) fn open(&self, sealed: &[u8], aad: &[u8]) -> Option<Vec<u8>> {
        if sealed.len() < NONCE_LEN + TAG_LEN {
            return None;
        }
        let (nonce, rest) = sealed.split_at(NONCE_LEN);
        let (body, tag) = rest.split_at(rest.len() - TAG_LEN);
        let mut msg = body.to_vec();
        self.cipher
            .decrypt_in_place_detached(XNonce::from_slice(nonce), aad, &mut msg, Tag::from_slice(tag))
            .ok()
            .map(|()| msg)
    }
}

/// A thread's data key, of generation `generation` (a purged and re-created thread gets the
/// next one).
pub(crate) struct DataKey {
    pub(crate) generation: u32,
    pub(crate) key: SecretKey,
}

/// The associated data of a payload: the thread and the payload's kind.
fn aad(thread: &str, kind: &str) -> Vec<u8> {
    let mut aad = Vec::with_capacity(16 + thread.len() + kind.len());
    aad.extend_from_slice(b"agentflow.seal.v1\0");
    aad.extend_from_slice(thread.as_bytes());
    aad.push(0);
    aad.extend_from_slice(kind.as_bytes());
    aad
}

impl DataKey {
    /// The envelope of `msg`, a payload of kind `kind` of `thread`.
    pub(crate) fn seal(&self, thread: &str, kind: &str, msg: &[u8]) -> Result<Vec<u8>, SealError> {
        let mut header = [0u8; 6];
        header[0] = MAGIC;
        header[1] = VERSION;
        header[2..6].copy_from_slice(&self.generation.to_be_bytes());
        self.key.seal(&header, msg, &aad(thread, kind))
    }

    /// Opens an envelope made by [`DataKey::seal`] for the same thread and kind.
    pub(crate) fn open(&self, thread: &str, kind: &str, sealed: &[u8]) -> Result<Vec<u8>, SealError> {
        let tampered = |detail: &str| SealError::Tampered {
            thread: thread.to_string(),
            what: kind.to_string(),
            detail: detail.to_string(),
        };
        let header = Envelope::parse(sealed).ok_or_else(|| tampered("not a sealed envelope"))?;
        if header.generation != self.generation {
            return Err(SealError::NoKey {
                thread: thread.to_string(),
                why: format!(
                    "of generation {} (the key store holds generation {}, the older one was destroyed)",
                    header.generation, self.generation
                ),
            });
        }
        self.key
            .open(&sealed[6..], &aad(thread, kind))
            .ok_or_else(|| tampered("it does not authenticate with the thread's data key"))
    }
}

/// The header of a sealed envelope.
pub(crate) struct Envelope {
    /// The generation of the data key it was sealed with.
    pub(crate) generation: u32,
}

impl Envelope {
    /// The header of `bytes` if they are a sealed envelope (by their magic and version).
    pub(crate) fn parse(bytes: &[u8]) -> Option<Envelope> {
        if bytes.len() < SEAL_OVERHEAD || bytes[0] != MAGIC || bytes[1] != VERSION {
            return None;
        }
        let generation = u32::from_be_bytes([bytes[2], bytes[3], bytes[4], bytes[5]]);
        Some(Envelope { generation })
    }

    /// Whether `bytes` start as a sealed envelope does.
    pub(crate) fn is_sealed(bytes: &[u8]) -> bool {
        bytes.first() == Some(&MAGIC)
    }
}
