//! The record layer of one direction of a TLS-over-TCP connection: turns
//! in-order stream bytes into record headers and plaintext handshake
//! messages (RFC 8446 §5, RFC 5246 §6.2), buffering at most one record and
//! one handshake message.
//!
//! Bytes the capture lost (a chunk that does not continue the previous one,
//! or [`RecordStream::lost`]) are survived: inside one record's payload
//! that record is dropped; otherwise the framing is unknown and the stream
//! *resynchronises*: it discards bytes until a chunk starts with a
//! plausible record header (see [`RecordStream::resyncs`]) and parses
//! records from there. Handshake messages are trusted again from the first
//! handshake record whose payload is whole messages, end to end.

mod resync;

use super::codec::{InvalidMessage, Reader};
use super::enums::content_type;
pub use crate::flow::reassembly::Chunk;
use crate::memory::HeapSize;
use resync::{header_fits, whole_messages};

pub use crate::caps::MAX_RECORD_PAYLOAD;
/// Default cap on one handshake message (certificate chains are the big ones).
pub const DEFAULT_MAX_HANDSHAKE_MESSAGE: usize = 256 * 1024;

/// One record as seen on the wire, stamped with the segment that carried
/// its first byte.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RecordInfo {
    pub ts: f64,
    pub content_type: u8,
    /// The header's minor version byte (3 = TLS 1.2): after the hellos, a
    /// TLS <= 1.2 side writes the negotiated version here.
    pub minor: u8,
    /// Payload length (without the 5-byte header).
    pub len: u16,
    /// TCP sequence number of the record's first byte, and one past its last.
    pub seq: u32,
    pub end: u32,
    /// The acknowledgement number of the segment carrying the first byte.
    pub ack: Option<u32>,
}

/// What the record layer hands upward.
#[derive(Debug)]
pub enum StreamEvent<'a> {
    Record(RecordInfo),
    /// A complete plaintext handshake message; `body` is None when it was
    /// larger than the cap (its type and length are still known).
    Handshake {
        msg_type: u8,
        len: usize,
        body: Option<&'a [u8]>,
        record: RecordInfo,
    },
    Alert {
        level: u8,
        description: u8,
        record: RecordInfo,
    },
    /// The first record of a direction in SSL 2.0 format: message type and body.
    Sslv2 {
        msg_type: u8,
        body: &'a [u8],
        record: RecordInfo,
    },
    /// An encrypted record kept whole because `capture_encrypted` asked for it.
    Encrypted {
        header: [u8; 5],
        payload: &'a [u8],
        record: RecordInfo,
    },
}

/// Why a direction stopped being parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StreamError {
    #[error("not a TLS record header")]
    BadRecordHeader,
    #[error("record longer than 2^14+2048")]
    RecordTooLong,
    #[error("malformed handshake message: {0}")]
    BadMessage(InvalidMessage),
}

/// A plaintext ClientHello or ServerHello at the start of a record: type,
/// a length that holds at least version and random, legacy version 3.x.
/// (Encrypted bytes match by chance about once in 2^24.)
fn looks_like_hello(p: &[u8]) -> bool {
    p.len() >= 6
        && (p[0] == 1 || p[0] == 2)
        && u32::from_be_bytes([0, p[1], p[2], p[3]]) >= 34
        && p[4] == 3
}

/// Gathering buffers up to this capacity are kept for reuse; larger ones
/// (a record or message split across segments) are freed once used.
const KEPT_BUFFER: usize = 64;

#[derive(Debug, Default)]
pub struct RecordStream {
    /// Bytes of the current record header / payload gathered so far.
    buf: Vec<u8>,
    /// Metadata of the record being gathered (set once its first byte arrived).
    current: Option<(f64, u32, Option<u32>)>,
    /// Bytes of an opaque record still to skip.
    skip: u32,
    /// Handshake-message bytes gathered across records.
    hs_buf: Vec<u8>,
    /// Bytes of an oversized handshake message still to drop.
    hs_skip: u32,
    /// Handshake bytes were lost: message boundaries are unknown until a
    /// handshake record holds whole messages end to end.
    hs_lost: bool,
    /// Sequence number one past the last byte this stream was given.
    next_seq: Option<u32>,
    /// The record framing was lost: bytes are discarded until a chunk
    /// starts with a plausible record header.
    hunting: bool,
    /// The record found by the latest resynchronisation, until the header
    /// after it confirms it (none was in the same chunk): its sequence
    /// number and version. A bad header there means the match was chance,
    /// and hunting goes on instead of failing the stream.
    unconfirmed: Option<(u32, [u8; 2])>,
    /// Times the stream resynchronised.
    resyncs: u32,
    /// Version field of the latest record header, and records read.
    version: Option<[u8; 2]>,
    records: u32,
    /// After this side's ChangeCipherSpec in TLS <= 1.2, handshake and
    /// alert records are encrypted.
    pub encrypted: bool,
    /// Set once the negotiated version is known to be <= 1.2.
    pub ccs_encrypts: bool,
    /// This side sent a ChangeCipherSpec. While the version is not known
    /// (the capture lacks the peer's hello), what follows it is read as
    /// encrypted unless it is plainly a hello (a TLS 1.3 side's second
    /// hello after HelloRetryRequest) or a 2-byte alert.
    ccs_seen: bool,
    /// Keep this many of the next application_data records whole (to
    /// decrypt them with a key log: a TLS 1.3 server's EncryptedExtensions,
    /// Certificate, CertificateVerify and Finished).
    pub capture_encrypted: u8,

    /// The current record's header has been reported.
    announced: bool,
    started: bool,
    sslv2: bool,
    failed: bool,
    max_hs: usize,
}

impl HeapSize for RecordStream {
    fn heap_size(&self) -> usize {
        self.buf.heap_size() + self.hs_buf.heap_size()
    }
}

impl RecordStream {
    pub fn new(max_handshake_message: usize) -> Self {
        RecordStream {
            max_hs: max_handshake_message,
            ..Default::default()
        }
    }

    pub fn failed(&self) -> bool {
        self.failed
    }

    /// Times the stream found its framing again after lost bytes: a chunk
    /// started with a plausible record header (content type 20..=24,
    /// version 3.x with x <= 4 -- the direction's own version once it has
    /// read more than its first record --, a length within the cap, and a
    /// ChangeCipherSpec 1 byte long), followed in the same chunk by the end
    /// of the chunk or another such header of the same version.
    pub fn resyncs(&self) -> u32 {
        self.resyncs
    }

    /// Is the stream discarding bytes until it finds a record header?
    pub fn hunting(&self) -> bool {
        self.hunting
    }

    /// Bytes held in buffers (for the per-flow memory cap).
    pub fn buffered(&self) -> usize {
        self.buf.capacity() + self.hs_buf.capacity()
    }

    /// Feeds in-order bytes; calls `sink` for each event. On error the
    /// direction is abandoned and later pushes are ignored.
    pub fn push(
        &mut self,
        chunk: Chunk<'_>,
        sink: &mut dyn FnMut(StreamEvent<'_>),
    ) -> Result<(), StreamError> {
        if self.failed {
            return Ok(());
        }
        self.follow(chunk.seq, chunk.data.len());
        if self.hunting && !self.resync_at(chunk.seq, chunk.data) {
            return Ok(());
        }
        let mut data = chunk.data;
        let mut seq = chunk.seq;
        while !data.is_empty() {
            if self.skip > 0 {
                let n = (self.skip as usize).min(data.len());
                self.skip -= n as u32;
                data = &data[n..];
                seq = seq.wrapping_add(n as u32);
                continue;
            }
            if self.current.is_none() {
                self.current = Some((chunk.ts, seq, chunk.ack));
            }
            let (ts, start, ack) = self.current.unwrap_or((chunk.ts, seq, chunk.ack));
            let sslv2_possible = !self.started || self.sslv2;
            let sslv2_start = |b: u8| sslv2_possible && b & 0x80 != 0;
            // The 5-byte header: read where it lies when this chunk holds
            // all of it (the usual case: no buffer, nothing copied), else
            // gathered (or 2 bytes of an SSLv2 header).
            let h: [u8; 5] = match data {
                [a, b, c, d, e, rest @ ..] if self.buf.is_empty() && !sslv2_start(*a) => {
                    data = rest;
                    seq = seq.wrapping_add(5);
                    [*a, *b, *c, *d, *e]
                }
                _ => {
                    let need_header = 5usize.saturating_sub(self.buf.len());
                    if need_header > 0 {
                        let n = need_header.min(data.len());
                        self.buf.extend_from_slice(&data[..n]);
                        data = &data[n..];
                        seq = seq.wrapping_add(n as u32);
                        if self.buf.len() < 5 {
                            continue;
                        }
                    }
                    if sslv2_start(self.buf[0]) {
                        // SSLv2 record header (a direction that began in
                        // SSLv2 may go on in it): 2 bytes of length, then
                        // the message.
                        let used = self.sslv2_record(data, ts, start, ack, sink);
                        data = &data[used..];
                        seq = seq.wrapping_add(used as u32);
                        continue;
                    }
                    [
                        self.buf[0],
                        self.buf[1],
                        self.buf[2],
                        self.buf[3],
                        self.buf[4],
                    ]
                }
            };
            self.started = true;
            let ctype = h[0];
            let len = u16::from_be_bytes([h[3], h[4]]) as usize;
            if let Some((_, version)) = self.unconfirmed.filter(|&(at, _)| at != start) {
                // The header after a resynchronised record: if it is not
                // one, that record was a chance match.
                if !header_fits(&h, Some(version)) {
                    self.hunt();
                    return Ok(());
                }
                self.unconfirmed = None;
            }
            if !(content_type::CHANGE_CIPHER_SPEC..=content_type::HEARTBEAT).contains(&ctype)
                || h[1] != 3
            {
                return self.fail(StreamError::BadRecordHeader);
            }
            if len > MAX_RECORD_PAYLOAD {
                return self.fail(StreamError::RecordTooLong);
            }
            if !self.announced {
                self.version = Some([h[1], h[2]]);
                self.records = self.records.saturating_add(1);
            }
            let record = RecordInfo {
                ts,
                content_type: ctype,
                minor: h[2],
                len: len as u16,
                seq: start,
                end: start.wrapping_add(5 + len as u32),
                ack,
            };
            let capture = self.capture_encrypted > 0 && ctype == content_type::APPLICATION_DATA;
            let opaque = !capture
                && (ctype == content_type::APPLICATION_DATA
                    || ctype == content_type::HEARTBEAT
                    || (self.encrypted
                        && (ctype == content_type::HANDSHAKE || ctype == content_type::ALERT))
                    || (self.ccs_seen && ctype == content_type::ALERT && len != 2));
            if !self.announced {
                sink(StreamEvent::Record(record));
                self.announced = true;
                if opaque {
                    self.buf.clear();
                    self.current = None;
                    self.announced = false;
                    // A u16 record length (u32: in every open handshake).
                    self.skip = u32::try_from(len).unwrap_or(u32::MAX);
                    continue;
                }
            }
            // Payload bytes gathered from earlier chunks (the header is
            // in `buf` too then).
            let have = self.buf.len().saturating_sub(5);
            if have == 0 && data.len() >= len {
                // The whole payload is in this chunk (the usual case): read
                // in place, nothing copied or kept.
                let (payload, rest) = data.split_at(len);
                data = rest;
                seq = seq.wrapping_add(len as u32);
                self.buf.clear();
                self.current = None;
                self.announced = false;
                if capture {
                    self.capture_encrypted -= 1;
                    sink(StreamEvent::Encrypted {
                        header: h,
                        payload,
                        record,
                    });
                    continue;
                }
                self.plaintext_record(ctype, payload, record, sink)?;
                continue;
            }
            // Gather the payload of a record split across chunks (one
            // allocation, not doublings), behind its header.
            self.buf
                .reserve_exact((5 + len).saturating_sub(self.buf.len()));
            if self.buf.is_empty() {
                self.buf.extend_from_slice(&h);
            }
            let n = (len - have).min(data.len());
            self.buf.extend_from_slice(&data[..n]);
            data = &data[n..];
            seq = seq.wrapping_add(n as u32);
            if self.buf.len() < 5 + len {
                continue;
            }
            let payload = std::mem::take(&mut self.buf);
            self.current = None;
            self.announced = false;
            if capture {
                self.capture_encrypted -= 1;
                sink(StreamEvent::Encrypted {
                    header: h,
                    payload: &payload[5..],
                    record,
                });
                self.reuse_buf(payload);
                continue;
            }
            let res = self.plaintext_record(ctype, &payload[5..], record, sink);
            self.reuse_buf(payload);
            res?;
        }
        Ok(())
    }

    /// Takes a gathering buffer back: a small one is kept for the next
    /// record header, a record-sized one is freed (a flow waiting in a
    /// flood must not hold a ClientHello's worth per direction).
    fn reuse_buf(&mut self, mut buf: Vec<u8>) {
        if buf.capacity() <= KEPT_BUFFER {
            buf.clear();
            self.buf = buf;
        }
    }

    fn plaintext_record(
        &mut self,
        ctype: u8,
        payload: &[u8],
        record: RecordInfo,
        sink: &mut dyn FnMut(StreamEvent<'_>),
    ) -> Result<(), StreamError> {
        match ctype {
            content_type::CHANGE_CIPHER_SPEC => {
                self.ccs_seen = true;
                self.encrypted |= self.ccs_encrypts;
            }
            content_type::ALERT => {
                let mut r = Reader::new(payload);
                while r.left() >= 2 {
                    let (Ok(level), Ok(description)) = (r.u8("level"), r.u8("description")) else {
                        break;
                    };
                    sink(StreamEvent::Alert {
                        level,
                        description,
                        record,
                    });
                }
            }
            content_type::HANDSHAKE
                if self.ccs_seen
                    && self.hs_buf.is_empty()
                    && self.hs_skip == 0
                    && !looks_like_hello(payload) => {}
            content_type::HANDSHAKE => self.handshake_bytes(payload, record, sink)?,
            _ => {}
        }
        Ok(())
    }

    /// Reassembles handshake messages across record boundaries.
    fn handshake_bytes(
        &mut self,
        mut payload: &[u8],
        record: RecordInfo,
        sink: &mut dyn FnMut(StreamEvent<'_>),
    ) -> Result<(), StreamError> {
        if self.hs_lost {
            // Message boundaries were lost with bytes of an earlier record:
            // this record may begin inside a message. Only one that is
            // whole messages end to end is trusted (and ends on a boundary,
            // so the next record starts on one).
            if !whole_messages(payload) {
                return Ok(());
            }
            self.hs_lost = false;
        }
        while !payload.is_empty() {
            if self.hs_skip > 0 {
                let n = (self.hs_skip as usize).min(payload.len());
                self.hs_skip -= n as u32;
                payload = &payload[n..];
                continue;
            }
            if let ([msg_type, a, b, c, rest @ ..], true) = (payload, self.hs_buf.is_empty()) {
                let len = u32::from_be_bytes([0, *a, *b, *c]) as usize;
                if len <= self.max_hs && len <= rest.len() {
                    // A whole message in this record: read in place.
                    sink(StreamEvent::Handshake {
                        msg_type: *msg_type,
                        len,
                        body: Some(&rest[..len]),
                        record,
                    });
                    payload = &rest[len..];
                    continue;
                }
            }
            let need = 4usize.saturating_sub(self.hs_buf.len());
            if need > 0 {
                let n = need.min(payload.len());
                self.hs_buf.extend_from_slice(&payload[..n]);
                payload = &payload[n..];
                if self.hs_buf.len() < 4 {
                    return Ok(());
                }
            }
            let msg_type = self.hs_buf[0];
            let len =
                u32::from_be_bytes([0, self.hs_buf[1], self.hs_buf[2], self.hs_buf[3]]) as usize;
            if len > self.max_hs {
                // Too large to keep: report its type, drop its body.
                sink(StreamEvent::Handshake {
                    msg_type,
                    len,
                    body: None,
                    record,
                });
                self.hs_buf.clear();
                // A u24 message length.
                self.hs_skip = u32::try_from(len).unwrap_or(u32::MAX);
                continue;
            }
            self.hs_buf
                .reserve_exact((4 + len).saturating_sub(self.hs_buf.len()));
            let have = self.hs_buf.len() - 4;
            let n = (len - have).min(payload.len());
            self.hs_buf.extend_from_slice(&payload[..n]);
            payload = &payload[n..];
            if self.hs_buf.len() == 4 + len {
                let msg = std::mem::take(&mut self.hs_buf);
                sink(StreamEvent::Handshake {
                    msg_type,
                    len,
                    body: Some(&msg[4..]),
                    record,
                });
                if msg.capacity() <= KEPT_BUFFER {
                    self.hs_buf = msg;
                    self.hs_buf.clear();
                }
            }
        }
        Ok(())
    }

    /// Gathers one SSLv2 record; returns how many bytes of `rest` it used.
    fn sslv2_record(
        &mut self,
        rest: &[u8],
        ts: f64,
        start: u32,
        ack: Option<u32>,
        sink: &mut dyn FnMut(StreamEvent<'_>),
    ) -> usize {
        let len = (((self.buf[0] & 0x7f) as usize) << 8) | self.buf[1] as usize;
        // The 5 bytes gathered as a header may already run past a short record.
        let need = (2 + len).saturating_sub(self.buf.len()).min(rest.len());
        self.buf.extend_from_slice(&rest[..need]);
        if self.buf.len() < 2 + len {
            return need; // wait for the rest of the record
        }
        let record = RecordInfo {
            ts,
            content_type: 0,
            minor: 0,
            len: len as u16,
            seq: start,
            end: start.wrapping_add(2 + len as u32),
            ack,
        };
        self.sslv2 = true;
        self.started = true;
        let body = std::mem::take(&mut self.buf);
        if len >= 1 {
            sink(StreamEvent::Sslv2 {
                msg_type: body[2],
                body: &body[3..2 + len],
                record,
            });
        }
        // Bytes gathered beyond this record belong to the next one.
        let overshoot = body.len() - (2 + len);
        self.buf = body[2 + len..].to_vec();
        self.current = if overshoot > 0 {
            Some((ts, record.end, ack))
        } else {
            None
        };
        need
    }

    fn fail(&mut self, err: StreamError) -> Result<(), StreamError> {
        self.failed = true;
        self.buf = Vec::new();
        self.hs_buf = Vec::new();
        Err(err)
    }
}

#[cfg(test)]
mod tests;
