//! Cases of the record layer: framing, splits, losses, resynchronisation.

use super::*;

fn collect(stream: &mut RecordStream, pieces: &[&[u8]]) -> Vec<String> {
    let mut out = Vec::new();
    let mut seq = 1000u32;
    for (i, p) in pieces.iter().enumerate() {
        let chunk = Chunk {
            data: p,
            seq,
            ts: i as f64,
            ack: Some(7),
        };
        seq = seq.wrapping_add(p.len() as u32);
        stream
            .push(chunk, &mut |ev| {
                out.push(match ev {
                    StreamEvent::Record(r) => {
                        format!("rec {} {} @{} seq{}", r.content_type, r.len, r.ts, r.seq)
                    }
                    StreamEvent::Handshake { msg_type, body, .. } => {
                        format!("hs {} {:?}", msg_type, body.map(|b| b.len()))
                    }
                    StreamEvent::Alert {
                        level, description, ..
                    } => format!("alert {level} {description}"),
                    StreamEvent::Sslv2 { msg_type, .. } => format!("v2 {msg_type}"),
                    StreamEvent::Encrypted { payload, .. } => format!("enc {}", payload.len()),
                })
            })
            .unwrap();
    }
    out
}

/// Two handshake messages in one record, the second one continued in a
/// second record, the whole thing cut at every byte.
#[test]
fn messages_across_records_split_anywhere() {
    let mut wire = vec![22, 3, 3, 0, 11, 1, 0, 0, 2, 0xaa, 0xbb, 2, 0, 0, 5, 0xcc];
    wire.extend([22, 3, 3, 0, 4, 0xdd, 0xee, 0xff, 0x11]);
    wire.extend([23, 3, 3, 0, 3, 1, 2, 3]);
    let whole = collect(&mut RecordStream::new(1024), &[&wire]);
    assert_eq!(
        whole,
        [
            "rec 22 11 @0 seq1000",
            "hs 1 Some(2)",
            "rec 22 4 @0 seq1016",
            "hs 2 Some(5)",
            "rec 23 3 @0 seq1025"
        ]
    );
    for cut in 1..wire.len() {
        let got = collect(&mut RecordStream::new(1024), &[&wire[..cut], &wire[cut..]]);
        let plain: Vec<String> = got
            .iter()
            .map(|s| s.split(" @").next().unwrap().to_string())
            .collect();
        let want: Vec<String> = whole
            .iter()
            .map(|s| s.split(" @").next().unwrap().to_string())
            .collect();
        assert_eq!(plain, want, "cut at {cut}");
    }
}

#[test]
fn capture_keeps_one_encrypted_record_whole() {
    let mut s = RecordStream::new(1024);
    s.capture_encrypted = 1;
    let wire = [23u8, 3, 3, 0, 3, 1, 2, 3, 23, 3, 3, 0, 2, 9, 9];
    let got = collect(&mut s, &[&wire[..6], &wire[6..]]);
    assert_eq!(got, ["rec 23 3 @0 seq1000", "enc 3", "rec 23 2 @1 seq1008"]);
}

#[test]
fn record_time_is_first_byte_time() {
    let wire = [22u8, 3, 1, 0, 4, 1, 0, 0, 0];
    let got = collect(&mut RecordStream::new(1024), &[&wire[..3], &wire[3..]]);
    assert_eq!(got[0], "rec 22 4 @0 seq1000");
}

#[test]
fn oversized_message_is_reported_without_body() {
    let wire = [22u8, 3, 3, 0, 8, 11, 0, 0, 4, 1, 2, 3, 4];
    let got = collect(&mut RecordStream::new(2), &[&wire]);
    assert_eq!(got[1], "hs 11 None");
}

#[test]
fn garbage_is_an_error_not_a_panic() {
    let mut s = RecordStream::new(1024);
    let chunk = Chunk {
        data: b"GET / HTTP/1.1\r\n",
        seq: 0,
        ts: 0.0,
        ack: None,
    };
    assert_eq!(
        s.push(chunk, &mut |_| {}),
        Err(StreamError::BadRecordHeader)
    );
    assert!(s.failed());
}

#[test]
fn loss_inside_a_record_resynchronises_at_the_next() {
    let mut s = RecordStream::new(1024);
    let mut events = 0;
    let first = [22u8, 3, 3, 0, 6, 1, 0];
    s.push(
        Chunk {
            data: &first,
            seq: 0,
            ts: 0.0,
            ack: None,
        },
        &mut |_| events += 1,
    )
    .unwrap();
    s.lost(3);
    let rest = [9u8, 20, 3, 3, 0, 1, 1];
    let mut types = Vec::new();
    s.push(
        Chunk {
            data: &rest,
            seq: 10,
            ts: 0.0,
            ack: None,
        },
        &mut |e| {
            if let StreamEvent::Record(r) = e {
                types.push(r.content_type)
            }
        },
    )
    .unwrap();
    assert_eq!(types, [20]);
    assert_eq!(s.resyncs(), 0, "the framing was never lost");
    s.lost(1);
    assert!(s.hunting() && !s.failed(), "a loss at a record boundary");
}

/// Events of `chunks` (seq, bytes) fed in order, as strings.
fn feed(s: &mut RecordStream, chunks: &[(u32, &[u8])]) -> Vec<String> {
    let mut out = Vec::new();
    for &(seq, data) in chunks {
        let chunk = Chunk {
            data,
            seq,
            ts: 0.0,
            ack: None,
        };
        s.push(chunk, &mut |ev| {
            out.push(match ev {
                StreamEvent::Record(r) => {
                    format!("rec {} {} seq{}", r.content_type, r.len, r.seq)
                }
                StreamEvent::Handshake { msg_type, len, .. } => format!("hs {msg_type} {len}"),
                _ => "other".into(),
            })
        })
        .unwrap();
    }
    out
}

/// Record bytes: header and payload.
fn rec(ctype: u8, payload: &[u8]) -> Vec<u8> {
    let mut r = vec![ctype, 3, 3];
    r.extend((payload.len() as u16).to_be_bytes());
    r.extend_from_slice(payload);
    r
}

/// A TLS 1.2 server flight: ServerHello, Certificate, ServerKeyExchange,
/// ServerHelloDone, one record each. `n`: the certificate's size.
fn server_flight(n: usize) -> Vec<u8> {
    let mut w = rec(22, &[2, 0, 0, 2, 3, 3]);
    let mut cert = vec![11, 0, (n >> 8) as u8, n as u8];
    cert.extend((0..n).map(|i| (i * 7) as u8));
    w.extend(rec(22, &cert));
    w.extend(rec(22, &[12, 0, 0, 3, 9, 9, 9]));
    w.extend(rec(22, &[14, 0, 0, 0]));
    w
}

/// Bytes lost across record boundaries (the end of the Certificate, the
/// ServerKeyExchange, the ServerHelloDone): the next chunk starting with
/// a record header (the server's CCS and Finished) is read.
#[test]
fn loss_across_records_resynchronises_at_a_chunk_starting_a_record() {
    let flight = server_flight(300);
    let mut tail = rec(20, &[1]);
    tail.extend(rec(22, &[0xab; 40]));
    let mut s = RecordStream::new(1024);
    // The flight's first 200 bytes, then the rest lost, then a chunk in
    // the middle of nowhere (not at a record start), then the CCS.
    let got = feed(
        &mut s,
        &[
            (0, &flight[..200]),
            (1000, &[0x55; 30][..]),
            (2000, &tail[..]),
        ],
    );
    assert_eq!(
        got,
        [
            "rec 22 6 seq0",
            "hs 2 2",
            "rec 22 304 seq11",
            "rec 20 1 seq2000",
            // Not encrypted here (no ccs_encrypts): whole messages or
            // nothing; 0xab... is no message.
            "rec 22 40 seq2006",
        ]
    );
    assert_eq!(s.resyncs(), 1);
    assert!(!s.hunting());
}

/// A chunk whose start looks like a header but whose next header (in
/// the same chunk) does not is no resynchronisation; nor is a 2-byte
/// ChangeCipherSpec or another version than the direction's.
#[test]
fn resynchronisation_wants_a_plausible_header_and_successor() {
    let flight = server_flight(300);
    let mut s = RecordStream::new(1024);
    feed(&mut s, &[(0, &flight[..200])]);
    let mut fake = rec(23, &[1, 2, 3]);
    fake.extend([0x99, 3, 3, 0, 1]);
    let mut other_version = rec(23, &[1, 2, 3]);
    other_version[2] = 1;
    let ccs2 = rec(20, &[1, 1]);
    let got = feed(
        &mut s,
        &[
            (1000, &fake[..]),
            (2000, &other_version[..]),
            (3000, &ccs2[..]),
            (4000, &[23, 3][..]),
        ],
    );
    assert!(got.is_empty(), "{got:?}");
    assert!(s.hunting() && s.resyncs() == 0);
    // A record ending with its chunk is taken.
    let got = feed(&mut s, &[(5000, &rec(23, &[7; 20])[..])]);
    assert_eq!(got, ["rec 23 20 seq5000"]);
    assert_eq!(s.resyncs(), 1);
}

/// A record that runs past its chunk is taken on trust; if the header
/// after it is not one, that was chance and hunting goes on (no error).
#[test]
fn an_unconfirmed_resynchronisation_that_fails_hunts_again() {
    let flight = server_flight(300);
    let mut s = RecordStream::new(1024);
    feed(&mut s, &[(0, &flight[..200])]);
    let big = rec(23, &[5; 100]);
    let got = feed(
        &mut s,
        &[
            (1000, &big[..60]),
            (1060, &big[60..]),
            (1105, &[0x42, 1, 2, 3, 4, 5][..]),
            (1111, &[1, 2, 3][..]),
        ],
    );
    assert_eq!(got, ["rec 23 100 seq1000"]);
    assert!(s.hunting() && !s.failed());
    let mut good = rec(23, &[5; 100]);
    good.extend(rec(21, &[1, 0]));
    let got = feed(&mut s, &[(3000, &good[..60]), (3060, &good[60..])]);
    assert_eq!(got, ["rec 23 100 seq3000", "rec 21 2 seq3105", "other"]);
    assert_eq!(s.resyncs(), 2);
}

/// After lost handshake bytes, messages are read again from the first
/// handshake record that is whole messages (ServerKeyExchange), not from
/// one that begins inside a message.
#[test]
fn messages_are_trusted_again_from_a_record_of_whole_messages() {
    let flight = server_flight(300);
    // A record continuing a message: its payload starts mid-message.
    let continued = rec(22, &[0x30, 0x82, 0x01, 0x0a, 0, 0]);
    let mut s = RecordStream::new(1024);
    let sh_end = 11;
    let cert_end = sh_end + 5 + 304;
    let mut got = feed(&mut s, &[(0, &flight[..100])]);
    // 100 bytes into the Certificate record, 50 of it are lost.
    s.lost(50);
    got.extend(feed(
        &mut s,
        &[
            (150, &flight[150..cert_end]),
            (cert_end as u32, &continued[..]),
        ],
    ));
    got.extend(feed(
        &mut s,
        &[((cert_end + continued.len()) as u32, &flight[cert_end..])],
    ));
    assert_eq!(
        got,
        [
            "rec 22 6 seq0",
            "hs 2 2",
            "rec 22 304 seq11",
            "rec 22 6 seq320",
            "rec 22 7 seq331",
            "hs 12 3",
            "rec 22 4 seq343",
            "hs 14 0",
        ]
    );
    assert_eq!(s.resyncs(), 0, "the records' framing was never lost");
}

/// Lost bytes are noticed from the chunks' sequence numbers alone.
#[test]
fn a_chunk_that_does_not_continue_the_stream_is_a_loss() {
    let flight = server_flight(300);
    let mut s = RecordStream::new(1024);
    let cert_end = 320;
    let got = feed(
        &mut s,
        &[
            (0, &flight[..5]),
            // The rest of the ServerHello and the Certificate's header
            // are lost: the chunk at 20 starts inside the Certificate.
            (20, &flight[20..cert_end]),
            (cert_end as u32, &flight[cert_end..]),
        ],
    );
    assert_eq!(
        got,
        [
            "rec 22 6 seq0",
            "rec 22 7 seq320",
            "hs 12 3",
            "rec 22 4 seq332",
            "hs 14 0"
        ]
    );
    assert_eq!(s.resyncs(), 1);
}

#[test]
fn encrypted_after_ccs_in_tls12() {
    let mut s = RecordStream::new(1024);
    s.ccs_encrypts = true;
    let wire = [20u8, 3, 3, 0, 1, 1, 22, 3, 3, 0, 3, 9, 9, 9];
    let got = collect(&mut s, &[&wire]);
    assert_eq!(
        got.len(),
        2,
        "no handshake message parsed from the encrypted Finished: {got:?}"
    );
}
