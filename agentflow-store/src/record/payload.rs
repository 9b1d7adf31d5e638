//! Opaque bytes stored as a record (a pending write's update, an effect's result), and the
//! format version every record kind is written with.

use crate::codec::{Dec, DecodeResult, Enc};

/// The format version written by this build for every record kind (2: records end with a
/// checksum; pending writes and effect results are records too).
pub(crate) const RECORD_VERSION: u8 = 2;

/// The bytes of a pending write or an effect result, stored as a record (version and checksum)
/// so damage to them is a decode error too.
pub(crate) struct Payload;

impl Payload {
    pub(crate) fn encode(bytes: &[u8]) -> Vec<u8> {
        let mut e = Enc::new(RECORD_VERSION);
        e.bytes(bytes);
        e.finish()
    }

    pub(crate) fn decode(buf: &[u8]) -> DecodeResult<Vec<u8>> {
        let mut d = Dec::new(buf, RECORD_VERSION)?;
        let bytes = d.bytes("payload")?;
        d.end()?;
        Ok(bytes)
    }
}
