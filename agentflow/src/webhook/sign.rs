//! The signature of a webhook delivery: `sha256=<hex HMAC-SHA256(secret, "<timestamp>.<body>")>`,
//! sent as the `x-agentflow-signature` header, and its check by a receiver.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The prefix of a signature: the hash it was made with.
const PREFIX: &str = "sha256=";

/// HMAC-SHA256 under `key`, fed `parts` (one message, in order).
fn mac(key: &[u8], parts: &[&[u8]]) -> Hmac<Sha256> {
    // HMAC takes a key of any length: `new_from_slice` cannot fail for it.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).unwrap_or_else(|_| unreachable!("HMAC takes any key"));
    for part in parts {
        mac.update(part);
    }
    mac
}

/// HMAC-SHA256 of `parts` (one message, in order) under `key` (RFC 2104).
fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    mac(key, parts).finalize().into_bytes().into()
}

/// The signature of a delivery of `body` sent at `timestamp` (unix seconds, as the
/// `x-agentflow-timestamp` header gives it) under `secret`: `sha256=` and 64 lowercase hex
/// digits.
///
/// ```
/// let signature = agentflow::webhook::sign(b"secret", 1_700_000_000, br#"{"status":"completed"}"#);
/// assert!(signature.starts_with("sha256=") && signature.len() == 7 + 64);
/// ```
pub fn sign(secret: &[u8], timestamp: u64, body: &[u8]) -> String {
    let stamp = timestamp.to_string();
    let mac = hmac_sha256(secret, &[stamp.as_bytes(), b".", body]);
    let mut out = String::with_capacity(PREFIX.len() + 64);
    out.push_str(PREFIX);
    for byte in mac {
        out.push(char::from(HEX[usize::from(byte >> 4)]));
        out.push(char::from(HEX[usize::from(byte & 0xf)]));
    }
    out
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Whether `signature` (the `x-agentflow-signature` header) is the signature of `body` sent at
/// `timestamp` (the `x-agentflow-timestamp` header, unix seconds, as sent) under `secret`.
/// Compared in constant time. A receiver should also refuse a timestamp too far from its clock
/// (say, 5 minutes), so a delivery recorded in passing cannot be replayed later.
///
/// ```
/// use agentflow::webhook::{sign, verify};
/// let body = br#"{"thread_id":"t-1","status":"completed"}"#;
/// let signature = sign(b"secret", 1_700_000_000, body);
/// assert!(verify(b"secret", "1700000000", body, &signature));
/// assert!(!verify(b"other secret", "1700000000", body, &signature));
/// assert!(!verify(b"secret", "1700000001", body, &signature));
/// ```
pub fn verify(secret: &[u8], timestamp: &str, body: &[u8], signature: &str) -> bool {
    let Some(hex) = signature.trim().strip_prefix(PREFIX) else { return false };
    let Some(given) = decode_hex(hex) else { return false };
    // Compared in constant time by the `hmac` crate.
    mac(secret, &[timestamp.trim().as_bytes(), b".", body]).verify_slice(&given).is_ok()
}

/// The 32 bytes 64 hex digits (either case) spell, if they do.
fn decode_hex(hex: &str) -> Option<[u8; 32]> {
    let digits = hex.as_bytes();
    if digits.len() != 64 {
        return None;
    }
    let value = |d: u8| char::from(d).to_digit(16).and_then(|v| u8::try_from(v).ok());
    let mut out = [0u8; 32];
    for (i, pair) in digits.chunks_exact(2).enumerate() {
        out[i] = value(pair[0])? << 4 | value(pair[1])?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// RFC 4231's test cases 1, 2 and 6 (a key longer than a block).
    #[test]
    fn hmac_sha256_matches_rfc_4231() {
        assert_eq!(
            hex(&hmac_sha256(&[0x0b; 20], &[b"Hi There"])),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"
        );
        assert_eq!(
            hex(&hmac_sha256(b"Jefe", &[b"what do ya want ", b"for nothing?"])),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        assert_eq!(
            hex(&hmac_sha256(&[0xaa; 131], &[b"Test Using Larger Than Block-Size Key - Hash Key First"])),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
    }

    #[test]
    fn a_signature_verifies_only_for_its_secret_timestamp_and_body() {
        let signature = sign(b"k", 42, b"{}");
        assert_eq!(signature, format!("sha256={}", hex(&hmac_sha256(b"k", &[b"42.{}"]))));
        assert!(verify(b"k", "42", b"{}", &signature));
        assert!(verify(b"k", "42", b"{}", &signature.to_uppercase().replace("SHA256=", "sha256=")));
        assert!(!verify(b"k", "42", b"{ }", &signature));
        assert!(!verify(b"k", "43", b"{}", &signature));
        assert!(!verify(b"K", "42", b"{}", &signature));
        for bad in ["", "sha256=", "sha1=00", &signature[..signature.len() - 1], &format!("{signature}0")] {
            assert!(!verify(b"k", "42", b"{}", bad), "{bad:?}");
        }
    }
}
