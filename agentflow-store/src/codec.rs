//! The byte encoding of stored records.
//!
//! Every record starts with a one-byte format version, followed by its fields in declaration
//! order: integers as LEB128 varints, strings and byte strings as a varint length and the bytes,
//! options as a 0/1 tag, lists as a varint count and the items, JSON values as their text. It
//! ends with a CRC-32 (IEEE, little endian) of everything before it, so a bit flipped in a stored
//! value is a decode error even when redb does not verify its pages (`verify_on_open(false)`).
//! Decoding never trusts a length: a length past the end of the buffer is "truncated", and
//! trailing bytes after the last field are refused, so a damaged record is an error, not a panic.

/// The deepest nesting of arrays and objects in a JSON document that is written to a store.
///
/// serde_json, which reads every stored document back, refuses input nested 128 levels deep,
/// so a document within this limit always reads back. The store refuses to write deeper JSON
/// (audit details, checkpoint metadata), and agentflow refuses to commit a deeper state,
/// update, pending write or effect result. Depth counts arrays and objects: a number or a
/// string is depth 0, `[]` and `{}` are 1, `[[1]]` is 2.
pub const MAX_DOCUMENT_DEPTH: usize = 127;

/// The deepest nesting of arrays and objects accepted in a JSON value that comes from outside
/// and becomes part of a larger stored document: tool arguments from a model, approval
/// conditions, interrupt payloads, resume values.
///
/// The 63 levels between it and [`MAX_DOCUMENT_DEPTH`] are room for the document around the
/// value (a tool call inside a message inside a state), so an accepted value never makes the
/// document that holds it unreadable.
pub const MAX_JSON_DEPTH: usize = 64;

/// Where `value` first nests deeper than `limit`, as a path below `root` (`root.a[2].b`); `None`
/// when it fits. Iterative, so a deep value cannot overflow the stack.
pub(crate) fn too_deep(value: &serde_json::Value, limit: usize, root: &str) -> Option<String> {
    use serde_json::Value;
    // Every commit checks its documents; most fit, and telling so needs no allocation.
    if fits(value, 0, limit) {
        return None;
    }
    enum Seg<'a> {
        Key(&'a str),
        Index(usize),
    }
    // (value, its depth, the path segment that leads to it, the index of its parent frame)
    let mut stack: Vec<(&Value, usize, Option<Seg<'_>>, usize)> = vec![(value, 0, None, usize::MAX)];
    let mut frames: Vec<(Option<Seg<'_>>, usize)> = Vec::new();
    while let Some((v, depth, seg, parent)) = stack.pop() {
        let children: Box<dyn Iterator<Item = (Seg<'_>, &Value)>> = match v {
            Value::Array(items) => Box::new(items.iter().enumerate().map(|(i, v)| (Seg::Index(i), v))),
            Value::Object(map) => Box::new(map.iter().map(|(k, v)| (Seg::Key(k.as_str()), v))),
            _ => continue,
        };
        frames.push((seg, parent));
        let me = frames.len() - 1;
        if depth + 1 > limit {
            let mut segs = Vec::new();
            let mut cur = me;
            while cur != usize::MAX {
                let (seg, parent) = &frames[cur];
                if let Some(seg) = seg {
                    segs.push(seg);
                }
                cur = *parent;
            }
            let mut path = root.to_string();
            for seg in segs.into_iter().rev() {
                match seg {
                    Seg::Key(k) => path_key(&mut path, k),
                    Seg::Index(i) => path.push_str(&format!("[{i}]")),
                }
            }
            return Some(path);
        }
        for (seg, child) in children {
            if matches!(child, Value::Array(_) | Value::Object(_)) {
                stack.push((child, depth + 1, Some(seg), me));
            }
        }
    }
    None
}

/// Whether `value`, found at `depth`, nests no deeper than `limit`. The recursion stops one
/// level below `limit`, so the stack it uses is bounded by `limit`, not by the value.
fn fits(value: &serde_json::Value, depth: usize, limit: usize) -> bool {
    use serde_json::Value;
    match value {
        Value::Array(items) => depth < limit && items.iter().all(|v| fits(v, depth + 1, limit)),
        Value::Object(map) => depth < limit && map.values().all(|v| fits(v, depth + 1, limit)),
        _ => true,
    }
}

/// Appends an object key to a path: `.key` for an identifier, `["key"]` otherwise.
pub(crate) fn path_key(path: &mut String, key: &str) {
    let plain = !key.is_empty()
        && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !key.starts_with(|c: char| c.is_ascii_digit());
    if plain {
        path.push('.');
        path.push_str(key);
    } else {
        path.push_str(&format!("[{key:?}]"));
    }
}

/// Bytes of the checksum that ends every record.
const CHECKSUM_LEN: usize = 4;

/// CRC-32 (IEEE 802.3, reflected, polynomial 0xEDB88320) of `bytes`: detects every flip of up
/// to three bits, and any burst of up to 32. `crc32fast` computes it several bytes at a time
/// (with the CPU's carry-less multiply where there is one); the value is the standard one, so
/// records written by earlier releases check as before.
pub(crate) fn crc32(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

/// Builds one encoded record.
pub(crate) struct Enc(Vec<u8>);

impl Enc {
    /// Starts a record of the given format version.
    pub(crate) fn new(version: u8) -> Self {
        Self::with_capacity(version, 64)
    }

    /// Starts a record of the given format version, with room for `bytes` bytes.
    pub(crate) fn with_capacity(version: u8, bytes: usize) -> Self {
        let mut buf = Vec::with_capacity(bytes.max(16));
        buf.push(version);
        Enc(buf)
    }

    /// The record with its checksum appended.
    pub(crate) fn finish(mut self) -> Vec<u8> {
        let sum = crc32(&self.0);
        self.0.extend_from_slice(&sum.to_le_bytes());
        self.0
    }

    pub(crate) fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }

    pub(crate) fn u64(&mut self, mut v: u64) -> &mut Self {
        loop {
            let byte = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                self.0.push(byte);
                return self;
            }
            self.0.push(byte | 0x80);
        }
    }

    pub(crate) fn u32(&mut self, v: u32) -> &mut Self {
        self.u64(u64::from(v))
    }

    pub(crate) fn bool(&mut self, v: bool) -> &mut Self {
        self.u8(u8::from(v))
    }

    pub(crate) fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.u64(v.len() as u64);
        self.0.extend_from_slice(v);
        self
    }

    pub(crate) fn str(&mut self, v: &str) -> &mut Self {
        self.bytes(v.as_bytes())
    }

    pub(crate) fn opt_u64(&mut self, v: Option<u64>) -> &mut Self {
        match v {
            None => self.u8(0),
            Some(v) => self.u8(1).u64(v),
        }
    }

    pub(crate) fn opt_str(&mut self, v: Option<&str>) -> &mut Self {
        match v {
            None => self.u8(0),
            Some(v) => self.u8(1).str(v),
        }
    }

    pub(crate) fn strs(&mut self, v: &[String]) -> &mut Self {
        self.u64(v.len() as u64);
        for s in v {
            self.str(s);
        }
        self
    }

    pub(crate) fn byte_list(&mut self, v: &[Vec<u8>]) -> &mut Self {
        self.u64(v.len() as u64);
        for b in v {
            self.bytes(b);
        }
        self
    }

    pub(crate) fn json(&mut self, v: &serde_json::Value) -> &mut Self {
        // The same compact text as `Value`'s `Display`, without going through the formatter.
        match serde_json::to_vec(v) {
            Ok(text) => self.bytes(&text),
            Err(_) => self.str(&v.to_string()),
        }
    }

    pub(crate) fn opt_json(&mut self, v: Option<&serde_json::Value>) -> &mut Self {
        match v {
            None => self.u8(0),
            Some(v) => self.u8(1).json(v),
        }
    }
}

/// Why a record could not be decoded; rendered into [`crate::StorageError::Decode`].
pub(crate) type DecodeResult<T> = Result<T, String>;

/// Reads one encoded record.
pub(crate) struct Dec<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Dec<'a> {
    /// Checks the record's checksum, then its leading format version byte against the version
    /// this build reads.
    pub(crate) fn new(buf: &'a [u8], supported: u8) -> DecodeResult<Self> {
        if buf.is_empty() {
            return Err("empty record".to_string());
        }
        let Some(split) = buf.len().checked_sub(CHECKSUM_LEN).filter(|&n| n > 0) else {
            return Err(format!("truncated: {} bytes, shorter than a version byte and a checksum", buf.len()));
        };
        let (body, trailer) = buf.split_at(split);
        let stored = u32::from_le_bytes([trailer[0], trailer[1], trailer[2], trailer[3]]);
        let computed = crc32(body);
        if stored != computed {
            return Err(format!(
                "checksum mismatch (stored {stored:08x}, computed {computed:08x}): its bytes changed after they \
                 were written"
            ));
        }
        let version = body[0];
        if version != supported {
            let who = if version < supported { "an older" } else { "a newer" };
            return Err(format!(
                "record format version {version}, this build reads version {supported} (written by {who} \
                 agentflow-store, or not a record at all)"
            ));
        }
        Ok(Dec { buf: body, pos: 1 })
    }

    /// Whether every field has been read (a record of an older layout may end early).
    pub(crate) fn at_end(&self) -> bool {
        self.pos == self.buf.len()
    }

    /// Refuses trailing bytes after the last field.
    pub(crate) fn end(&self) -> DecodeResult<()> {
        if self.pos == self.buf.len() {
            Ok(())
        } else {
            Err(format!("{} unexpected trailing bytes after the last field", self.buf.len() - self.pos))
        }
    }

    fn take(&mut self, n: usize, what: &str) -> DecodeResult<&'a [u8]> {
        let remaining = self.buf.len() - self.pos;
        if n > remaining {
            return Err(format!("truncated at byte {} reading {what}: needs {n} bytes, {remaining} left", self.pos));
        }
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    pub(crate) fn u8(&mut self, what: &str) -> DecodeResult<u8> {
        Ok(self.take(1, what)?[0])
    }

    pub(crate) fn u64(&mut self, what: &str) -> DecodeResult<u64> {
        let mut out = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.u8(what)?;
            let bits = u64::from(byte & 0x7f);
            if shift == 63 && bits > 1 {
                return Err(format!("{what}: integer overflows 64 bits"));
            }
            out |= bits << shift;
            if byte & 0x80 == 0 {
                return Ok(out);
            }
        }
        Err(format!("{what}: integer longer than 10 bytes"))
    }

    pub(crate) fn u32(&mut self, what: &str) -> DecodeResult<u32> {
        let v = self.u64(what)?;
        u32::try_from(v).map_err(|_| format!("{what}: {v} does not fit in 32 bits"))
    }

    pub(crate) fn bool(&mut self, what: &str) -> DecodeResult<bool> {
        match self.u8(what)? {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(format!("{what}: invalid flag {other}")),
        }
    }

    fn len(&mut self, what: &str) -> DecodeResult<usize> {
        let n = self.u64(what)?;
        let remaining = self.buf.len() - self.pos;
        match usize::try_from(n) {
            Ok(n) if n <= remaining => Ok(n),
            _ => Err(format!("truncated at byte {} reading {what}: length {n}, {remaining} bytes left", self.pos)),
        }
    }

    pub(crate) fn bytes(&mut self, what: &str) -> DecodeResult<Vec<u8>> {
        let n = self.len(what)?;
        Ok(self.take(n, what)?.to_vec())
    }

    pub(crate) fn str(&mut self, what: &str) -> DecodeResult<String> {
        let n = self.len(what)?;
        let raw = self.take(n, what)?;
        String::from_utf8(raw.to_vec()).map_err(|_| format!("{what}: not valid UTF-8"))
    }

    fn tag(&mut self, what: &str) -> DecodeResult<bool> {
        self.bool(what)
    }

    pub(crate) fn opt_u64(&mut self, what: &str) -> DecodeResult<Option<u64>> {
        Ok(if self.tag(what)? { Some(self.u64(what)?) } else { None })
    }

    pub(crate) fn opt_str(&mut self, what: &str) -> DecodeResult<Option<String>> {
        Ok(if self.tag(what)? { Some(self.str(what)?) } else { None })
    }

    /// A count of items, each at least one byte long, so a garbage count cannot reserve memory
    /// the record does not hold.
    fn count(&mut self, what: &str) -> DecodeResult<usize> {
        self.len(what)
    }

    pub(crate) fn strs(&mut self, what: &str) -> DecodeResult<Vec<String>> {
        let n = self.count(what)?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(self.str(what)?);
        }
        Ok(out)
    }

    pub(crate) fn byte_list(&mut self, what: &str) -> DecodeResult<Vec<Vec<u8>>> {
        let n = self.count(what)?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(self.bytes(what)?);
        }
        Ok(out)
    }

    /// Checks a byte list is well formed without copying it out.
    pub(crate) fn skip_byte_list(&mut self, what: &str) -> DecodeResult<usize> {
        let n = self.count(what)?;
        for _ in 0..n {
            let len = self.len(what)?;
            self.take(len, what)?;
        }
        Ok(n)
    }

    pub(crate) fn json(&mut self, what: &str) -> DecodeResult<serde_json::Value> {
        let text = self.str(what)?;
        serde_json::from_str(&text).map_err(|e| format!("{what}: invalid JSON ({e})"))
    }

    pub(crate) fn opt_json(&mut self, what: &str) -> DecodeResult<Option<serde_json::Value>> {
        Ok(if self.tag(what)? { Some(self.json(what)?) } else { None })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip() {
        for v in [0, 1, 127, 128, 300, u64::from(u32::MAX), u64::MAX] {
            let mut e = Enc::new(1);
            e.u64(v);
            let buf = e.finish();
            let mut d = Dec::new(&buf, 1).unwrap();
            assert_eq!(d.u64("v").unwrap(), v);
            d.end().unwrap();
        }
    }

    #[test]
    fn the_quick_depth_check_agrees_with_the_path_search_and_stays_off_the_stack() {
        // A value far deeper than any stack could recurse through, built in memory.
        let mut deep = serde_json::json!(1);
        for _ in 0..200_000 {
            deep = serde_json::Value::Array(vec![deep]);
        }
        assert!(!fits(&deep, 0, MAX_DOCUMENT_DEPTH));
        assert_eq!(too_deep(&deep, 3, "v").as_deref(), Some("v[0][0][0]"));
        let v = serde_json::json!({"a": [1, {"b c": {"d": []}}], "e": {"f": 1}});
        for limit in 0..8 {
            assert_eq!(fits(&v, 0, limit), too_deep(&v, limit, "v").is_none(), "limit {limit}");
        }
        // Dropping the deep value must not recurse either: take it apart level by level.
        while let serde_json::Value::Array(mut items) = deep {
            deep = items.pop().unwrap_or(serde_json::Value::Null);
        }
    }

    #[test]
    fn documents_within_the_depth_limit_read_back_and_deeper_ones_do_not() {
        let nested = |n: usize| "[".repeat(n) + &"]".repeat(n);
        let fits: serde_json::Value = serde_json::from_str(&nested(MAX_DOCUMENT_DEPTH)).unwrap();
        assert_eq!(too_deep(&fits, MAX_DOCUMENT_DEPTH, "v"), None);
        assert!(serde_json::from_str::<serde_json::Value>(&nested(MAX_DOCUMENT_DEPTH + 1)).is_err());
        assert_eq!(too_deep(&fits, MAX_DOCUMENT_DEPTH - 1, "v").unwrap(), format!("v{}", "[0]".repeat(126)));
        let v = serde_json::json!({"a": [1, {"b c": {"d": []}}], "e": 1});
        assert_eq!(too_deep(&v, 5, "v"), None);
        assert_eq!(too_deep(&v, 4, "v").as_deref(), Some(r#"v.a[1]["b c"].d"#));
        assert_eq!(too_deep(&serde_json::json!(1), 0, "v"), None);
        assert_eq!(too_deep(&serde_json::json!({}), 0, "v").as_deref(), Some("v"));
    }

    #[test]
    fn garbage_is_an_error() {
        let mut e = Enc::new(1);
        e.bytes(&[1, 2, 3]);
        let buf = e.finish();
        for cut in 0..buf.len() {
            let r = Dec::new(&buf[..cut], 1).and_then(|mut d| d.bytes("b"));
            assert!(r.is_err(), "cut at {cut}");
        }
        assert!(Dec::new(&[9], 1).is_err());
        let sealed = |raw: &[u8]| {
            let mut v = raw.to_vec();
            v.extend_from_slice(&crc32(raw).to_le_bytes());
            v
        };
        let huge = sealed(&[1u8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]);
        assert!(Dec::new(&huge, 1).unwrap().strs("s").is_err());
        let overflow = sealed(&[1u8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f]);
        assert!(Dec::new(&overflow, 1).unwrap().u64("v").is_err());
        // Another version, even with a valid checksum, is refused by name.
        let older = Enc::new(1).finish();
        assert!(Dec::new(&older, 2).map(|_| ()).unwrap_err().contains("older agentflow-store"));
    }

    #[test]
    fn crc32_matches_the_standard_and_every_bit_flip_is_caught() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        let mut e = Enc::new(1);
        e.str("some record").u64(12_345).bytes(&[0, 1, 2, 255]);
        let buf = e.finish();
        for bit in 0..buf.len() * 8 {
            let mut damaged = buf.clone();
            damaged[bit / 8] ^= 1 << (bit % 8);
            let err = Dec::new(&damaged, 1).map(|_| ()).unwrap_err();
            assert!(err.contains("checksum mismatch"), "bit {bit}: {err}");
        }
    }
}
