//! Bounds-checked reading of TLS wire structures (after rustls `msgs/codec.rs`).
//!
//! Every length prefix gets its own sub-reader; nothing here can panic.

/// Why a structure could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidMessage {
    /// The structure ended before a field it announced.
    #[error("truncated {0}")]
    Truncated(&'static str),
    /// Bytes were left over after a length-prefixed structure.
    #[error("trailing bytes after {0}")]
    TrailingData(&'static str),
    /// A field held a value the protocol forbids.
    #[error("invalid {0}")]
    Invalid(&'static str),
}

/// A cursor over borrowed bytes.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    pub fn left(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub fn any_left(&self) -> bool {
        self.pos < self.buf.len()
    }

    /// Takes the next `n` bytes.
    pub fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], InvalidMessage> {
        let end = self
            .pos
            .checked_add(n)
            .ok_or(InvalidMessage::Truncated(what))?;
        let out = self
            .buf
            .get(self.pos..end)
            .ok_or(InvalidMessage::Truncated(what))?;
        self.pos = end;
        Ok(out)
    }

    /// Takes everything that is left.
    pub fn rest(&mut self) -> &'a [u8] {
        let out = self.buf.get(self.pos..).unwrap_or_default();
        self.pos = self.buf.len();
        out
    }

    pub fn u8(&mut self, what: &'static str) -> Result<u8, InvalidMessage> {
        Ok(self.take(1, what)?[0])
    }

    pub fn u16(&mut self, what: &'static str) -> Result<u16, InvalidMessage> {
        let b = self.take(2, what)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    pub fn u24(&mut self, what: &'static str) -> Result<u32, InvalidMessage> {
        let b = self.take(3, what)?;
        Ok(u32::from_be_bytes([0, b[0], b[1], b[2]]))
    }

    pub fn u32(&mut self, what: &'static str) -> Result<u32, InvalidMessage> {
        let b = self.take(4, what)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A sub-reader over a structure with a one-byte length prefix.
    pub fn sub8(&mut self, what: &'static str) -> Result<Reader<'a>, InvalidMessage> {
        let n = self.u8(what)? as usize;
        Ok(Reader::new(self.take(n, what)?))
    }

    /// A sub-reader over a structure with a two-byte length prefix.
    pub fn sub16(&mut self, what: &'static str) -> Result<Reader<'a>, InvalidMessage> {
        let n = self.u16(what)? as usize;
        Ok(Reader::new(self.take(n, what)?))
    }

    /// A sub-reader over a structure with a three-byte length prefix.
    pub fn sub24(&mut self, what: &'static str) -> Result<Reader<'a>, InvalidMessage> {
        let n = self.u24(what)? as usize;
        Ok(Reader::new(self.take(n, what)?))
    }

    /// Errors when bytes are left over: length prefixes must match exactly.
    pub fn expect_empty(&self, what: &'static str) -> Result<(), InvalidMessage> {
        if self.any_left() {
            Err(InvalidMessage::TrailingData(what))
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_bounds() {
        let mut r = Reader::new(&[0x00, 0x02, 0xaa, 0xbb, 0x01]);
        let mut s = r.sub16("x").unwrap();
        assert_eq!(s.u16("y").unwrap(), 0xaabb);
        assert!(s.expect_empty("s").is_ok());
        assert_eq!(r.u8("z").unwrap(), 1);
        assert_eq!(r.u8("end"), Err(InvalidMessage::Truncated("end")));
        assert_eq!(
            r.take(usize::MAX, "huge"),
            Err(InvalidMessage::Truncated("huge"))
        );
    }

    #[test]
    fn length_beyond_buffer_is_truncated() {
        let mut r = Reader::new(&[0xff, 0x01]);
        assert!(r.sub8("v").is_err());
    }
}
