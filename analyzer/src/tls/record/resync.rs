//! Bytes the capture lost: how the record layer survives them. A loss
//! inside one record's payload drops that record; any other loses the
//! framing, and the stream hunts for a record header at the start of a
//! later chunk (README "Capture holes").

use super::{RecordStream, KEPT_BUFFER, MAX_RECORD_PAYLOAD};
use crate::seq::seq_diff;
use crate::tls::enums::{content_type, handshake_type as ht};

impl RecordStream {
    /// `n` bytes of the stream were lost by the capture (also noticed
    /// without this call, from a chunk that does not continue the previous
    /// one). A loss inside one record's payload drops that record (and, if
    /// it carried handshake bytes, message boundaries until a record of
    /// whole messages); any other loss leaves the framing unknown, and the
    /// stream hunts for a record header at the start of a later chunk.
    pub fn lost(&mut self, n: usize) {
        if self.failed || n == 0 {
            return;
        }
        self.next_seq = self.next_seq.map(|s| s.wrapping_add(n as u32));
        if self.hunting {
            return;
        }
        if self.skip > 0 && n <= self.skip as usize {
            self.skip -= n as u32;
            return;
        }
        if self.skip == 0 && self.buf.len() >= 5 && !self.sslv2 {
            let len = u16::from_be_bytes([self.buf[3], self.buf[4]]) as usize;
            let remaining = (5 + len).saturating_sub(self.buf.len());
            if n <= remaining {
                if self.buf[0] == content_type::HANDSHAKE {
                    self.lose_messages();
                }
                self.skip = u32::try_from(remaining - n).unwrap_or(u32::MAX);
                let buf = std::mem::take(&mut self.buf);
                self.reuse_buf(buf);
                self.current = None;
                self.announced = false;
                return;
            }
        }
        self.hunt();
    }

    /// The stream's bytes come in order; a chunk that does not continue
    /// them means bytes were lost in between (a hole reassembly skipped).
    pub(super) fn follow(&mut self, seq: u32, len: usize) {
        if let Some(next) = self.next_seq {
            match seq_diff(seq, next) {
                0 => {}
                d if d > 0 => self.lost(d as usize),
                // Bytes again: where they stand in the framing is unknown.
                _ => self.hunt(),
            }
        }
        self.next_seq = Some(seq.wrapping_add(len as u32));
    }

    /// Forgets the record framing: bytes are discarded until a chunk starts
    /// with a plausible record header.
    pub(super) fn hunt(&mut self) {
        self.hunting = true;
        self.unconfirmed = None;
        self.skip = 0;
        let buf = std::mem::take(&mut self.buf);
        self.reuse_buf(buf);
        self.current = None;
        self.announced = false;
        self.lose_messages();
    }

    /// A handshake message in progress is gone with the lost bytes.
    fn lose_messages(&mut self) {
        self.hs_lost = true;
        self.hs_skip = 0;
        let mut msg = std::mem::take(&mut self.hs_buf);
        if msg.capacity() <= KEPT_BUFFER {
            msg.clear();
            self.hs_buf = msg;
        }
    }

    /// While hunting: does a record start where this chunk starts?
    /// Reassembly hands over each segment's new bytes as one chunk, so a
    /// chunk starts where a segment did (or where an earlier one ended):
    /// where a sender's write, and so often a record, began.
    pub(super) fn resync_at(&mut self, seq: u32, data: &[u8]) -> bool {
        // The direction's own version, once past its first record (a
        // ClientHello's record may say 3.1 where the rest say 3.3).
        let version = self.version.filter(|_| self.records > 1);
        if data.len() < 5 || !header_fits(data, version) {
            return false;
        }
        let len = usize::from(u16::from_be_bytes([data[3], data[4]]));
        let v = [data[1], data[2]];
        if data[0] == content_type::CHANGE_CIPHER_SPEC && data.get(5).is_some_and(|&b| b != 1) {
            return false;
        }
        // What follows the record in this chunk must be a header of the
        // same version (as far as the chunk goes), or nothing.
        let confirmed = match data.get(5 + len..) {
            Some(next) if !header_fits(next, Some(v)) => return false,
            Some(_) => true,
            None => false,
        };
        self.hunting = false;
        self.resyncs = self.resyncs.saturating_add(1);
        self.unconfirmed = (!confirmed).then_some((seq, v));
        true
    }
}

/// Could `h` (5 bytes, or fewer at the end of a chunk: those checked) be a
/// TLS record header? Content type 20..=24, major version 3, minor
/// `version`'s if given, else 1..=4; a length of 1..=2^14+2048, exactly 1
/// for a ChangeCipherSpec.
pub(super) fn header_fits(h: &[u8], version: Option<[u8; 2]>) -> bool {
    let ok = |i: usize, f: &dyn Fn(u8) -> bool| h.get(i).is_none_or(|&b| f(b));
    let len = match h {
        [_, _, _, hi, lo, ..] => Some(usize::from(u16::from_be_bytes([*hi, *lo]))),
        _ => None,
    };
    ok(0, &|b| {
        (content_type::CHANGE_CIPHER_SPEC..=content_type::HEARTBEAT).contains(&b)
    }) && ok(1, &|b| b == 3)
        && ok(2, &|b| match version {
            Some([_, minor]) => b == minor,
            None => (1..=4).contains(&b),
        })
        && len.is_none_or(|len| {
            (1..=MAX_RECORD_PAYLOAD).contains(&len)
                && (h[0] != content_type::CHANGE_CIPHER_SPEC || len == 1)
        })
}

/// Handshake message types a record may hold (RFC 8446 §4, RFC 5246 §7.4,
/// RFC 6066, RFC 8879 compressed_certificate, RFC 6961's status).
const MESSAGE_TYPES: [u8; 18] = [
    ht::HELLO_REQUEST,
    ht::CLIENT_HELLO,
    ht::SERVER_HELLO,
    3, // hello_verify_request (DTLS)
    ht::NEW_SESSION_TICKET,
    ht::END_OF_EARLY_DATA,
    ht::ENCRYPTED_EXTENSIONS,
    ht::CERTIFICATE,
    ht::SERVER_KEY_EXCHANGE,
    ht::CERTIFICATE_REQUEST,
    ht::SERVER_HELLO_DONE,
    ht::CERTIFICATE_VERIFY,
    ht::CLIENT_KEY_EXCHANGE,
    ht::FINISHED,
    21, // certificate_url
    ht::CERTIFICATE_STATUS,
    ht::KEY_UPDATE,
    25, // compressed_certificate
];

/// Is a handshake record's payload whole messages of known types, the last
/// ending with the record?
pub(super) fn whole_messages(mut payload: &[u8]) -> bool {
    if payload.is_empty() {
        return false;
    }
    while let [msg_type, a, b, c, rest @ ..] = payload {
        let len = u32::from_be_bytes([0, *a, *b, *c]) as usize;
        if !MESSAGE_TYPES.contains(msg_type) || len > rest.len() {
            return false;
        }
        payload = &rest[len..];
    }
    payload.is_empty()
}
