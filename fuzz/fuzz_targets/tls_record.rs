//! The TLS record layer of one direction (`RecordStream`), fed in chunk
//! sizes the input chooses, with capture losses in between.
//!
//! Input: byte 0 sets flags (bit 0 `ccs_encrypts`, bit 1
//! `capture_encrypted` of 1 + the high nibble records, bit 2 a 64-byte
//! handshake-message cap, bit 3 `encrypted` from the start); then steps: a size byte `n`; n == 0 loses
//! `7 * (m >> 1)` bytes for the next byte `m` (reported with `lost()` if
//! `m` is even, else only skipped in the sequence numbers: the stream
//! notices the hole by itself), otherwise the next `n` bytes are one
//! chunk. Checks:
//! events fit the caps and the bytes fed; once failed, the stream stays
//! failed; a stream hunting for a record header after lost bytes says
//! nothing until it resynchronises.
#![no_main]

use analyzer::tls::record::{
    Chunk, RecordStream, StreamEvent, DEFAULT_MAX_HANDSHAKE_MESSAGE, MAX_RECORD_PAYLOAD,
};
use libfuzzer_sys::fuzz_target;
use tlsrum_fuzz::Input;

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let flags = input.u8();
    let max_hs = if flags & 4 != 0 {
        64
    } else {
        DEFAULT_MAX_HANDSHAKE_MESSAGE
    };
    let mut rs = RecordStream::new(max_hs);
    rs.ccs_encrypts = flags & 1 != 0;
    rs.capture_encrypted = if flags & 2 != 0 { 1 + (flags >> 4) } else { 0 };
    rs.encrypted = flags & 8 != 0;
    let mut seq: u32 = 0xffff_ff00; // wraps within the first chunks
    let mut ts = 1.0;
    let mut fed = 0usize;
    while !input.is_empty() {
        let n = usize::from(input.u8());
        let was_failed = rs.failed();
        if n == 0 {
            let m = input.u8();
            let lost = usize::from(m >> 1) * 7;
            if m & 1 == 0 {
                rs.lost(lost);
            }
            seq = seq.wrapping_add(lost as u32);
        } else {
            let bytes = input.bytes(n);
            fed += bytes.len();
            let (hunting, resyncs) = (rs.hunting(), rs.resyncs());
            let mut events = 0;
            let mut sink = |ev: StreamEvent<'_>| {
                events += 1;
                check(ev, fed, max_hs)
            };
            let _ = rs.push(
                Chunk {
                    data: bytes,
                    seq,
                    ts,
                    ack: Some(seq ^ 0x5555),
                },
                &mut sink,
            );
            if hunting && events > 0 {
                assert!(rs.resyncs() > resyncs, "events while hunting");
            }
            seq = seq.wrapping_add(bytes.len() as u32);
        }
        if was_failed {
            assert!(rs.failed(), "a failed stream came back");
        }
        ts += 0.001;
    }
    let _ = rs.buffered();
});

/// Events fit the caps and the bytes fed.
fn check(ev: StreamEvent<'_>, fed: usize, max_hs: usize) {
    match ev {
        StreamEvent::Record(r) => {
            assert!(
                usize::from(r.len) <= MAX_RECORD_PAYLOAD,
                "record over the cap: {r:?}"
            );
        }
        StreamEvent::Handshake { len, body, .. } => {
            if let Some(b) = body {
                assert_eq!(b.len(), len, "handshake body and its length disagree");
                assert!(
                    len <= max_hs,
                    "a handshake body over the cap was kept ({len} > {max_hs})"
                );
            }
        }
        StreamEvent::Sslv2 { body, .. } => {
            assert!(body.len() <= fed, "SSLv2 body longer than the bytes fed");
        }
        StreamEvent::Encrypted { payload, .. } => {
            assert!(
                payload.len() <= MAX_RECORD_PAYLOAD,
                "encrypted record over the cap"
            );
        }
        StreamEvent::Alert { .. } => {}
    }
}
