//! The state machine's rules on small hand-made handshakes.

use super::machine::State;
use super::*;
use crate::record::{EarlyData, HandshakeKind, Transport};
use crate::tls::enums::{content_type as ct, handshake_type as ht};
use crate::tls::record::RecordInfo;

fn record(hs: &mut Handshake, dir: Dir, r: RecordInfo) {
    hs.on(dir, Event::Record(r), &mut NoMemory);
}

fn message(hs: &mut Handshake, dir: Dir, msg_type: u8, body: &[u8], r: RecordInfo) {
    hs.on(
        dir,
        Event::Message {
            msg_type,
            body: Some(body),
            ts: r.ts,
            record: Some(r),
        },
        &mut NoMemory,
    );
}

fn rec(ts: f64, content_type: u8, seq: u32, len: u16, ack: u32) -> RecordInfo {
    RecordInfo {
        minor: 3,
        ts,
        content_type,
        len,
        seq,
        end: seq + 5 + len as u32,
        ack: Some(ack),
    }
}

/// A TLS 1.2-only ClientHello with an empty session ID and no extensions.
fn client_hello12() -> Vec<u8> {
    let mut b = vec![3, 3];
    b.extend([7; 32]);
    b.extend([0, 0, 2, 0xc0, 0x2f, 1, 0]);
    b
}

fn server_hello12() -> Vec<u8> {
    let mut b = vec![3, 3];
    b.extend([9; 32]);
    b.extend([0, 0xc0, 0x2f, 0]);
    b
}

/// Drives a full TLS 1.2 handshake; `false_start` makes the client send
/// application data before the server's ChangeCipherSpec.
fn full12(false_start: bool) -> Handshake {
    let mut hs = Handshake::new(Transport::Tcp);
    let (c, s) = (Dir::Client, Dir::Server);
    let ch = rec(0.0, ct::HANDSHAKE, 1000, 60, 5000);
    record(&mut hs, c, ch);
    message(&mut hs, c, ht::CLIENT_HELLO, &client_hello12(), ch);
    let sh = rec(0.1, ct::HANDSHAKE, 5000, 42, ch.end);
    record(&mut hs, s, sh);
    message(&mut hs, s, ht::SERVER_HELLO, &server_hello12(), sh);
    message(&mut hs, s, ht::SERVER_HELLO_DONE, &[], sh);
    record(
        &mut hs,
        c,
        rec(0.2, ct::CHANGE_CIPHER_SPEC, ch.end, 1, sh.end),
    );
    if false_start {
        record(
            &mut hs,
            c,
            rec(0.2, ct::APPLICATION_DATA, ch.end + 6, 100, sh.end),
        );
    }
    record(
        &mut hs,
        s,
        rec(0.3, ct::CHANGE_CIPHER_SPEC, sh.end, 1, ch.end + 200),
    );
    hs
}

#[test]
fn tls12_full_is_two_round_trips() {
    let hs = full12(false);
    assert_eq!(hs.kind(), Some(HandshakeKind::Full));
    assert_eq!(hs.round_trips(), Some(2));
    assert!(!hs.false_start);
}

/// Issue 13: a TLS 1.2 client that sends an (encrypted) alert after its
/// Finished and closes before the server's ChangeCipherSpec abandoned the
/// handshake; if the server's CCS comes anyway, it completed.
#[test]
fn tls12_client_alert_before_server_finished() {
    let build = |server_ccs: bool| {
        let mut hs = Handshake::new(Transport::Tcp);
        let (c, s) = (Dir::Client, Dir::Server);
        let ch = rec(0.0, ct::HANDSHAKE, 1000, 60, 5000);
        record(&mut hs, c, ch);
        message(&mut hs, c, ht::CLIENT_HELLO, &client_hello12(), ch);
        let sh = rec(0.1, ct::HANDSHAKE, 5000, 42, ch.end);
        record(&mut hs, s, sh);
        message(&mut hs, s, ht::SERVER_HELLO, &server_hello12(), sh);
        message(&mut hs, s, ht::SERVER_HELLO_DONE, &[], sh);
        record(
            &mut hs,
            c,
            rec(0.2, ct::CHANGE_CIPHER_SPEC, ch.end, 1, sh.end),
        );
        record(&mut hs, c, rec(0.2, ct::HANDSHAKE, ch.end + 6, 40, sh.end));
        record(&mut hs, c, rec(0.2, ct::ALERT, ch.end + 51, 26, sh.end));
        if server_ccs {
            record(
                &mut hs,
                s,
                rec(0.3, ct::CHANGE_CIPHER_SPEC, sh.end, 1, ch.end + 82),
            );
        }
        hs.on(c, Event::Close(Close::Fin), &mut NoMemory);
        hs
    };
    let hs = build(false);
    assert_eq!(
        (hs.kind(), hs.failure.as_deref()),
        (Some(HandshakeKind::Failed), Some("encrypted_alert"))
    );
    assert_eq!(build(true).kind(), Some(HandshakeKind::Full));
}

/// Regression: browsers' TLS 1.2 False Start (corpus browsers-x509.pcapng)
/// sends data after one round trip; round_trips must say so.
#[test]
fn tls12_false_start_is_one_round_trip() {
    let hs = full12(true);
    assert_eq!(hs.kind(), Some(HandshakeKind::Full));
    assert!(hs.false_start);
    assert_eq!(hs.round_trips(), Some(1));
}

/// Issue 14: a full TLS 1.2 handshake seen from the middle of the path
/// (30 ms round trip to the server, 20 to the client) whose server thought
/// 4 ms then 2 ms and whose client thought 10 ms then 1 ms: the split
/// recovers each side's time and the identity holds exactly.
#[test]
fn think_times_from_a_middle_vantage() {
    let (to_server, to_client) = (0.030, 0.020);
    let mut hs = Handshake::new(Transport::Tcp);
    let (c, s) = (Dir::Client, Dir::Server);
    let ch = rec(0.0, ct::HANDSHAKE, 1000, 60, 5000);
    record(&mut hs, c, ch);
    message(&mut hs, c, ht::CLIENT_HELLO, &client_hello12(), ch);
    let t1 = to_server + 0.004;
    let sh = rec(t1, ct::HANDSHAKE, 5000, 42, ch.end);
    record(&mut hs, s, sh);
    message(&mut hs, s, ht::SERVER_HELLO, &server_hello12(), sh);
    message(&mut hs, s, ht::SERVER_HELLO_DONE, &[], sh);
    let t2 = t1 + to_client + 0.010;
    let cke = rec(t2, ct::HANDSHAKE, ch.end, 37, sh.end);
    let ccs = rec(t2, ct::CHANGE_CIPHER_SPEC, cke.end, 1, sh.end);
    // A record the client wrote without waiting stays in its flight.
    let fin = rec(t2 + 0.0001, ct::HANDSHAKE, ccs.end, 40, sh.end);
    for r in [cke, ccs, fin] {
        record(&mut hs, c, r);
    }
    let t3 = fin.ts + to_server + 0.002;
    let sccs = rec(t3, ct::CHANGE_CIPHER_SPEC, sh.end, 1, fin.end);
    let sfin = rec(t3, ct::HANDSHAKE, sccs.end, 40, fin.end);
    record(&mut hs, s, sccs);
    record(&mut hs, s, sfin);
    let t4 = t3 + to_client + 0.001;
    record(
        &mut hs,
        c,
        rec(t4, ct::APPLICATION_DATA, fin.end, 80, sfin.end),
    );
    let v = Vantage {
        to_server: Some(to_server),
        to_client: Some(to_client),
        connected: Some(-0.0005),
        retransmission: None,
    };
    let t = hs.timing(Some(to_server + to_client), v);
    assert_eq!(t.round_trips, Some(2));
    assert_eq!(t.server_think, Some(6.0));
    assert_eq!(t.client_think, Some(11.1));
    assert_eq!(t.client_hello_delay, Some(0.5));
    let sum = 2.0 * t.tcp_rtt.unwrap() + 6.0 + 11.1;
    assert!((t.handshake.unwrap() - sum).abs() < 1e-9, "{t:?}");
    // Seen from the server (everything shifted; the round trip is all on
    // the client's side) the split is the same.
    let at_server = Vantage {
        to_server: Some(0.0),
        to_client: Some(to_server + to_client),
        connected: None,
        retransmission: None,
    };
    let t = hs.timing(None, at_server);
    assert_eq!((t.server_think, t.client_hello_delay), (Some(66.0), None));
    // A retransmission before the handshake's end hides who waited.
    let lost = Vantage {
        retransmission: Some(0.001),
        ..v
    };
    let t = hs.timing(None, lost);
    assert_eq!((t.server_think, t.client_think), (None, None));
    let late = Vantage {
        retransmission: Some(t4 + 0.001),
        ..v
    };
    assert_eq!(hs.timing(None, late).server_think, Some(6.0));
    // Without the three-way handshake the split is unknown, not guessed.
    let t = hs.timing(None, Vantage::default());
    assert_eq!((t.server_think, t.client_think), (None, None));
}

/// Regression (gnutls-cli against gnutls-serv over a 20 ms delay line,
/// tests think_time.rs): a TLS 1.3 client wrote its compatibility
/// ChangeCipherSpec as soon as the ServerHello arrived, and the server's
/// encrypted flight came 20 ms later (its second write, held by Nagle's
/// algorithm until the ServerHello was acknowledged). The CCS's ACK made
/// the ServerHello the last server record the client had answered, so
/// those 20 ms of the server's went to client_think; the Finished is the
/// answer, and the wait is the server's.
#[test]
fn tls13_client_ccs_on_server_hello_is_no_answer() {
    use crate::tls::handshake::{ClientHello, ServerHello};
    let mut hs = Handshake::new(Transport::Tcp);
    let (c, s) = (Dir::Client, Dir::Server);
    // Seen at the server: the round trip is all on the client's side.
    let rtt = 0.020;
    let ch = rec(0.0, ct::HANDSHAKE, 1000, 278, 5000);
    record(&mut hs, c, ch);
    hs.client_hello = Some(Box::new(ClientHello {
        supported_versions: [0x0304].into_iter().collect(),
        ..Default::default()
    }));
    hs.state = State::ClientHello;
    let sh = rec(0.0004, ct::HANDSHAKE, 5000, 155, ch.end);
    record(&mut hs, s, sh);
    hs.server_hello = Some(Box::new(ServerHello {
        legacy_version: 0x0303,
        selected_version: Some(0x0304),
        cipher_suite: 0x1302,
        ..Default::default()
    }));
    hs.server_hello_end = Some(sh.end);
    hs.state = State::ServerHello13;
    let sccs = rec(0.0004, ct::CHANGE_CIPHER_SPEC, sh.end, 1, ch.end);
    record(&mut hs, s, sccs);
    // The client's CCS: sent on the ServerHello, acknowledging only it.
    let ccs = rec(rtt + 0.0008, ct::CHANGE_CIPHER_SPEC, ch.end, 1, sccs.end);
    // The rest of the flight leaves when the ServerHello is acknowledged.
    let flight = rec(rtt + 0.0006, ct::APPLICATION_DATA, sccs.end, 723, ch.end);
    record(&mut hs, s, flight);
    record(&mut hs, c, ccs);
    // The client answers the flight (which reached it at flight.ts +
    // rtt) 1.5 ms later.
    let fin = rec(
        flight.ts + rtt + 0.0015,
        ct::APPLICATION_DATA,
        ccs.end,
        69,
        flight.end,
    );
    record(&mut hs, c, fin);
    assert_eq!(hs.kind(), Some(HandshakeKind::Full));
    let at_server = Vantage {
        to_server: Some(0.0),
        to_client: Some(rtt),
        connected: None,
        retransmission: None,
    };
    let t = hs.timing(None, at_server);
    assert_eq!(t.round_trips, Some(1));
    assert_eq!((t.server_think, t.client_think), (Some(20.6), Some(1.5)));
}

/// A TLS 1.3 PSK resumption whose client sent early data (AES_256_GCM:
/// EndOfEarlyData 21 bytes, Finished 69), as openssl s_client sends it to
/// nginx with ssl_early_data on. `client_tail` is the client's records
/// after the server's flight: (length, same segment as the previous one).
fn resumed13_early(client_tail: &[(u16, bool)]) -> Handshake {
    use crate::tls::handshake::{ClientHello, PskOffer, ServerHello};
    let mut hs = Handshake::new(Transport::Tcp);
    let (c, s) = (Dir::Client, Dir::Server);
    let ch = rec(0.0, ct::HANDSHAKE, 1000, 578, 5000);
    record(&mut hs, c, ch);
    hs.client_hello = Some(Box::new(ClientHello {
        supported_versions: [0x0304].into_iter().collect(),
        psk: Some(PskOffer {
            identities: 1,
            first_identity_len: 192,
        }),
        early_data: true,
        ..Default::default()
    }));
    hs.state = State::ClientHello;
    let early = rec(0.0, ct::APPLICATION_DATA, ch.end, 54, 5000);
    record(&mut hs, c, early);
    let sh = rec(0.1, ct::HANDSHAKE, 5000, 128, early.end);
    record(&mut hs, s, sh);
    hs.server_hello = Some(Box::new(ServerHello {
        legacy_version: 0x0303,
        selected_version: Some(0x0304),
        psk_selected: Some(0),
        cipher_suite: 0x1302,
        ..Default::default()
    }));
    hs.server_hello_end = Some(sh.end);
    hs.state = State::ServerHello13;
    record(
        &mut hs,
        s,
        rec(0.1, ct::CHANGE_CIPHER_SPEC, sh.end, 1, early.end),
    );
    let ee = rec(0.1, ct::APPLICATION_DATA, sh.end + 6, 46, early.end);
    let fin = rec(0.1, ct::APPLICATION_DATA, ee.end, 69, early.end);
    let response = rec(0.1002, ct::APPLICATION_DATA, fin.end, 162, early.end);
    for r in [ee, fin, response] {
        record(&mut hs, s, r);
    }
    let (mut seq, mut ts) = (early.end, 0.2);
    for &(len, same_segment) in client_tail {
        if !same_segment {
            ts += 0.0001;
        }
        let r = rec(ts, ct::APPLICATION_DATA, seq, len, response.end);
        record(&mut hs, c, r);
        seq = r.end;
    }
    hs
}

/// Regression: without a key log, 0-RTT that nginx accepted (its log said
/// $ssl_early_data=1; delay-line capture at 20/100/260 ms) came out
/// "attempted" with round_trips null, though the client's EndOfEarlyData
/// was on the wire.
#[test]
fn accepted_early_data_was_attempted_despite_end_of_early_data() {
    let hs = resumed13_early(&[(21, false), (69, true)]);
    assert_eq!(hs.kind(), Some(HandshakeKind::Resumed));
    assert_eq!(hs.early_data(), EarlyData::Accepted);
    assert_eq!(hs.round_trips(), Some(0));
}

/// Regression: the 0.5-RTT response to accepted early data was sent
/// before the client's Finished arrived, so ttfb was null.
#[test]
fn zero_rtt_ttfb_was_null() {
    let hs = resumed13_early(&[(21, false), (69, true)]);
    let t = hs.timing(None, Vantage::default());
    assert_eq!(t.ttfb, Some(100.2));
    assert_eq!(t.handshake, Some(200.1));
}

#[test]
fn early_data_without_end_of_early_data_stays_attempted() {
    // Rejected (only a Finished), a record that is no EndOfEarlyData, or
    // one not followed by a Finished-sized record.
    for tail in [
        &[(69, false)][..],
        &[(22, false), (69, true)],
        &[(21, false), (53, true)],
        &[(21, false), (300, false), (69, false)],
    ] {
        let hs = resumed13_early(tail);
        assert_eq!(hs.early_data(), EarlyData::Attempted, "{tail:?}");
        assert_eq!(hs.round_trips(), None);
    }
}

/// Regression (Chromium and gnutls-cli against nginx): 0-RTT data the
/// client wrote after the kernel had the ServerHello but before it read
/// the server's flight acknowledges the ServerHello too. It completed
/// the handshake (too early), and hid the EndOfEarlyData; gnutls-cli's
/// EndOfEarlyData and Finished travel in separate segments.
#[test]
fn late_zero_rtt_data_is_not_the_finished() {
    for (tail, accepted) in [
        (&[(566, false), (21, false), (69, true)][..], true),
        (&[(21, false), (69, false)], true),
        (&[(566, false), (69, false)], false),
    ] {
        let hs = resumed13_early(tail);
        assert_eq!(hs.kind(), Some(HandshakeKind::Resumed), "{tail:?}");
        let want = if accepted {
            EarlyData::Accepted
        } else {
            EarlyData::Attempted
        };
        assert_eq!(hs.early_data(), want, "{tail:?}");
        let fin = hs.late().completed_by.unwrap();
        assert_eq!(fin.len, 69, "{tail:?}: completed by the Finished");
        // Handshake bytes: EndOfEarlyData and Finished, never the 0-RTT data.
        let client_bytes = hs.record_bytes().client_handshake;
        let flight: u64 = if accepted { 5 + 21 + 5 + 69 } else { 5 + 69 };
        assert_eq!(client_bytes, Some(5 + 578 + flight), "{tail:?}");
    }
    // A padded Finished is never recognised by size: the first record
    // after the ServerHello completes the handshake once it closes.
    let mut hs = resumed13_early(&[(566, false), (120, false)]);
    assert_eq!(hs.kind(), Some(HandshakeKind::Incomplete));
    hs.on(Dir::Client, Event::Close(Close::Fin), &mut NoMemory);
    assert_eq!(
        (hs.kind(), hs.late().completed_by.map(|r| r.len)),
        (Some(HandshakeKind::Resumed), Some(566))
    );
    assert_eq!(hs.early_data(), EarlyData::Attempted);
    // gnutls-cli sent its EndOfEarlyData, never its Finished, and was
    // reset: nothing that could be a Finished, so the handshake failed.
    let mut hs = resumed13_early(&[(21, false)]);
    hs.on(Dir::Client, Event::Close(Close::Reset), &mut NoMemory);
    assert_eq!(
        (hs.kind(), hs.failure.as_deref()),
        (Some(HandshakeKind::Failed), Some("reset"))
    );
}

/// Regression (issue 13): a server answering in a TLS 1.3 experiment
/// version (0x7e02) echoes the client's compatibility-mode session ID; that
/// echo was read as TLS 1.2 session-ID resumption.
#[test]
fn experiment_versions_have_tls13_semantics() {
    for version in [0x7e02u16, 0x7f17, 0xfb17, 0x0304] {
        let sv = version.to_be_bytes();
        let mut ch = vec![3, 3];
        ch.extend([7; 32]);
        ch.push(32);
        ch.extend([5; 32]);
        ch.extend([0, 2, 0x13, 0x01, 1, 0]);
        let exts = [0, 0x2b, 0, 3, 2, sv[0], sv[1]];
        ch.extend((exts.len() as u16).to_be_bytes());
        ch.extend(exts);
        let mut sh = vec![3, 3];
        sh.extend([9; 32]);
        sh.push(32);
        sh.extend([5; 32]);
        sh.extend([0x13, 0x01, 0]);
        let exts = [0, 0x2b, 0, 2, sv[0], sv[1]];
        sh.extend((exts.len() as u16).to_be_bytes());
        sh.extend(exts);
        let mut hs = Handshake::new(Transport::Tcp);
        let chr = rec(0.0, ct::HANDSHAKE, 1000, ch.len() as u16 + 4, 5000);
        record(&mut hs, Dir::Client, chr);
        message(&mut hs, Dir::Client, ht::CLIENT_HELLO, &ch, chr);
        let shr = rec(0.1, ct::HANDSHAKE, 5000, sh.len() as u16 + 4, chr.end);
        record(&mut hs, Dir::Server, shr);
        message(&mut hs, Dir::Server, ht::SERVER_HELLO, &sh, shr);
        record(
            &mut hs,
            Dir::Server,
            rec(0.1, ct::CHANGE_CIPHER_SPEC, shr.end, 1, chr.end),
        );
        assert_eq!(hs.resumption(), None, "{version:#06x}");
        assert!(hs.is_tls13(), "{version:#06x}");
    }
}

fn view(client: &str) -> TransportView {
    TransportView {
        transport: Transport::Tcp,
        first_ts: 0.0,
        client: (client.parse().unwrap(), 40000),
        server: ("10.0.0.2".parse().unwrap(), 443),
        rtt: None,
        vantage: Vantage::default(),
        bytes: Default::default(),
        notes: Vec::new(),
        proxied_client: None,
    }
}

/// A ServerHello body with a suite and extensions (type, data).
fn server_hello_with(random: u8, suite: u16, exts: &[(u16, &[u8])]) -> Vec<u8> {
    let mut b = vec![3, 3];
    b.extend([random; 32]);
    b.push(0);
    b.extend(suite.to_be_bytes());
    b.push(0);
    let mut e = Vec::new();
    for (typ, data) in exts {
        e.extend(typ.to_be_bytes());
        e.extend((data.len() as u16).to_be_bytes());
        e.extend(*data);
    }
    b.extend((e.len() as u16).to_be_bytes());
    b.extend(e);
    b
}

/// ALPN extension data naming one protocol.
fn alpn(p: &[u8]) -> Vec<u8> {
    let mut d = ((p.len() + 1) as u16).to_be_bytes().to_vec();
    d.push(p.len() as u8);
    d.extend(p);
    d
}

#[test]
fn alpn_negotiated_from_a_tls12_server_hello() {
    let mut hs = Handshake::new(Transport::Tcp);
    let ch = rec(0.0, ct::HANDSHAKE, 1000, 60, 5000);
    message(
        &mut hs,
        Dir::Client,
        ht::CLIENT_HELLO,
        &client_hello12(),
        ch,
    );
    let body = server_hello_with(9, 0xc02f, &[(0xff01, &[0]), (16, &alpn(b"h2"))]);
    let sh = rec(0.1, ct::HANDSHAKE, 5000, body.len() as u16 + 4, ch.end);
    message(&mut hs, Dir::Server, ht::SERVER_HELLO, &body, sh);
    let r = hs.take_record(view("10.0.0.1"), Finish::CaptureEnd);
    assert_eq!(r.alpn_negotiated.as_deref(), Some("h2"));
    assert_eq!(r.ja4s.as_deref().map(|s| &s[..13]), Some("t1202h2_c02f_"));
    assert_eq!(r.ja4.as_deref().map(|s| &s[..10]), Some("t12i010000"));
    assert_eq!(r.family, crate::record::Family::Ipv4);
}

/// TLS 1.3 hides the choice in EncryptedExtensions: null unless a key log
/// opened it, never the client's first offer.
#[test]
fn alpn_negotiated_tls13_only_from_decrypted_encrypted_extensions() {
    let build = |decrypted: Option<&[u8]>| {
        let mut hs = resumed13_early(&[(21, false), (69, true)]);
        hs.client_hello.as_mut().unwrap().alpn = ["h2", "http/1.1"].into_iter().collect();
        if let Some(ee) = decrypted {
            let r = rec(0.1, ct::APPLICATION_DATA, 0, 46, 0);
            message(&mut hs, Dir::Server, ht::ENCRYPTED_EXTENSIONS, ee, r);
        }
        hs.take_record(view("2001:db8::1"), Finish::Done)
    };
    let r = build(None);
    assert_eq!(r.alpn_negotiated, None);
    assert_eq!(r.family, crate::record::Family::Ipv6);
    // EncryptedExtensions: early_data, then ALPN "http/1.1".
    let mut ee = vec![0, 0, 0, 42, 0, 0, 0, 16, 0, 11];
    ee.extend(alpn(b"http/1.1"));
    ee[1] = (ee.len() - 2) as u8;
    let r = build(Some(&ee));
    assert_eq!(r.alpn_negotiated.as_deref(), Some("http/1.1"));
    assert_eq!(r.early_data, Some(EarlyData::Accepted));
    assert!(r.notes.contains(&"decrypted_with_keylog"));
}

/// After a HelloRetryRequest, JA4S is the HelloRetryRequest's (the first
/// ServerHello, as FoxIO's tools take it); alpn_negotiated is never read
/// from it.
#[test]
fn ja4s_after_hello_retry_request_is_the_first_server_hello() {
    let mut hs = Handshake::new(Transport::Tcp);
    let ch = rec(0.0, ct::HANDSHAKE, 1000, 60, 5000);
    message(
        &mut hs,
        Dir::Client,
        ht::CLIENT_HELLO,
        &client_hello12(),
        ch,
    );
    let versions: &[u8] = &[3, 4];
    let hrr = server_hello_with(0, 0x1301, &[(43, versions), (51, &[0, 0x1d])]);
    let mut hrr = hrr;
    hrr[2..34].copy_from_slice(&crate::tls::enums::HRR_RANDOM);
    let r1 = rec(0.1, ct::HANDSHAKE, 5000, 100, ch.end);
    message(&mut hs, Dir::Server, ht::SERVER_HELLO, &hrr, r1);
    assert!(hs.hrr);
    let ch2 = rec(0.2, ct::HANDSHAKE, ch.end, 60, r1.end);
    message(
        &mut hs,
        Dir::Client,
        ht::CLIENT_HELLO,
        &client_hello12(),
        ch2,
    );
    let sh = server_hello_with(9, 0x1302, &[(43, versions)]);
    let r2 = rec(0.3, ct::HANDSHAKE, r1.end, 100, ch2.end);
    message(&mut hs, Dir::Server, ht::SERVER_HELLO, &sh, r2);
    let r = hs.take_record(view("10.0.0.1"), Finish::CaptureEnd);
    assert_eq!(r.ja4s.as_deref().map(|s| &s[..13]), Some("t130200_1301_"));
    assert_eq!(r.cipher.as_deref(), Some("TLS_AES_256_GCM_SHA384"));
    assert_eq!(r.alpn_negotiated, None);
}

/// TLS 1.3 sends the Certificate encrypted (RFC 8446 §4.4.2: a request
/// context, and extensions after each entry): `certs` is null unless a key
/// log opened it, then filled as TLS 1.2's is.
#[test]
fn tls13_certificate_from_decrypted_flight_fills_certs() {
    const LEAF: &[u8] = include_bytes!("testdata/leaf-ed25519.der");
    let build = |decrypted: Option<&[u8]>| {
        let mut hs = Handshake::new(Transport::Tcp);
        let ch = rec(0.0, ct::HANDSHAKE, 1000, 60, 5000);
        message(
            &mut hs,
            Dir::Client,
            ht::CLIENT_HELLO,
            &client_hello12(),
            ch,
        );
        let versions: &[u8] = &[3, 4];
        let sh = server_hello_with(9, 0x1301, &[(43, versions)]);
        let r1 = rec(0.1, ct::HANDSHAKE, 5000, 90, ch.end);
        message(&mut hs, Dir::Server, ht::SERVER_HELLO, &sh, r1);
        if let Some(body) = decrypted {
            let r = rec(0.1, ct::APPLICATION_DATA, r1.end, 700, ch.end);
            message(&mut hs, Dir::Server, ht::CERTIFICATE, body, r);
        }
        hs.take_record(view("10.0.0.1"), Finish::CaptureEnd)
    };
    assert_eq!(build(None).certs, None);
    // Empty request context; the leaf with an (empty-bodied) extension,
    // then a 3-byte "intermediate" with none.
    let u24 = |n: usize| [(n >> 16) as u8, (n >> 8) as u8, n as u8];
    let mut list = Vec::new();
    list.extend(u24(LEAF.len()));
    list.extend(LEAF);
    list.extend([0, 4, 0, 5, 0, 0]);
    list.extend(u24(3));
    list.extend([1, 2, 3, 0, 0]);
    let mut body = vec![0];
    body.extend(u24(list.len()));
    body.extend(&list);
    let c = build(Some(&body))
        .certs
        .expect("certs from the decrypted Certificate");
    assert_eq!((c.count, c.bytes), (2, LEAF.len() + 3));
    assert_eq!(c.leaf_subject.as_deref(), Some("CN=leaf.tlsrum.test"));
    assert_eq!(c.leaf_issuer.as_deref(), Some("CN=leaf.tlsrum.test"));
    // openssl x509 -noout -dates: Nov 24 20:15:09 2026 / Nov 21 20:15:09 2036 GMT.
    assert_eq!(
        c.not_before.map(|t| t.to_string()).as_deref(),
        Some("2026-11-24T20:15:09Z")
    );
    assert_eq!(
        c.not_after.map(|t| t.to_string()).as_deref(),
        Some("2036-11-21T20:15:09Z")
    );
    // The TLS 1.2 form (no context, no entry extensions) does not parse as 1.3.
    let mut tls12 = Vec::new();
    tls12.extend(u24(LEAF.len() + 3));
    tls12.extend(u24(LEAF.len()));
    tls12.extend(LEAF);
    assert_eq!(build(Some(&tls12)).certs, None);
}

fn opened(hs: &mut Handshake, r: RecordInfo, inner: u8) {
    hs.on(
        Dir::Server,
        Event::Opened { record: r, inner },
        &mut NoMemory,
    );
}

/// Regression: a TLS 1.3 server's NewSessionTicket records are
/// application_data on the wire, and nginx under load sent them before the
/// response, so `ttfb` was the first ticket even with a key log that shows
/// which record is which (lab: 83.2 ms against curl's 87.2 ms).
#[test]
fn ttfb_was_the_ticket_before_the_response() {
    use crate::tls::handshake::{ClientHello, ServerHello};
    let mut hs = Handshake::new(Transport::Tcp);
    let (c, s) = (Dir::Client, Dir::Server);
    let ch = rec(0.0, ct::HANDSHAKE, 1000, 278, 5000);
    record(&mut hs, c, ch);
    hs.client_hello = Some(Box::new(ClientHello {
        supported_versions: [0x0304].into_iter().collect(),
        ..Default::default()
    }));
    hs.state = State::ClientHello;
    let sh = rec(0.040, ct::HANDSHAKE, 5000, 155, ch.end);
    record(&mut hs, s, sh);
    hs.server_hello = Some(Box::new(ServerHello {
        legacy_version: 0x0303,
        selected_version: Some(0x0304),
        cipher_suite: 0x1302,
        ..Default::default()
    }));
    hs.server_hello_end = Some(sh.end);
    hs.state = State::ServerHello13;
    let flight = rec(0.040, ct::APPLICATION_DATA, sh.end, 2000, ch.end);
    record(&mut hs, s, flight);
    let fin = rec(0.080, ct::APPLICATION_DATA, ch.end, 69, flight.end);
    let request = rec(0.080, ct::APPLICATION_DATA, fin.end, 100, flight.end);
    record(&mut hs, c, fin);
    record(&mut hs, c, request);
    let ticket1 = rec(0.120, ct::APPLICATION_DATA, flight.end, 250, request.end);
    let ticket2 = rec(0.120, ct::APPLICATION_DATA, ticket1.end, 250, request.end);
    let response = rec(0.124, ct::APPLICATION_DATA, ticket2.end, 500, request.end);
    for r in [ticket1, ticket2, response] {
        record(&mut hs, s, r);
    }
    // Without a key log: the first ticket (the documented limit).
    assert_eq!(hs.timing(None, Vantage::default()).ttfb, Some(120.0));
    opened(&mut hs, ticket1, ct::HANDSHAKE);
    opened(&mut hs, ticket2, ct::HANDSHAKE);
    opened(&mut hs, response, ct::APPLICATION_DATA);
    assert_eq!(hs.timing(None, Vantage::default()).ttfb, Some(124.0));
}

/// With 0-RTT accepted, a ticket right behind the server's Finished is not
/// its 0.5-RTT response either, once the key log opened it.
#[test]
fn half_rtt_ttfb_skips_an_opened_ticket() {
    let mut hs = resumed13_early(&[(21, false), (69, true)]);
    let ticket = hs
        .records
        .of(Dir::Server)
        .iter()
        .rfind(|r| r.content_type == ct::APPLICATION_DATA)
        .copied()
        .unwrap();
    let response = rec(
        0.1003,
        ct::APPLICATION_DATA,
        ticket.end,
        162,
        ticket.ack.unwrap(),
    );
    record(&mut hs, Dir::Server, response);
    assert_eq!(hs.timing(None, Vantage::default()).ttfb, Some(100.2));
    opened(&mut hs, ticket, ct::HANDSHAKE);
    assert_eq!(hs.timing(None, Vantage::default()).ttfb, Some(100.3));
}

/// A TLS 1.3 full handshake whose client sends its Finished at 80 ms and
/// its request `idle` seconds later (None: no request); the server's
/// ticket follows the Finished at once.
fn full13_used_after(idle: Option<f64>) -> Handshake {
    use crate::tls::handshake::{ClientHello, ServerHello};
    let mut hs = Handshake::new(Transport::Tcp);
    let (c, s) = (Dir::Client, Dir::Server);
    let ch = rec(0.0, ct::HANDSHAKE, 1000, 278, 5000);
    record(&mut hs, c, ch);
    hs.client_hello = Some(Box::new(ClientHello {
        supported_versions: [0x0304].into_iter().collect(),
        ..Default::default()
    }));
    hs.state = State::ClientHello;
    let sh = rec(0.040, ct::HANDSHAKE, 5000, 155, ch.end);
    record(&mut hs, s, sh);
    hs.server_hello = Some(Box::new(ServerHello {
        legacy_version: 0x0303,
        selected_version: Some(0x0304),
        cipher_suite: 0x1302,
        ..Default::default()
    }));
    hs.server_hello_end = Some(sh.end);
    hs.state = State::ServerHello13;
    let flight = rec(0.040, ct::APPLICATION_DATA, sh.end, 2000, ch.end);
    record(&mut hs, s, flight);
    let fin = rec(0.080, ct::APPLICATION_DATA, ch.end, 69, flight.end);
    record(&mut hs, c, fin);
    let ticket = rec(0.120, ct::APPLICATION_DATA, flight.end, 250, fin.end);
    record(&mut hs, s, ticket);
    if let Some(idle) = idle {
        let request = rec(0.080 + idle, ct::APPLICATION_DATA, fin.end, 100, ticket.end);
        record(&mut hs, c, request);
    }
    hs
}

/// idle_before_use runs from the client's Finished (TLS 1.3's handshake
/// end) to its first record after it; until that record comes, the
/// handshake awaits its use (its record is held back), and a connection
/// that never sends one has none.
#[test]
fn idle_before_use_from_the_finished_to_the_first_request() {
    let unused = full13_used_after(None);
    assert!(unused.awaits_use());
    assert_eq!(
        unused.timing(None, Vantage::default()).idle_before_use,
        None
    );
    for (idle, want) in [(0.0, 0.0), (0.150, 150.0), (2.5, 2500.0)] {
        let hs = full13_used_after(Some(idle));
        assert!(!hs.awaits_use());
        let t = hs.timing(None, Vantage::default());
        assert_eq!(t.handshake, Some(80.0));
        assert_eq!(t.idle_before_use, Some(want), "idle {idle}");
    }
}

/// A TLS 1.3 client that closes right after its Finished (gnutls-cli's
/// first connection, a health check): its close_notify is an
/// application_data record of an alert's length. It is no use and no
/// request, and the server's close_notify in answer is no first data
/// (ttfb was measured to it, or to nothing, by which of the two crossing
/// close_notify and RST a tap saw first). The record is timed at the
/// client's close: nothing more is to come.
#[test]
fn a_close_notify_is_no_request_and_its_answer_no_data() {
    let mut hs = full13_used_after(None);
    let (client, server) = hs.records.both();
    let (fin, ticket) = (client[client.len() - 1], server[server.len() - 1]);
    let close = rec(0.130, ct::APPLICATION_DATA, fin.end, 19, ticket.end);
    record(&mut hs, Dir::Client, close);
    assert!(!hs.awaits_use() && hs.fully_timed());
    let answer = rec(0.131, ct::APPLICATION_DATA, ticket.end, 19, close.end);
    record(&mut hs, Dir::Server, answer);
    let t = hs.timing(None, Vantage::default());
    assert_eq!((t.ttfb, t.idle_before_use), (None, None));
    assert_eq!(t.handshake, Some(80.0));
    // After a request, an alert-sized record changes nothing.
    let mut used = full13_used_after(Some(0.150));
    let request = used.records.of(Dir::Client).last().copied().unwrap();
    let response = rec(0.240, ct::APPLICATION_DATA, ticket.end, 500, request.end);
    record(&mut used, Dir::Server, response);
    let close = rec(0.250, ct::APPLICATION_DATA, request.end, 19, response.end);
    record(&mut used, Dir::Client, close);
    let t = used.timing(None, Vantage::default());
    assert_eq!((t.ttfb, t.idle_before_use), (Some(240.0), Some(150.0)));
}

/// 0-RTT data is use before the handshake's end: idle_before_use 0, and
/// the record does not wait for a later request.
#[test]
fn zero_rtt_data_is_used_at_once() {
    let hs = resumed13_early(&[(21, false), (69, true)]);
    assert!(!hs.awaits_use());
    assert_eq!(
        hs.timing(None, Vantage::default()).idle_before_use,
        Some(0.0)
    );
}

/// Full TLS 1.2: the handshake ends at the client's ACK of the server's
/// Finished when it sends nothing at once; its data then is the first use.
/// False Start data is use before the end: idle 0.
#[test]
fn tls12_idle_before_use_from_the_ack_of_the_finished() {
    let mut hs = full12(false);
    assert_eq!(hs.state(), State::Complete);
    hs.late_mut().client_acked_finished = Some(0.4);
    assert!(hs.awaits_use());
    assert_eq!(hs.timing(None, Vantage::default()).handshake, Some(400.0));
    let data = rec(1.4, ct::APPLICATION_DATA, 1300, 100, 6000);
    record(&mut hs, Dir::Client, data);
    assert!(!hs.awaits_use());
    let t = hs.timing(None, Vantage::default());
    assert_eq!(t.handshake, Some(400.0));
    assert_eq!(t.idle_before_use, Some(1000.0));
    let fs = full12(true);
    assert_eq!(
        fs.timing(None, Vantage::default()).idle_before_use,
        Some(0.0)
    );
}
