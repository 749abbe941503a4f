//! QUIC datagrams into `QuicTracker::on_datagram`: raw datagrams, and
//! Initial packets the harness seals with the real Initial keys (RFC 9001
//! §5), so that mutations of their plaintext get past decryption to the
//! frame parser, the CRYPTO stream and ClientHello/ServerHello parsing.
//!
//! Input: byte 0 sets flags (bit 0: 2 connections at most, bit 1: 0.5 s
//! idle timeout); then operations, each an op byte and a time step byte:
//! - op % 4 == 0: a raw datagram (16-bit length, bytes); bit 4 says server
//!   to client, bit 5 picks one of two clients;
//! - op % 4 == 1, 2, 3: a sealed Initial from the client (1), from the
//!   server (2, keyed by that client's first DCID), or from the client with
//!   a raw tail coalesced after it (3): version byte (mod 5: v1, v2,
//!   draft-29, draft-23, mvfst 2), DCID and SCID (length byte mod 21, then
//!   bytes), packet number byte, its length (mod 4, + 1), token (length byte
//!   mod 32, bytes), frames (mode byte mod 3: one CRYPTO frame at a 16-bit
//!   offset with a 16-bit-prefixed body; raw 16-bit-prefixed frames; a
//!   prefixed body split at a byte into two CRYPTO frames sent in reverse),
//!   and for op 3 the prefixed tail. Bit 6 of a client op: keep the
//!   connection's first DCID's keys (else this DCID starts a connection);
//!   bit 7 of op: no padding to 1200 bytes.
//!
//! Checks: every datagram is counted; every connection counted is one
//! record out; each record is valid NDJSON.
#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use analyzer::quic::packet::Version;
use analyzer::quic::version::TLS;
use analyzer::quic::{QuicStats, QuicTracker};
use analyzer::Endpoint;
use libfuzzer_sys::fuzz_target;
use tlsrum_fuzz::{crypto_frame, seal_initial, Input, Side};


fn cid<'a>(input: &mut Input<'a>) -> &'a [u8] {
    let n = usize::from(input.u8() % 21);
    input.bytes(n)
}

fn frames(input: &mut Input<'_>) -> Vec<u8> {
    match input.u8() % 3 {
        0 => {
            let offset = u64::from(input.u16());
            crypto_frame(offset, input.prefixed())
        }
        1 => input.prefixed().to_vec(),
        _ => {
            let body = input.prefixed();
            let split = usize::from(input.u8()).min(body.len());
            let mut f = crypto_frame(split as u64, &body[split..]);
            f.extend(crypto_frame(0, &body[..split]));
            f
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let flags = input.u8();
    let max_conns = if flags & 1 != 0 { 2 } else { 1000 };
    let idle = if flags & 2 != 0 { 0.5 } else { 30.0 };
    let mut tracker = QuicTracker::new(max_conns, idle);
    let mut stats = QuicStats::default();
    let server: Endpoint = (IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)), 443);
    let clients: [Endpoint; 2] = [
        (IpAddr::V4(Ipv4Addr::new(198, 51, 100, 7)), 50_000),
        (
            IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 7)),
            50_001,
        ),
    ];
    // Each client's first DCID: the server's Initial keys come from it.
    let mut first_dcid: [Option<Vec<u8>>; 2] = [None, None];
    let mut ts = 1_700_000_000.0;
    let mut datagrams = 0u64;
    let mut records = Vec::new();
    while !input.is_empty() {
        let op = input.u8();
        ts += f64::from(input.u8()) / 64.0;
        let c = usize::from(op >> 5 & 1);
        let (src, dst, datagram) = if op.is_multiple_of(4) {
            let d = input.prefixed().to_vec();
            if op & 0x10 != 0 {
                (server, clients[c], d)
            } else {
                (clients[c], server, d)
            }
        } else {
            // Any version of the table (v1, v2, drafts, mvfst, Google T05x).
            let row = &TLS[usize::from(input.u8()) % TLS.len()];
            let version = Version::from_wire(row.wire).expect("a row of the table");
            let dcid = cid(&mut input);
            let scid = cid(&mut input);
            let pn = u32::from(input.u8());
            let pn_len = usize::from(input.u8() % 4) + 1;
            let token_len = usize::from(input.u8() % 32);
            let token = input.bytes(token_len);
            let frames = frames(&mut input);
            let pad_to = if op & 0x80 != 0 { 0 } else { 1200 };
            let side = if op % 4 == 2 {
                Side::Server
            } else {
                Side::Client
            };
            // Initial keys come from the client's first DCID of the
            // connection: a client packet with bit 6 of op clear starts a
            // new connection (its DCID becomes the key), one with bit 6 set
            // goes on with the first DCID's keys, as do the server's.
            let key = if side == Side::Client && op & 0x40 == 0 {
                first_dcid[c] = Some(dcid.to_vec());
                dcid.to_vec()
            } else {
                first_dcid[c].clone().unwrap_or_else(|| dcid.to_vec())
            };
            let mut d = seal_initial(
                version, side, &key, dcid, scid, token, pn, pn_len, &frames, pad_to,
            );
            if op % 4 == 3 {
                d.extend_from_slice(input.prefixed());
            }
            if side == Side::Server {
                (server, clients[c], d)
            } else {
                (clients[c], server, d)
            }
        };
        tracker.on_datagram(ts, src, dst, &datagram, &mut stats);
        datagrams += 1;
        records.append(&mut tracker.out);
        if datagrams.is_multiple_of(16) {
            tracker.expire_idle(ts, &mut stats);
            records.append(&mut tracker.out);
        }
    }
    tracker.finish_all(&mut stats);
    records.append(&mut tracker.out);
    assert_eq!(stats.datagrams, datagrams, "every datagram counted");
    assert_eq!(
        stats.connections,
        records.len() as u64,
        "every connection counted is one record"
    );
    let mut out = Vec::new();
    for r in &records {
        out.clear();
        analyzer::output::ndjson::encode(&mut out, r);
        tlsrum_fuzz::check_json(
            std::str::from_utf8(&out)
                .expect("NDJSON is UTF-8")
                .trim_end(),
        );
    }
});
