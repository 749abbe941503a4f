//! Reassembly of one direction's CRYPTO stream in the Initial space (RFC
//! 9000 §19.6): frames arrive out of order, duplicated and split over
//! packets and datagrams; TLS handshake messages come out in order.
//! Bounded: bytes beyond [`MAX_STREAM`] and out-of-order bytes beyond
//! [`MAX_PENDING`] are dropped and flagged (the tracker counts them).

use std::collections::BTreeMap;

use crate::memory::{HeapSize, ALLOC_OVERHEAD};

/// Initial CRYPTO stream offsets kept (ClientHellos with post-quantum key
/// shares are a few KB; twice a generous 16 KB message is plenty).
pub const MAX_STREAM: u64 = 32 * 1024;
/// Out-of-order bytes buffered while waiting for a hole to fill.
pub const MAX_PENDING: usize = 32 * 1024;
/// Out-of-order fragments buffered.
pub const MAX_FRAGMENTS: usize = 64;

#[derive(Debug, Default)]
pub struct CryptoStream {
    /// Contiguous bytes from stream offset `base` up to `delivered`.
    buf: Vec<u8>,
    base: u64,
    delivered: u64,
    pending: BTreeMap<u64, Vec<u8>>,
    pending_bytes: usize,
    /// Highest stream offset seen (distinct bytes sent, holes included).
    pub highest: u64,
    /// A cap was hit: some bytes were dropped.
    pub capped: bool,
}

impl HeapSize for CryptoStream {
    fn heap_size(&self) -> usize {
        // A B-tree node holds up to 11 fragments; each fragment is its own allocation.
        let nodes = self.pending.len().div_ceil(11) * (11 * 32 + 2 * ALLOC_OVERHEAD);
        self.buf.heap_size() + self.pending_bytes + self.pending.len() * ALLOC_OVERHEAD + nodes
    }
}

impl CryptoStream {
    /// Adds a CRYPTO frame's data at `offset`.
    pub fn push(&mut self, offset: u64, data: &[u8]) {
        let Some(end) = offset.checked_add(data.len() as u64) else {
            self.capped = true;
            return;
        };
        let (end, data) = if end > MAX_STREAM {
            self.capped = true;
            if offset >= MAX_STREAM {
                return;
            }
            (MAX_STREAM, &data[..(MAX_STREAM - offset) as usize])
        } else {
            (end, data)
        };
        self.highest = self.highest.max(end);
        if end <= self.delivered {
            return; // duplicate
        }
        if offset <= self.delivered {
            let skip = (self.delivered - offset) as usize;
            self.buf.extend_from_slice(&data[skip..]);
            self.delivered = end;
            self.drain_pending();
        } else if self.pending_bytes + data.len() <= MAX_PENDING
            && self.pending.len() < MAX_FRAGMENTS
        {
            // Keep the longer of two fragments at the same offset.
            let old = self.pending.get(&offset).map_or(0, Vec::len);
            if data.len() > old {
                self.pending_bytes = self.pending_bytes + data.len() - old;
                self.pending.insert(offset, data.to_vec());
            }
        } else {
            self.capped = true;
        }
    }

    fn drain_pending(&mut self) {
        while let Some((&off, _)) = self.pending.first_key_value() {
            if off > self.delivered {
                break;
            }
            let Some((_, frag)) = self.pending.pop_first() else {
                break;
            };
            self.pending_bytes -= frag.len();
            let end = off + frag.len() as u64;
            if end > self.delivered {
                self.buf
                    .extend_from_slice(&frag[(self.delivered - off) as usize..]);
                self.delivered = end;
            }
        }
    }

    /// Bytes are waiting behind a hole.
    /// Bytes from offset 0 on have arrived.
    pub fn has_start(&self) -> bool {
        self.delivered > 0
    }

    pub fn has_gap(&self) -> bool {
        !self.pending.is_empty()
    }

    /// The next complete handshake message: (msg_type, body without the
    /// 4-byte header). None until all of it has arrived.
    pub fn next_message(&mut self) -> Option<(u8, Vec<u8>)> {
        let h = self.buf.get(..4)?;
        let len = (usize::from(h[1]) << 16) | (usize::from(h[2]) << 8) | usize::from(h[3]);
        let typ = h[0];
        let body = self.buf.get(4..4 + len)?.to_vec();
        self.buf.drain(..4 + len);
        if self.buf.is_empty() {
            // Nothing waits: the buffer (a ClientHello's size) goes.
            self.buf = Vec::new();
        }
        self.base += 4 + len as u64;
        Some((typ, body))
    }

    /// A message header announces more than the stream can ever hold.
    pub fn oversized(&self) -> bool {
        self.buf.get(..4).is_some_and(|h| {
            let len = (u64::from(h[1]) << 16) | (u64::from(h[2]) << 8) | u64::from(h[3]);
            self.base + 4 + len > MAX_STREAM
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(typ: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![typ, 0, (body.len() >> 8) as u8, body.len() as u8];
        m.extend_from_slice(body);
        m
    }

    #[test]
    fn out_of_order_duplicated_and_split_frames_reassemble() {
        let body: Vec<u8> = (0..=255u8).cycle().take(3000).collect();
        let m = msg(1, &body);
        let mut s = CryptoStream::default();
        // Pieces: [1000..2004), [0..500) twice, [2004..), [400..1100) (overlapping).
        s.push(1000, &m[1000..2004]);
        assert!(s.next_message().is_none());
        s.push(0, &m[..500]);
        s.push(0, &m[..500]);
        assert!(s.next_message().is_none() && s.has_gap());
        s.push(2004, &m[2004..]);
        s.push(400, &m[400..1100]);
        assert_eq!(s.next_message(), Some((1, body)));
        assert!(!s.has_gap() && !s.capped);
        assert_eq!(s.highest, m.len() as u64);
    }

    #[test]
    fn two_messages_in_one_stream() {
        let mut all = msg(2, b"hrr");
        all.extend(msg(2, b"sh"));
        let mut s = CryptoStream::default();
        s.push(0, &all);
        assert_eq!(s.next_message(), Some((2, b"hrr".to_vec())));
        assert_eq!(s.next_message(), Some((2, b"sh".to_vec())));
        assert_eq!(s.next_message(), None);
    }

    #[test]
    fn caps_hold() {
        let mut s = CryptoStream::default();
        s.push(u64::MAX - 1, b"abc");
        s.push(MAX_STREAM - 1, b"abc");
        assert!(s.capped);
        let mut s = CryptoStream::default();
        for i in 0..200u64 {
            s.push(100 + i * 1000, &[0; 900]);
        }
        assert!(s.capped && s.pending_bytes <= MAX_PENDING && s.pending.len() <= MAX_FRAGMENTS);
        let mut s = CryptoStream::default();
        s.push(0, &[1, 0xff, 0xff, 0xff]);
        assert!(s.oversized());
    }
}
